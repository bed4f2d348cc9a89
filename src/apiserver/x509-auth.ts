import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { IncomingMessage } from 'node:http';
import type { TLSSocket } from 'node:tls';
import type { Authenticator, UserInfo } from './auth.js';

/**
 * Client certificates as users, as kube-apiserver's x509 authenticator maps them: the subject's
 * common name is the user name, its organizations are the groups, and every such user is also
 * in `system:authenticated`.
 *
 * The chain is verified by TLS itself: the listener asks for (does not require) a certificate
 * and trusts only the client CA (src/apiserver/server.ts), so `socket.authorized` is true only
 * for a certificate that CA issued and that was valid at the handshake. Certificates from the
 * server CA or the node CA, self-signed ones and expired ones are not users. This module then
 * looks at the certificate itself: it must be for client authentication, not a CA, name exactly
 * one user, and still be valid at each request (a keep-alive connection may outlive it).
 */

/** Every authenticated user is in this group (RBAC's default bindings rely on it). */
export const AUTHENTICATED_GROUP = 'system:authenticated';

const CLIENT_AUTH = '1.3.6.1.5.5.7.3.2';
const ANY_EXTENDED_KEY_USAGE = '2.5.29.37.0';

export type CertificateUser = { user: UserInfo } | { refused: string };

interface ParsedCertificate {
  /** The user, or why there is none, whatever the time. */
  identity: CertificateUser;
  notBefore: number;
  notAfter: number;
}

function parse(der: Uint8Array): ParsedCertificate | { refused: string } {
  let cert: x509.X509Certificate;
  try {
    cert = new x509.X509Certificate(der);
  } catch (error) {
    return { refused: `the client certificate does not parse (${(error as Error).message})` };
  }
  return { identity: identity(cert), notBefore: cert.notBefore.getTime(), notAfter: cert.notAfter.getTime() };
}

function identity(cert: x509.X509Certificate): CertificateUser {
  const constraints = cert.getExtension(x509.BasicConstraintsExtension);
  if (constraints?.ca) return { refused: 'the client certificate is a CA certificate' };
  // As Go's verifier: no extended key usage at all means any usage; otherwise client auth (or any).
  const usages = cert.getExtension(x509.ExtendedKeyUsageExtension)?.usages.map(String);
  if (usages && !usages.includes(CLIENT_AUTH) && !usages.includes(ANY_EXTENDED_KEY_USAGE)) {
    return { refused: 'the client certificate is not for client authentication (extended key usage)' };
  }
  const names = cert.subjectName.getField('CN');
  if (names.length !== 1 || !names[0]) {
    return { refused: `the client certificate must name exactly one user (common name), not ${names.length}` };
  }
  const groups = cert.subjectName.getField('O');
  return { user: { name: names[0], groups: groups.includes(AUTHENTICATED_GROUP) ? groups : [...groups, AUTHENTICATED_GROUP] } };
}

function atTime(parsed: ParsedCertificate, now: number): CertificateUser {
  if (now < parsed.notBefore) return { refused: `the client certificate is not valid before ${new Date(parsed.notBefore).toISOString()}` };
  if (now > parsed.notAfter) return { refused: `the client certificate expired at ${new Date(parsed.notAfter).toISOString()}` };
  return parsed.identity;
}

/**
 * The user a verified client certificate (DER) names at `now`, or why it names none. Pure: the
 * chain's verification is TLS's; this judges the leaf only.
 */
export function clientCertificateUser(der: Uint8Array, now: number): CertificateUser {
  const parsed = parse(der);
  return 'identity' in parsed ? atTime(parsed, now) : parsed;
}

/** Whether the caller presented a client certificate at all (verified or not). */
export function presentsClientCertificate(req: IncomingMessage): boolean {
  const socket = req.socket as Partial<TLSSocket>;
  if (typeof socket.getPeerCertificate !== 'function') return false;
  return Boolean(socket.getPeerCertificate(false)?.raw);
}

export class X509Authenticator implements Authenticator {
  /**
   * Each connection's certificate, read and parsed once: a connection carries many requests, and
   * reading the peer certificate from TLS (Node builds an object of it, with three fingerprints)
   * cost more than the rest of a certificate user's authentication.
   */
  private readonly judged = new WeakMap<object, ParsedCertificate | { refused: string }>();

  constructor(private readonly now: () => number = Date.now) {}

  authenticate(req: IncomingMessage): UserInfo | undefined {
    const socket = req.socket as Partial<TLSSocket>;
    // A plain socket has no `authorized`; a TLS one has it true only for a certificate TLS verified.
    if (!socket.authorized) return undefined;
    let judged = this.judged.get(socket);
    if (!judged) {
      if (typeof socket.getPeerCertificate !== 'function') return undefined;
      const peer = socket.getPeerCertificate(false);
      if (!peer?.raw) return undefined;
      judged = parse(peer.raw);
      // The certificate read here stays the connection's: no TLS 1.2 renegotiation may bring
      // another one later (an attempt ends the connection). Go's TLS server, so kube-apiserver,
      // never renegotiates either; TLS 1.3 has no renegotiation at all.
      socket.disableRenegotiation?.();
      this.judged.set(socket, judged);
    }
    if (!('identity' in judged)) return undefined;
    // Validity at this request, not only at the handshake: a keep-alive connection may outlive it.
    const result = atTime(judged, this.now());
    return 'user' in result ? result.user : undefined;
  }
}
