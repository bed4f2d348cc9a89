import type { StatusCause } from '../errors.js';
import { isJsonObject, jsonEqual } from '../json.js';
import type { KubeObject } from '../objects.js';
import { dnsLabelProblem, dnsSubdomainProblem, labelValueProblem, qualifiedNameProblem } from '../validation.js';
import { isIPv4, isIP } from 'node:net';

/**
 * v1 Service defaults and validation, as kube-apiserver's SetDefaults_Service, the strategy's
 * PrepareForCreate/Update and ValidateService(Update), for a single-stack IPv4 cluster. The
 * allocation of ClusterIPs and node ports is ./service-allocation.ts.
 */

export const SERVICE_TYPES = ['ClusterIP', 'ExternalName', 'LoadBalancer', 'NodePort'] as const;
const PROTOCOLS = ['SCTP', 'TCP', 'UDP'];
const DEFAULT_AFFINITY_TIMEOUT_SECONDS = 10800;
const MAX_AFFINITY_TIMEOUT_SECONDS = 86400;

type Spec = Record<string, unknown>;
type Port = Record<string, unknown>;

const specOf = (svc: KubeObject): Spec => (isJsonObject(svc.spec) ? (svc.spec as Spec) : {});
const portsOf = (spec: Spec): Port[] => (Array.isArray(spec.ports) ? (spec.ports as unknown[]).filter(isJsonObject) as Port[] : []);

/** Defaults kept on every write (SetDefaults_Service and the strategy's normalisations). */
export function applyServiceDefaults(svc: KubeObject): void {
  if (!isJsonObject(svc.spec)) svc.spec = {};
  const spec = svc.spec as Spec;
  spec.type ??= 'ClusterIP';
  spec.sessionAffinity ??= 'None';
  if (spec.sessionAffinity === 'ClientIP') {
    const config = (isJsonObject(spec.sessionAffinityConfig) ? spec.sessionAffinityConfig : (spec.sessionAffinityConfig = {})) as Record<string, unknown>;
    const clientIP = (isJsonObject(config.clientIP) ? config.clientIP : (config.clientIP = {})) as Record<string, unknown>;
    clientIP.timeoutSeconds ??= DEFAULT_AFFINITY_TIMEOUT_SECONDS;
  }
  for (const port of portsOf(spec)) {
    port.protocol ??= 'TCP';
    if (port.targetPort === undefined || port.targetPort === 0 || port.targetPort === '') port.targetPort = port.port;
  }
  if (spec.type === 'ExternalName') return;
  spec.internalTrafficPolicy ??= 'Cluster';
  if (spec.type === 'NodePort' || spec.type === 'LoadBalancer') spec.externalTrafficPolicy ??= 'Cluster';
  if (spec.type === 'LoadBalancer') spec.allocateLoadBalancerNodePorts ??= true;
  // clusterIP and clusterIPs say the same thing: one filled from the other.
  if (typeof spec.clusterIP === 'string' && spec.clusterIP && !Array.isArray(spec.clusterIPs)) spec.clusterIPs = [spec.clusterIP];
  if ((spec.clusterIP === undefined || spec.clusterIP === '') && Array.isArray(spec.clusterIPs) && typeof spec.clusterIPs[0] === 'string') {
    spec.clusterIP = spec.clusterIPs[0];
  }
  spec.ipFamilyPolicy ??= 'SingleStack';
  spec.ipFamilies ??= ['IPv4'];
}

/** On create: the status is the server's (an empty load balancer status). */
export function prepareServiceForCreate(svc: KubeObject): void {
  svc.status = { loadBalancer: {} };
}

/**
 * On an update: what the client leaves out and the stored Service keeps, as kube's
 * patchAllocatedValues: the ClusterIP, and each port's node port (matched by port and protocol)
 * while the Service still holds them, so `kubectl apply` and `replace` of the original manifest
 * keep the allocated values.
 */
