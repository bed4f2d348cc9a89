/**
 * Services and EndpointSlices as the API server stores them, for the Service datapath's tests
 * (test/unit/service-rules.test.ts, test/e2e/service-datapath.test.ts) and bench, and readers of
 * the nft script the rule builder writes.
 */
import type { KubeObject } from '../../src/apiserver/objects.js';

export interface PortSpec {
  name?: string;
  port: number;
  targetPort?: number | string;
  protocol?: string;
  nodePort?: number;
}

export function serviceObject(name: string, spec: Record<string, unknown> & { ports: PortSpec[] }, namespace = 'default'): KubeObject {
  return { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace }, spec: { type: 'ClusterIP', ...spec } };
}

export interface EndpointSpec {
  ip: string;
  node?: string;
  ready?: boolean;
  terminating?: boolean;
  serving?: boolean;
}

/** One EndpointSlice of `service` (named `<service>-<suffix>`), its endpoints and ports. */
export function sliceObject(
  service: string,
  endpoints: EndpointSpec[],
  ports: { name?: string; port: number; protocol?: string }[],
  options: { namespace?: string; suffix?: string } = {},
): KubeObject {
  return {
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: {
      name: `${service}-${options.suffix ?? 'a'}`,
      namespace: options.namespace ?? 'default',
      labels: { 'kubernetes.io/service-name': service },
    },
    addressType: 'IPv4',
    endpoints: endpoints.map((e) => ({
      addresses: [e.ip],
      conditions: {
        ...(e.ready === undefined ? {} : { ready: e.ready }),
        ...(e.serving === undefined ? {} : { serving: e.serving }),
        ...(e.terminating === undefined ? {} : { terminating: e.terminating }),
      },
      ...(e.node ? { nodeName: e.node } : {}),
    })),
    ports: ports.map((p) => ({ name: p.name ?? '', port: p.port, protocol: p.protocol ?? 'TCP' })),
  };
}

const PREFIX = 'add rule ip drover-proxy ';

/** The rules the script adds to chains whose name starts with `chainPrefix` (each chain's rules in order). */
export function scriptRules(script: string, chainPrefix: string): { chain: string; rule: string }[] {
  const out: { chain: string; rule: string }[] = [];
  for (const line of script.split('\n')) {
    if (!line.startsWith(PREFIX)) continue;
    const rest = line.slice(PREFIX.length);
    const space = rest.indexOf(' ');
    const chain = rest.slice(0, space);
    if (chain.startsWith(chainPrefix)) out.push({ chain, rule: rest.slice(space + 1) });
  }
  return out;
}

/** The elements the script adds to set or map `name`. */
export function scriptElements(script: string, name: string): string[] {
  const prefix = `add element ip drover-proxy ${name} { `;
  return script
    .split('\n')
    .filter((line) => line.startsWith(prefix))
    .flatMap((line) => line.slice(prefix.length, -2).split(', '));
}
