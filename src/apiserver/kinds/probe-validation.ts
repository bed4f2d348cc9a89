import type { StatusCause } from '../errors.js';

/**
 * A container's liveness, readiness and startup probes: kube-apiserver's defaults (period 10 s,
 * timeout 1 s, thresholds 1 and 3, httpGet path `/` and scheme HTTP, so `kubectl get -o yaml`
 * shows them as on any cluster) and its validation rules, with its wording.
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

const PROBES = ['livenessProbe', 'readinessProbe', 'startupProbe'] as const;
const HANDLERS = ['exec', 'httpGet', 'tcpSocket', 'grpc'] as const;

/** What kube-apiserver fills in a probe the client left blank. */
export function defaultProbes(container: Json): void {
  for (const field of PROBES) {
    const probe = container[field];
    if (!isObject(probe)) continue;
    for (const [key, value] of [['timeoutSeconds', 1], ['periodSeconds', 10], ['successThreshold', 1], ['failureThreshold', 3]] as const) {
      if (probe[key] === undefined || probe[key] === null || probe[key] === 0) probe[key] = value;
    }
    if (isObject(probe.httpGet)) {
      if (probe.httpGet.path === undefined || probe.httpGet.path === '') probe.httpGet.path = '/';
      if (probe.httpGet.scheme === undefined || probe.httpGet.scheme === '') probe.httpGet.scheme = 'HTTP';
    }
  }
}

const invalid = (field: string, value: unknown, detail: string): StatusCause => ({
  reason: 'FieldValueInvalid',
  message: `Invalid value: ${JSON.stringify(value)}: ${detail}`,
  field,
});
const required = (field: string, detail = ''): StatusCause => ({ reason: 'FieldValueRequired', message: detail ? `Required value: ${detail}` : 'Required value', field });

/** apimachinery's IsValidPortName (an IANA service name). */
function portNameProblems(name: string): string[] {
  const problems: string[] = [];
  if (name.length > 15) problems.push('must be no more than 15 characters');
  if (!/^[-a-z0-9]+$/.test(name)) problems.push('must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)');
  if (name.includes('--')) problems.push('must not contain consecutive hyphens');
  if (!/[a-z]/.test(name)) problems.push('must contain at least one letter (a-z)');
  if (name.startsWith('-') || name.endsWith('-')) problems.push('must not begin or end with a hyphen');
  return problems;
}

function portNumProblem(port: unknown): string | undefined {
  return Number.isInteger(port) && (port as number) >= 1 && (port as number) <= 65535 ? undefined : 'must be between 1 and 65535, inclusive';
}

function portCauses(port: unknown, field: string, namesAllowed: boolean): StatusCause[] {
  if (port === undefined || port === null || port === '' || port === 0) return [required(field)];
  if (typeof port === 'string' && namesAllowed) return portNameProblems(port).map((p) => invalid(field, port, p));
  const problem = portNumProblem(port);
  return problem ? [invalid(field, port, problem)] : [];
}

function handlerCauses(probe: Json, at: string): StatusCause[] {
  const present = HANDLERS.filter((h) => probe[h] !== undefined && probe[h] !== null);
  if (present.length === 0) return [required(at, 'must specify a handler type')];
  if (present.length > 1) {
    return [{ reason: 'FieldValueForbidden', message: 'Forbidden: may not specify more than 1 handler type', field: `${at}.${present[1]}` }];
  }
  const kind = present[0]!;
  const action = isObject(probe[kind]) ? (probe[kind] as Json) : {};
  const field = `${at}.${kind}`;
  switch (kind) {
    case 'exec':
      return Array.isArray(action.command) && action.command.length > 0 && action.command.every((a) => typeof a === 'string')
        ? []
        : [required(`${field}.command`)];
    case 'httpGet': {
      const causes = portCauses(action.port, `${field}.port`, true);
      if (typeof action.path !== 'string' || !action.path) causes.push(required(`${field}.path`));
      if (action.scheme !== 'HTTP' && action.scheme !== 'HTTPS') {
        causes.push({ reason: 'FieldValueNotSupported', message: `Unsupported value: ${JSON.stringify(action.scheme)}: supported values: "HTTP", "HTTPS"`, field: `${field}.scheme` });
      }
      if (action.host !== undefined && typeof action.host !== 'string') causes.push(invalid(`${field}.host`, action.host, 'must be a string'));
      const headers = action.httpHeaders;
      if (headers !== undefined && !Array.isArray(headers)) causes.push(invalid(`${field}.httpHeaders`, headers, 'must be a list'));
      for (const header of Array.isArray(headers) ? headers : []) {
        const name = isObject(header) ? header.name : undefined;
        if (typeof name !== 'string' || !/^[-A-Za-z0-9]+$/.test(name)) {
          causes.push(
            invalid(`${field}.httpHeaders`, name ?? '', "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name',  regex used for validation is '[-A-Za-z0-9]+')"),
          );
        }
      }
      return causes;
    }
    case 'tcpSocket':
      return portCauses(action.port, `${field}.port`, true);
    case 'grpc':
      return portCauses(action.port, `${field}.port`, false);
  }
}

function nonNegative(probe: Json, key: string, at: string): StatusCause[] {
  const value = probe[key];
  if (value === undefined || value === null) return [];
  if (!Number.isInteger(value)) return [invalid(`${at}.${key}`, value, 'must be an integer')];
  return (value as number) < 0 ? [invalid(`${at}.${key}`, value, 'must be greater than or equal to 0')] : [];
}

/** A container's three probes (`at`: its path, e.g. `spec.containers[0]`; `init`: an init container). */
export function validateProbes(container: Json, at: string, causes: StatusCause[], init = false): void {
  for (const field of PROBES) {
    const value = container[field];
    if (value === undefined || value === null) continue;
    const where = `${at}.${field}`;
    if (init && container.restartPolicy !== 'Always') {
      causes.push({ reason: 'FieldValueForbidden', message: 'Forbidden: may not be set for init containers without restartPolicy=Always', field: where });
      continue;
    }
    if (!isObject(value)) {
      causes.push(invalid(where, value, 'must be an object'));
      continue;
    }
    causes.push(...handlerCauses(value, where));
    for (const key of ['initialDelaySeconds', 'timeoutSeconds', 'periodSeconds', 'successThreshold', 'failureThreshold']) {
      causes.push(...nonNegative(value, key, where));
    }
    const grace = value.terminationGracePeriodSeconds;
    if (grace !== undefined && grace !== null) {
      if (field === 'readinessProbe') causes.push(invalid(`${where}.terminationGracePeriodSeconds`, grace, 'must not be set for readinessProbes'));
      else if (!Number.isInteger(grace) || (grace as number) <= 0) causes.push(invalid(`${where}.terminationGracePeriodSeconds`, grace, 'must be greater than 0'));
    }
    if (field !== 'readinessProbe' && value.successThreshold !== undefined && value.successThreshold !== 1) {
      causes.push(invalid(`${where}.successThreshold`, value.successThreshold, 'must be 1'));
    }
  }
}