export function keepAllocatedValues(next: KubeObject, current: KubeObject): void {
  const nextSpec = specOf(next);
  const currentSpec = specOf(current);
  if (!isJsonObject(next.spec)) next.spec = nextSpec;
  const nextType = nextSpec.type ?? 'ClusterIP';
  if (nextType !== 'ExternalName' && currentSpec.type !== 'ExternalName') {
    if ((nextSpec.clusterIP === undefined || nextSpec.clusterIP === '') && currentSpec.clusterIP) {
      nextSpec.clusterIP = currentSpec.clusterIP;
      if (!Array.isArray(nextSpec.clusterIPs) || nextSpec.clusterIPs.length === 0) nextSpec.clusterIPs = currentSpec.clusterIPs;
    }
  }
  if (nextType === 'NodePort' || nextType === 'LoadBalancer') {
    const held = portsOf(currentSpec);
    for (const port of portsOf(nextSpec)) {
      if (port.nodePort) continue;
      const same = held.find((p) => p.port === port.port && (p.protocol ?? 'TCP') === (port.protocol ?? 'TCP') && p.nodePort);
      if (same) port.nodePort = same.nodePort;
    }
  }
  next.status = current.status;
}

const invalid = (field: string, value: unknown, why: string): StatusCause => ({
  reason: 'FieldValueInvalid',
  field,
  message: `Invalid value: ${typeof value === 'string' ? JSON.stringify(value) : String(value)}: ${why}`,
});
const required = (field: string): StatusCause => ({ reason: 'FieldValueRequired', field, message: 'Required value' });
const forbidden = (field: string, why: string): StatusCause => ({ reason: 'FieldValueForbidden', field, message: `Forbidden: ${why}` });
const notSupported = (field: string, value: unknown, supported: readonly string[]): StatusCause => ({
  reason: 'FieldValueNotSupported',
  field,
  message: `Unsupported value: ${JSON.stringify(value)}: supported values: ${supported.map((s) => JSON.stringify(s)).join(', ')}`,
});

/** An IANA service name (a named port): at most 15 characters, lower case, a letter, no `--`. */
export function portNameProblem(name: string): string | undefined {
  if (name.length > 15) return 'must be no more than 15 characters';
  if (!/^[-a-z0-9]+$/.test(name)) return "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)";
  if (!/[a-z]/.test(name)) return 'must contain at least one letter (a-z)';
  if (name.includes('--')) return "must not contain consecutive hyphens ('--')";
  if (name.startsWith('-') || name.endsWith('-')) return 'must not begin or end with a hyphen';
  return undefined;
}

const validPort = (n: unknown): boolean => typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 65535;

function validatePorts(spec: Spec, causes: StatusCause[]): void {
  const ports = portsOf(spec);
  const headless = spec.clusterIP === 'None';
  if (ports.length === 0 && !headless && spec.type !== 'ExternalName') causes.push(required('spec.ports'));
  const names = new Set<string>();
  const seen = new Set<string>();
  ports.forEach((port, i) => {
    const at = `spec.ports[${i}]`;
    const name = typeof port.name === 'string' ? port.name : '';
    if (ports.length > 1 && !name) causes.push(required(`${at}.name`));
    if (name) {
      const problem = dnsLabelProblem(name);
      if (problem) causes.push(invalid(`${at}.name`, name, problem));
      else if (names.has(name)) causes.push({ reason: 'FieldValueDuplicate', field: `${at}.name`, message: `Duplicate value: ${JSON.stringify(name)}` });
      names.add(name);
    }
    if (!validPort(port.port)) causes.push(invalid(`${at}.port`, port.port, 'must be between 1 and 65535, inclusive'));
    if (!PROTOCOLS.includes(String(port.protocol))) causes.push(notSupported(`${at}.protocol`, port.protocol, PROTOCOLS));
    const target = port.targetPort;
    if (typeof target === 'string') {
      const problem = portNameProblem(target);
      if (problem) causes.push(invalid(`${at}.targetPort`, target, problem));
    } else if (!validPort(target)) {
      causes.push(invalid(`${at}.targetPort`, target, 'must be between 1 and 65535, inclusive'));
    }
    if (port.nodePort !== undefined && port.nodePort !== 0) {
      if (spec.type === 'ClusterIP' || spec.type === 'ExternalName') {
        causes.push(forbidden(`${at}.nodePort`, `may not be used when \`type\` is '${String(spec.type)}'`));
      } else if (!validPort(port.nodePort)) {
        causes.push(invalid(`${at}.nodePort`, port.nodePort, 'must be between 1 and 65535, inclusive'));
      }
    }
    const key = `${String(port.port)}/${String(port.protocol)}`;
    if (seen.has(key)) causes.push({ reason: 'FieldValueDuplicate', field: at, message: `Duplicate value: {"port":${String(port.port)},"protocol":${JSON.stringify(port.protocol)}}` });
    seen.add(key);
    if (port.appProtocol !== undefined && (typeof port.appProtocol !== 'string' || qualifiedNameProblem(port.appProtocol))) {
      causes.push(invalid(`${at}.appProtocol`, port.appProtocol, qualifiedNameProblem(String(port.appProtocol)) ?? 'must be a string'));
    }
  });
}

