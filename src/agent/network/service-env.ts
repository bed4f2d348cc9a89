import { getPath, type KubeObject } from '../../apiserver/objects.js';

/**
 * The Service environment variables kubelet gives every container (docker links style): for each
 * Service of the pod's namespace with a ClusterIP (`enableServiceLinks`, default true) and always
 * for `kubernetes` of `default`: `<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT`,
 * `<NAME>_SERVICE_PORT_<PORT NAME>`, `<NAME>_PORT`, `<NAME>_PORT_<port>_<PROTO>` and its `_PROTO`,
 * `_PORT`, `_ADDR`. NAME is the Service name upper-cased with `-` as `_`. A container's own `env`
 * wins over these; these win over its image's. Pure.
 */

interface ServicePort {
  name?: string;
  port?: number;
  protocol?: string;
}

function envName(name: string): string {
  return name.toUpperCase().replace(/-/g, '_');
}

function hasClusterIp(service: KubeObject): string | undefined {
  const ip = getPath(service, ['spec', 'clusterIP']);
  return typeof ip === 'string' && ip !== '' && ip !== 'None' ? ip : undefined;
}

function variablesOf(service: KubeObject, ip: string): Record<string, string> {
  const name = envName(service.metadata.name!);
  const ports = ((getPath(service, ['spec', 'ports']) as ServicePort[] | undefined) ?? []).filter((p) => typeof p.port === 'number');
  const vars: Record<string, string> = { [`${name}_SERVICE_HOST`]: ip };
  if (ports.length === 0) return vars;
  const first = ports[0]!;
  vars[`${name}_SERVICE_PORT`] = String(first.port);
  for (const port of ports) if (port.name) vars[`${name}_SERVICE_PORT_${envName(port.name)}`] = String(port.port);
  const proto = (first.protocol ?? 'TCP').toLowerCase();
  vars[`${name}_PORT`] = `${proto}://${ip}:${first.port}`;
  for (const port of ports) {
    const protocol = (port.protocol ?? 'TCP').toUpperCase();
    const prefix = `${name}_PORT_${port.port}_${protocol}`;
    vars[prefix] = `${protocol.toLowerCase()}://${ip}:${port.port}`;
    vars[`${prefix}_PROTO`] = protocol.toLowerCase();
    vars[`${prefix}_PORT`] = String(port.port);
    vars[`${prefix}_ADDR`] = ip;
  }
  return vars;
}

export function serviceEnvironment(pod: KubeObject, services: readonly KubeObject[]): Record<string, string> {
  const namespace = pod.metadata.namespace ?? 'default';
  const links = getPath(pod, ['spec', 'enableServiceLinks']) !== false;
  const chosen = new Map<string, KubeObject>();
  for (const service of services) {
    if (service.metadata.namespace === namespace && links) chosen.set(service.metadata.name!, service);
  }
  // The API server's Service, in every namespace (a pod's own Service of that name comes first).
  const master = services.find((s) => s.metadata.namespace === 'default' && s.metadata.name === 'kubernetes');
  if (master && !chosen.has('kubernetes')) chosen.set('kubernetes', master);
  const env: Record<string, string> = {};
  for (const name of [...chosen.keys()].sort()) {
    const service = chosen.get(name)!;
    const ip = hasClusterIp(service);
    if (ip) Object.assign(env, variablesOf(service, ip));
  }
  return env;
}
