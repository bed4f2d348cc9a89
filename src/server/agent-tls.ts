import { checkServerIdentity, type PeerCertificate } from 'node:tls';

/**
 * How an API server reaches a node's agent (logs, exec and friends, usage figures): at the address
 * the node registered, proving itself with its client certificate from the client CA, and
 * accepting only that node's serving certificate from the node CA, made out for that address.
 */

export interface AgentClientCredentials {
  /** The node CA: the only issuer an agent's serving certificate may come from. */
  nodeCaPem: string;
  clientCertificatePem: string;
  clientKeyPem: string;
}

/** The agent's certificate must be this node's, for the address dialled. */
export function agentIdentityProblem(nodeName: string, ip: string, cert: PeerCertificate): string | undefined {
  if (cert.subject?.CN !== `system:node:${nodeName}`) return `certificate is for "${String(cert.subject?.CN)}", not node ${nodeName}`;
  const mismatch = checkServerIdentity(ip, cert);
  return mismatch ? mismatch.message : undefined;
}

/** The TLS options of a connection to `nodeName`'s agent at `ip` (for https.request and ws alike). */
export function agentTlsOptions(
  credentials: AgentClientCredentials,
  nodeName: string,
  ip: string,
): { ca: string; cert: string; key: string; servername: string; checkServerIdentity: (host: string, cert: PeerCertificate) => Error | undefined } {
  return {
    ca: credentials.nodeCaPem,
    cert: credentials.clientCertificatePem,
    key: credentials.clientKeyPem,
    // Node names need not resolve: the certificate must name this node and the registered IP.
    servername: '',
    checkServerIdentity: (_host, cert) => {
      const problem = agentIdentityProblem(nodeName, ip, cert);
      return problem ? new Error(problem) : undefined;
    },
  };
}