function validateAddresses(spec: Spec, causes: StatusCause[]): void {
  const clusterIP = spec.clusterIP;
  const clusterIPs = spec.clusterIPs;
  if (spec.type === 'ExternalName') {
    if (clusterIP !== undefined && clusterIP !== '') causes.push(forbidden('spec.clusterIPs', 'may not be set for ExternalName services'));
    const name = typeof spec.externalName === 'string' ? spec.externalName.replace(/\.$/, '') : '';
    if (!name) causes.push(required('spec.externalName'));
    else {
      const problem = dnsSubdomainProblem(name);
      if (problem) causes.push(invalid('spec.externalName', spec.externalName, problem));
    }
    return;
  }
  if (clusterIP !== undefined && clusterIP !== '' && clusterIP !== 'None') {
    if (typeof clusterIP !== 'string' || !isIP(clusterIP)) causes.push(invalid('spec.clusterIPs[0]', clusterIP, 'must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)'));
    else if (!isIPv4(clusterIP)) causes.push(invalid('spec.clusterIPs[0]', clusterIP, 'IPv6 is not configured on this cluster'));
  }
  if (Array.isArray(clusterIPs)) {
    if (clusterIPs.length > 1) causes.push(invalid('spec.clusterIPs', clusterIPs.join(','), 'this cluster is single-stack (IPv4): at most one cluster IP'));
    if (clusterIPs.length > 0 && clusterIPs[0] !== clusterIP) causes.push(invalid('spec.clusterIPs[0]', clusterIPs[0], 'must match `clusterIP` if specified'));
  }
  if (clusterIP === 'None' && (spec.type === 'NodePort' || spec.type === 'LoadBalancer')) {
    causes.push(invalid('spec.clusterIPs[0]', 'None', 'may not be set to \'None\' for LoadBalancer or NodePort services'));
  }
  const families = spec.ipFamilies;
  if (Array.isArray(families)) {
    families.forEach((family, i) => {
      if (family === 'IPv6') causes.push(invalid(`spec.ipFamilies[${i}]`, family, 'not configured on this cluster'));
      else if (family !== 'IPv4') causes.push(notSupported(`spec.ipFamilies[${i}]`, family, ['IPv4', 'IPv6']));
    });
    if (families.length > 1) causes.push(invalid('spec.ipFamilies', families.join(','), 'this cluster is not configured for dual-stack services'));
  }
  const policy = spec.ipFamilyPolicy;
  if (policy === 'RequireDualStack') causes.push(invalid('spec.ipFamilyPolicy', policy, 'this cluster is not configured for dual-stack services'));
  else if (policy !== 'SingleStack' && policy !== 'PreferDualStack') causes.push(notSupported('spec.ipFamilyPolicy', policy, ['PreferDualStack', 'RequireDualStack', 'SingleStack']));
}

