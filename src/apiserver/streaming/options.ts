import { errors } from '../errors.js';
import { isJsonObject } from '../json.js';
import type { KubeObject } from '../objects.js';
import { queryBool } from '../query.js';

/**
 * The queries of `pods/exec`, `pods/attach` and `pods/portforward` (PodExecOptions,
 * PodAttachOptions, PodPortForwardOptions), checked before anything is upgraded: every mistake is
 * a 400 naming what is wrong, as kube-apiserver answers it, and kubectl prints it.
 */

export type StreamKind = 'exec' | 'attach' | 'portforward';
export const STREAM_SUBRESOURCES: ReadonlySet<string> = new Set<StreamKind>(['exec', 'attach', 'portforward']);

export interface RemoteCommandOptions {
  kind: 'exec' | 'attach';
  /** exec only: the argv to run (at least one word). */
  command: string[];
  /** Undefined until resolved against the pod (then the container the session reaches). */
  container?: string;
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
  tty: boolean;
}

export interface PortForwardOptions {
  kind: 'portforward';
  /** The ports the client named in the query (optional: kubectl names them per stream). */
  ports: number[];
}

export type StreamOptions = RemoteCommandOptions | PortForwardOptions;

const MAX_COMMAND_WORDS = 4096;

export function parsePort(text: string, what = 'port'): number {
  const port = Number(text);
  if (!/^\d+$/.test(text) || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw errors.badRequest(`${what} ${JSON.stringify(text.slice(0, 40))} is not a valid port number: it must be an integer from 1 to 65535`);
  }
  return port;
}

/** The query, checked alone (the pod is not read yet). */
export function parseStreamQuery(kind: StreamKind, params: URLSearchParams): StreamOptions {
  if (kind === 'portforward') {
    const ports = params.getAll('ports').flatMap((value) => value.split(',')).filter((p) => p !== '').map((p) => parsePort(p.trim()));
    return { kind, ports };
  }
  const command = params.getAll('command');
  if (kind === 'exec' && command.length === 0) {
    throw errors.badRequest('you must specify at least 1 command: the query needs command=<word> (repeated for each argument)');
  }
  if (kind === 'attach' && command.length > 0) throw errors.badRequest('attach takes no command: it joins the container\'s own process');
  if (command.length > MAX_COMMAND_WORDS) throw errors.badRequest(`the command has ${command.length} words; at most ${MAX_COMMAND_WORDS} are accepted`);
  if (command.some((word) => word.includes('\0'))) throw errors.badRequest('a command word may not contain a NUL character');
  const stdin = queryBool(params, 'stdin');
  const stdout = queryBool(params, 'stdout');
  const stderr = queryBool(params, 'stderr');
  const tty = queryBool(params, 'tty');
  if (!stdin && !stdout && !stderr) {
    throw errors.badRequest('you must specify at least one of stdin, stdout, stderr (e.g. stdout=true)');
  }
  if (tty && stderr) {
    throw errors.badRequest('stderr cannot be requested with tty=true: a terminal carries stderr on stdout (kubectl sends stderr=false with -t)');
  }
  const container = params.get('container');
  return { kind, command, stdin, stdout, stderr, tty, ...(container ? { container } : {}) };
}

function names(pod: KubeObject, field: string): string[] {
  const list = isJsonObject(pod.spec) ? pod.spec[field] : undefined;
  return Array.isArray(list) ? list.filter(isJsonObject).map((c) => String(c.name)) : [];
}

/**
 * The container a session reaches: the named one (a container, or an ephemeral one: `kubectl
 * debug` attaches to the container it added), or the only one. The pod must be on a node and
 * not finished.
 */
export function resolveStreamTarget(pod: KubeObject, options: StreamOptions): StreamOptions {
  const podName = pod.metadata.name ?? '';
  const phase = isJsonObject(pod.status) ? pod.status.phase : undefined;
  if (phase === 'Succeeded' || phase === 'Failed') {
    throw errors.badRequest(`cannot ${options.kind} into a container in a completed pod; current phase is ${String(phase)}`);
  }
  const nodeName = isJsonObject(pod.spec) ? pod.spec.nodeName : undefined;
  if (typeof nodeName !== 'string' || !nodeName) {
    throw errors.badRequest(`pod ${podName} does not have a host assigned`);
  }
  if (options.kind === 'portforward') return options;
  const containers = names(pod, 'containers');
  const ephemeral = names(pod, 'ephemeralContainers');
  if (options.container === undefined) {
    if (containers.length !== 1) {
      throw errors.badRequest(`a container name must be specified for pod ${podName}, choose one of: [${containers.join(' ')}]`);
    }
    return { ...options, container: containers[0]! };
  }
  if (!containers.includes(options.container) && !ephemeral.includes(options.container)) {
    const init = names(pod, 'initContainers').includes(options.container);
    throw errors.badRequest(
      init
        ? `container ${options.container} is an init container of pod ${podName}: it runs before the others and cannot be reached`
        : `container ${options.container} is not valid for pod ${podName}`,
    );
  }
  return options;
}

/** The query an agent gets for a session: the checked options, nothing the client added. */
export function agentQuery(options: StreamOptions): URLSearchParams {
  const query = new URLSearchParams();
  if (options.kind === 'portforward') {
    for (const port of options.ports) query.append('ports', String(port));
    return query;
  }
  for (const word of options.command) query.append('command', word);
  for (const flag of ['stdin', 'stdout', 'stderr', 'tty'] as const) if (options[flag]) query.set(flag, 'true');
  return query;
}
