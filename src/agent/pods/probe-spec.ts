import { probeFailedMessage } from './probes.js';
import type { ContainerProbeSpecs, ContainerRunStatus, ProbeHandler, ProbeKind, ProbeSpec } from './run-spec.js';

/**
 * The agent's half of probes, as pure functions: a container's probes from its spec, as the run
 * spec carries them to the supervisor (Kubernetes' defaults, a named port looked up in the
 * container's `ports`), and the events a supervisor's probe statuses call for, in kubelet's words.
 */

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

/** Kubernetes' probe defaults (the API server fills them in; older objects may lack them). */
export const PROBE_DEFAULTS = { initialDelaySeconds: 0, periodSeconds: 10, timeoutSeconds: 1, successThreshold: 1, failureThreshold: 3 } as const;

const FIELDS: Record<ProbeKind, string> = { liveness: 'livenessProbe', readiness: 'readinessProbe', startup: 'startupProbe' };

function count(value: unknown, fallback: number): number {
  return Number.isInteger(value) && (value as number) > 0 ? (value as number) : fallback;
}

/** A port number, or a name the container declares in `ports`. */
function resolvePort(port: unknown, container: Json): number | string {
  if (typeof port === 'number') return port;
  if (typeof port === 'string' && /^\d+$/.test(port)) return Number(port);
  const named = (Array.isArray(container.ports) ? container.ports : []).filter(isObject).find((p) => p.name === port);
  if (named && typeof named.containerPort === 'number') return named.containerPort;
  return `port ${JSON.stringify(port)} is not a port number, nor the name of one of the container's ports`;
}

function handlerOf(probe: Json, container: Json): ProbeHandler {
  if (isObject(probe.exec)) {
    const command = Array.isArray(probe.exec.command) ? probe.exec.command.filter((a): a is string => typeof a === 'string') : [];
    return command.length ? { exec: { command } } : { invalid: { message: 'exec probe has no command' } };
  }
  const action = isObject(probe.httpGet) ? probe.httpGet : isObject(probe.tcpSocket) ? probe.tcpSocket : isObject(probe.grpc) ? probe.grpc : undefined;
  if (!action) return { invalid: { message: 'probe has no handler (exec, httpGet, tcpSocket or grpc)' } };
  const port = isObject(probe.grpc) ? action.port : resolvePort(action.port, container);
  if (typeof port !== 'number') return { invalid: { message: typeof port === 'string' ? port : 'probe has no port' } };
  const host = typeof action.host === 'string' && action.host ? { host: action.host } : {};
  if (isObject(probe.grpc)) return { grpc: { port, ...(typeof action.service === 'string' && action.service ? { service: action.service } : {}) } };
  if (isObject(probe.tcpSocket)) return { tcpSocket: { port, ...host } };
  const headers = (Array.isArray(action.httpHeaders) ? action.httpHeaders : [])
    .filter(isObject)
    .flatMap((h) => (typeof h.name === 'string' && h.name ? [{ name: h.name, value: typeof h.value === 'string' ? h.value : '' }] : []));
  return {
    httpGet: {
      scheme: action.scheme === 'HTTPS' ? 'HTTPS' : 'HTTP',
      port,
      path: typeof action.path === 'string' && action.path ? action.path : '/',
      headers,
      ...host,
    },
  };
}

/** A container's probes for its run spec; undefined when it has none. */
export function containerProbeSpecs(container: unknown): ContainerProbeSpecs | undefined {
  const c = isObject(container) ? container : {};
  const specs: ContainerProbeSpecs = {};
  for (const kind of ['liveness', 'readiness', 'startup'] as const) {
    const probe = c[FIELDS[kind]];
    if (!isObject(probe)) continue;
    const spec: ProbeSpec = {
      handler: handlerOf(probe, c),
      initialDelaySeconds: Number.isInteger(probe.initialDelaySeconds) && (probe.initialDelaySeconds as number) > 0 ? (probe.initialDelaySeconds as number) : 0,
      periodSeconds: count(probe.periodSeconds, PROBE_DEFAULTS.periodSeconds),
      timeoutSeconds: count(probe.timeoutSeconds, PROBE_DEFAULTS.timeoutSeconds),
      // Liveness and startup must have 1 (validation says so); readiness may ask for more.
      successThreshold: kind === 'readiness' ? count(probe.successThreshold, PROBE_DEFAULTS.successThreshold) : 1,
      failureThreshold: count(probe.failureThreshold, PROBE_DEFAULTS.failureThreshold),
    };
    if (kind !== 'readiness' && Number.isInteger(probe.terminationGracePeriodSeconds) && (probe.terminationGracePeriodSeconds as number) > 0) {
      spec.terminationGracePeriodSeconds = probe.terminationGracePeriodSeconds as number;
    }
    specs[kind] = spec;
  }
  return Object.keys(specs).length ? specs : undefined;
}

export interface ProbeEvent {
  /** Recorded once per key. */
  key: string;
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

/**
 * What a container's probe statuses call for: one `Unhealthy` event per streak of failures
 * (`Liveness probe failed: HTTP probe failed with statuscode: 500`), and a `Killing` event for
 * each kill a liveness or startup probe caused.
 */
export function probeEvents(status: ContainerRunStatus): ProbeEvent[] {
  const events: ProbeEvent[] = [];
  for (const kind of ['startup', 'liveness', 'readiness'] as const) {
    const probe = status.probes?.[kind];
    if (!probe) continue;
    if (probe.failureStreaks > 0 && probe.lastFailure !== undefined) {
      events.push({
        key: `probe/${status.name}/${kind}/failed/${probe.failureStreaks}`,
        type: 'Warning',
        reason: 'Unhealthy',
        message: probeFailedMessage(kind, probe.lastFailure),
      });
    }
    if (probe.kills > 0) {
      events.push({
        key: `probe/${status.name}/${kind}/killed/${probe.kills}`,
        type: 'Normal',
        reason: 'Killing',
        message: `Container ${status.name} failed ${kind} probe, will be restarted`,
      });
    }
  }
  return events;
}