function validateSelector(spec: Spec, causes: StatusCause[]): void {
  if (spec.selector === undefined || spec.selector === null) return;
  if (!isJsonObject(spec.selector)) {
    causes.push(invalid('spec.selector', '', 'must be a map of label keys to values'));
    return;
  }
  for (const [key, value] of Object.entries(spec.selector)) {
    const keyProblem = qualifiedNameProblem(key);
    if (keyProblem) causes.push(invalid('spec.selector', key, keyProblem));
    const valueProblem = typeof value === 'string' ? labelValueProblem(value) : 'must be a string';
    if (valueProblem) causes.push(invalid(`spec.selector`, value, valueProblem));
  }
}

function validatePolicies(spec: Spec, causes: StatusCause[]): void {
  if (!['ClientIP', 'None'].includes(String(spec.sessionAffinity))) causes.push(notSupported('spec.sessionAffinity', spec.sessionAffinity, ['ClientIP', 'None']));
  if (spec.sessionAffinity === 'ClientIP') {
    const config = spec.sessionAffinityConfig as { clientIP?: { timeoutSeconds?: unknown } } | undefined;
    const timeout = config?.clientIP?.timeoutSeconds;
    if (typeof timeout !== 'number' || !Number.isInteger(timeout) || timeout < 1 || timeout > MAX_AFFINITY_TIMEOUT_SECONDS) {
      causes.push(invalid('spec.sessionAffinityConfig.clientIP.timeoutSeconds', timeout, `must be greater than 0 and less than or equal to ${MAX_AFFINITY_TIMEOUT_SECONDS}`));
    }
  } else if (spec.sessionAffinityConfig !== undefined && spec.sessionAffinityConfig !== null) {
    causes.push(forbidden('spec.sessionAffinityConfig', `must not be set when session affinity is ${String(spec.sessionAffinity)}`));
  }
  if (spec.type === 'ExternalName') return;
  const external = spec.externalTrafficPolicy;
  if (spec.type === 'NodePort' || spec.type === 'LoadBalancer') {
    if (external !== 'Cluster' && external !== 'Local') causes.push(notSupported('spec.externalTrafficPolicy', external, ['Cluster', 'Local']));
  } else if (external !== undefined && external !== '') {
    causes.push(invalid('spec.externalTrafficPolicy', external, 'may only be set for externally-accessible services'));
  }
  if (spec.internalTrafficPolicy !== 'Cluster' && spec.internalTrafficPolicy !== 'Local') {
    causes.push(notSupported('spec.internalTrafficPolicy', spec.internalTrafficPolicy, ['Cluster', 'Local']));
  }
}

export function validateService(svc: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  if (svc.spec !== undefined && !isJsonObject(svc.spec)) return [{ reason: 'FieldValueInvalid', field: 'spec', message: 'must be an object' }];
  const spec = specOf(svc);
  if (!SERVICE_TYPES.includes(spec.type as (typeof SERVICE_TYPES)[number])) {
    causes.push(notSupported('spec.type', spec.type, SERVICE_TYPES));
    return causes;
  }
  validatePorts(spec, causes);
  validateAddresses(spec, causes);
  validateSelector(spec, causes);
  validatePolicies(spec, causes);
  return causes;
}

/** What an update may not change: the ClusterIP, unless the Service moves from or to ExternalName. */
export function validateServiceUpdate(next: KubeObject, current: KubeObject): StatusCause[] {
  const nextSpec = specOf(next);
  const currentSpec = specOf(current);
  if (nextSpec.type === 'ExternalName' || currentSpec.type === 'ExternalName') return [];
  const before = currentSpec.clusterIP ?? '';
  const after = nextSpec.clusterIP ?? '';
  if (before && !jsonEqual(before, after)) return [invalid('spec.clusterIPs[0]', after, 'may not change once set')];
  return [];
}
