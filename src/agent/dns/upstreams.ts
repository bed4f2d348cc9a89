import { isIP, isIPv4, isIPv6 } from 'node:net';

/**
 * Where the cluster DNS forwards names outside the cluster domain: the node's own resolvers from
 * /etc/resolv.conf, as K3s's CoreDNS does (`forward . /etc/resolv.conf`). Loopback resolvers are
 * skipped: a stub such as systemd-resolved's 127.0.0.53 is not reachable from pods' traffic and
 * would loop (CoreDNS's `loop` plugin exists for that); so is the cluster-dns address itself.
 */

export interface Upstream {
  address: string;
  port: number;
  family: 4 | 6;
}

export class UpstreamError extends Error {
  override name = 'UpstreamError';
}

/** `ip`, `ip:port` or `[ipv6]:port`. */
export function parseUpstream(text: string): Upstream {
  const bracketed = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(text);
  const withPort = /^([^:]+):(\d{1,5})$/.exec(text);
  const [address, port] = bracketed ? [bracketed[1]!, bracketed[2]] : withPort ? [withPort[1]!, withPort[2]] : [text, undefined];
  const family = isIP(address);
  const number = port === undefined ? 53 : Number(port);
  if (family === 0) throw new UpstreamError(`upstream resolver ${JSON.stringify(text)} is not an IP address (ip, ip:port or [ipv6]:port)`);
  if (number < 1 || number > 65535) throw new UpstreamError(`upstream resolver ${JSON.stringify(text)}: port out of range`);
  return { address, port: number, family: family as 4 | 6 };
}

export function isLoopback(address: string): boolean {
  if (isIPv4(address)) return address.startsWith('127.');
  return isIPv6(address) && (address === '::1' || /^0*:0*:0*:0*:0*:0*:0*:0*1$/.test(address) || address.toLowerCase() === '::ffff:127.0.0.1');
}

/** The usable `nameserver` lines of a resolv.conf, in order (the order is the try order). */
export function upstreamsFromResolvConf(text: string, clusterDns: string): Upstream[] {
  const upstreams: Upstream[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.replace(/[#;].*$/, '').trim();
    const match = /^nameserver\s+(\S+)$/.exec(line);
    if (!match) continue;
    // A scoped IPv6 address (fe80::1%eth0) names an interface Node's sockets take as is.
    const address = match[1]!;
    if (isIP(address.replace(/%.*$/, '')) === 0) continue;
    if (isLoopback(address) || address === clusterDns) continue;
    if (upstreams.some((u) => u.address === address)) continue;
    upstreams.push({ address, port: 53, family: isIPv4(address) ? 4 : 6 });
  }
  return upstreams;
}
