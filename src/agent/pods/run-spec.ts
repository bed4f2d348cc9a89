import fs from 'node:fs';
import path from 'node:path';
import { writeFileAtomic } from '../../security/files.js';

/**
 * The contract between the agent and a pod's supervisor: what to run (`pod.json`, written by the
 * agent before it spawns the supervisor) and how it is going (`state.json`, written by the
 * supervisor on every change). Both are replaced atomically, so a reader never sees half a file.
 */

/** How a pod's containers run: local process groups (no image), or OCI containers under runc. */
export type PodRuntime = 'process' | 'runc';
export const POD_RUNTIMES: readonly PodRuntime[] = ['process', 'runc'];

/** The part of an image's config a container is made from (OCI image config `config`). */
export interface ImageRunConfig {
  entrypoint?: string[];
  cmd?: string[];
  /** `KEY=value` entries, in the image's order. */
  env?: string[];
  workingDir?: string;
  /** `user`, `uid`, `user:group`, `uid:gid` … as the image says it; resolved by the agent into `ContainerRunSpec.user`. */
  user?: string;
  /** e.g. `SIGQUIT`; default SIGTERM. */
  stopSignal?: string;
}

/** An image the node's store holds, resolved for one container. */
export interface ResolvedImage {
  /** Normalized reference (`docker.io/library/busybox:latest`). */
  ref: string;
  /** The manifest digest (`sha256:…`): the container status' imageID. */
  digest: string;
  /** Unpacked layer directories, lowest (base) first. */
  layerDirs: string[];
  config: ImageRunConfig;
}

/** One mount of a container (volumes, /etc/hosts …): an OCI mount under runc, a link under the process runtime. */
export interface ContainerMount {
  /** absolute path in the container */
  destination: string;
  /** host path (for tmpfs: 'tmpfs') */
  source: string;
  type: 'bind' | 'tmpfs';
  readOnly: boolean;
  /** e.g. ['size=64m'] for tmpfs, ['rbind'] … */
  options?: string[];
}

/** The numeric identity a container's process runs as (the runtime does not resolve names). */
export interface ContainerUser {
  uid: number;
  gid: number;
  additionalGids?: number[];
}

/**
 * The container's securityContext, pod-level values merged in (container wins), as Kubernetes
 * spells it. runAsUser/runAsGroup are already folded into `ContainerRunSpec.user`.
 */
export interface ContainerSecurity {
  privileged?: boolean;
  readOnlyRootFilesystem?: boolean;
  allowPrivilegeEscalation?: boolean;
  /** Capability names without the CAP_ prefix, as Kubernetes takes them (`NET_ADMIN`, or `ALL` in drop). */
  capabilities?: { add?: string[]; drop?: string[] };
  runAsNonRoot?: boolean;
  /** seccompProfile Unconfined: no seccomp filter (default: the runtime's default profile). */
  seccompUnconfined?: boolean;
}

/** requests/limits in plain units: millicores and bytes. */
export interface ContainerResources {
  cpuRequestMilli?: number;
  cpuLimitMilli?: number;
  memoryRequestBytes?: number;
  memoryLimitBytes?: number;
}

export interface ContainerRunSpec {
  name: string;
  /**
   * What runs: `command ++ args`. For runc the agent has already applied Kubernetes' rules
   * (image Entrypoint/Cmd vs command/args), so this is the final argv.
   */
  command: string[];
  args: string[];
  /** The process runtime adds PATH and HOME (environment.ts); for runc this is the final environment. */
  env: Record<string, string>;
  /** Process runtime: default `<pod dir>/work`; runc: the resolved cwd in the container (default `/`). */
  workingDir?: string;
  /** runc only: the image the root filesystem is made from. */
  image?: ResolvedImage;
  /** runc: OCI mounts; process runtime: honoured as volumes.ts/mounts.ts lay them out. */
  mounts?: ContainerMount[];
  /** runc only: uid/gid of the process (runAsUser/runAsGroup > image User > 0). */
  user?: ContainerUser;
  securityContext?: ContainerSecurity;
  resources?: ContainerResources;
  /** Its liveness, readiness and startup probes, defaults applied (src/agent/pods/probe-spec.ts). */
  probes?: ContainerProbeSpecs;
  /** `stdin: true`: its stdin is a pipe `kubectl attach -i` writes through (stdin.ts); else /dev/null. */
  stdin?: boolean;
  /** With stdin: closed after the first attach session ends, until the container restarts. */
  stdinOnce?: boolean;
  /** `tty: true`: under runc its process runs on a pseudo-terminal (runtime/terminal.ts); the process runtime makes none. */
  tty?: boolean;
}

export type ProbeKind = 'liveness' | 'readiness' | 'startup';

/** What a probe does, with Kubernetes' defaults applied and a named port resolved by the agent. */
export type ProbeHandler =
  | { exec: { command: string[] } }
  | { httpGet: { scheme: 'HTTP' | 'HTTPS'; host?: string; port: number; path: string; headers: { name: string; value: string }[] } }
  | { tcpSocket: { host?: string; port: number } }
  | { grpc: { port: number; service?: string } }
  /** A probe the agent could not resolve (a named port the container does not declare): it fails with this. */
  | { invalid: { message: string } };

export interface ProbeSpec {
  handler: ProbeHandler;
  initialDelaySeconds: number;
  periodSeconds: number;
  timeoutSeconds: number;
  successThreshold: number;
  failureThreshold: number;
  /** The grace period of a kill this probe causes (liveness, startup); absent = the pod's. */
  terminationGracePeriodSeconds?: number;
}

export type ContainerProbeSpecs = Partial<Record<ProbeKind, ProbeSpec>>;

export type RestartPolicy = 'Always' | 'OnFailure' | 'Never';

export interface PodRunSpec {
  uid: string;
  namespace: string;
  name: string;
  containers: ContainerRunSpec[];
  restartPolicy: RestartPolicy;
  terminationGracePeriodSeconds: number;
  atMostOne: boolean;
  /** node-level fencing file; absent = never fence */
  fencingFile?: string;
  /** default 10 MiB */
  logMaxBytes?: number;
  /** absent = 'process' (pod dirs written before containers keep working) */
  runtime?: PodRuntime;
  /** The containers' hostname (UTS namespace) under runc: the pod's name. */
  hostname?: string;
  /** runc's state directory (`<data-dir>/agent/runc`); required when runtime is runc. */
  runcRoot?: string;
  /**
   * runc: the pod's own network, wired by the agent before the supervisor starts (its namespace
   * pinned at `<pod dir>/ns/net`, src/agent/network/). Absent: the node's network (hostNetwork
   * pods, clusters without a pod network).
   */
  podNetwork?: PodNetworkRunSpec;
  /**
   * runc: containers added to the running pod (`kubectl debug`). The agent appends to this list
   * and sends the supervisor SIGUSR2; each runs once, never restarted.
   */
  ephemeralContainers?: EphemeralContainerRunSpec[];
}

export interface PodNetworkRunSpec {
  /** The pod's address, for its /etc/hosts. */
  podIp: string;
  /** The pod's /etc/resolv.conf, as its dnsPolicy makes it. */
  resolvConf: string;
  /**
   * The sandbox the agent made for the pod (src/agent/network/pod-sandbox.ts): its pinned
   * namespaces and /dev/shm. Absent (pods from before agent-made sandboxes): the network
   * namespace is pinned at `<pod dir>/ns/net` and the supervisor makes the rest in the pod's dir.
   */
  sandbox?: SandboxRunPaths;
}

/** Where a pod's containers find their shared namespaces (pinned files) and /dev/shm. */
export interface SandboxRunPaths {
  net: string;
  ipc: string;
  uts: string;
  shm: string;
}

export interface EphemeralContainerRunSpec extends ContainerRunSpec {
  /** The container whose PID namespace it joins (its processes are visible); absent: one of its own. */
  targetContainerName?: string;
}

export type ContainerRunState =
  | { running: { startedAt: string; pid: number } }
  | { waiting: { reason: string; message?: string } }
  | {
      terminated: {
        exitCode: number;
        signal?: string;
        /** Completed | Error | Fenced | Killed | OOMKilled */
        reason: string;
        message?: string;
        startedAt: string;
        finishedAt: string;
      };
    };

export interface ContainerRunStatus {
  name: string;
  state: ContainerRunState;
  lastState?: ContainerRunState;
  restartCount: number;
  /** runc: `runc://<pod uid>_<name>` (the container status' containerID). */
  containerId?: string;
  /** runc: the image's repo digest (`name@sha256:…`), the container status' imageID. */
  imageId?: string;
  /** Running, started and passing its readiness probe (absent: written by a supervisor without probes). */
  ready?: boolean;
  /** Running and past its startup probe. */
  started?: boolean;
  /** When `ready` last changed. */
  readyChangedAt?: string;
  /** How each probe is going, for the agent's events. */
  probes?: Partial<Record<ProbeKind, ProbeRunStatus>>;
}

export interface ProbeRunStatus {
  result: 'unknown' | 'success' | 'failure';
  /** Streaks of failed probes so far (one event per streak). */
  failureStreaks: number;
  /** The last failure's message (output, HTTP status, connection error). */
  lastFailure?: string;
  /** Times this probe had the container killed (liveness, startup). */
  kills: number;
}

export type PodFinishReason = 'Completed' | 'Stopped' | 'Fenced';

export interface PodOutageState {
  /** when the supervisor first saw the control plane unreachable for a majority of nodes */
  since: string;
  /** nodes (this one included) that reported being cut off at the last check */
  cutOff: number;
  nodeCount: number;
}

export interface PodRunState {
  uid: string;
  supervisorPid: number;
  startedAt: string;
  containers: ContainerRunStatus[];
  /** the supervisor has stopped every container and will not start any again */
  finished: boolean;
  /** why it finished: 'Completed' (all exited per restartPolicy), 'Stopped' (asked to stop), 'Fenced' */
  finishReason?: PodFinishReason;
  fenced?: { at: string; message: string };
  /** The ephemeral containers' statuses; present (maybe empty) when the supervisor takes SIGUSR2 for new ones. */
  ephemeralContainers?: ContainerRunStatus[];
  /** present while renewals are missing but a majority of nodes is cut off too: the workload keeps running */
  outage?: PodOutageState;
  updatedAt: string;
}

export const DEFAULT_LOG_MAX_BYTES = 10 * 1024 * 1024;

export const RUN_SPEC_FILE = 'pod.json';
export const RUN_STATE_FILE = 'state.json';
export const SUPERVISOR_PID_FILE = 'supervisor.pid';
export const SUPERVISOR_LOG_FILE = 'supervisor.log';
/** The argument that makes a supervisor a spare, waiting for its pod (supervisor-main.ts, spare-supervisor.ts). */
export const SPARE_SUPERVISOR_FLAG = '--spare';
export const LOGS_DIR = 'logs';
export const WORK_DIR = 'work';

export class RunSpecError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RunSpecError';
  }
}

export function podDir(podsDir: string, uid: string): string {
  // A uid is one path segment; anything else could escape podsDir.
  if (!uid || uid === '.' || uid === '..' || /[/\\\0]/.test(uid)) {
    throw new RunSpecError(`pod uid ${JSON.stringify(uid)} cannot name a directory`);
  }
  return path.join(podsDir, uid);
}

export function containerLogDir(dir: string, container: string): string {
  return path.join(dir, LOGS_DIR, container);
}

export function instanceLogFile(dir: string, container: string, instance: number): string {
  return path.join(containerLogDir(dir, container), `${instance}.log`);
}

/** Checks a parsed pod.json (`file` names it in messages); throws RunSpecError. */
export function validateRunSpec(value: unknown, file: string): PodRunSpec {
  const fail = (what: string): never => {
    throw new RunSpecError(`${file}: ${what}`);
  };
  if (typeof value !== 'object' || value === null) fail('not a JSON object');
  const spec = value as Partial<PodRunSpec>;
  if (typeof spec.uid !== 'string' || !spec.uid) fail('uid is missing');
  if (typeof spec.namespace !== 'string' || typeof spec.name !== 'string') fail('namespace and name are required');
  if (!Array.isArray(spec.containers) || spec.containers.length === 0) fail('containers must be a non-empty list');
  const names = new Set<string>();
  for (const c of spec.containers ?? []) {
    if (typeof c?.name !== 'string' || !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(c.name)) {
      fail(`container name ${JSON.stringify(c?.name)} is not a DNS label`);
    }
    if (names.has(c.name)) fail(`container name ${c.name} is used twice`);
    names.add(c.name);
    if (!Array.isArray(c.command) || !Array.isArray(c.args)) fail(`container ${c.name}: command and args must be lists`);
    if ([...c.command, ...c.args].some((a) => typeof a !== 'string')) fail(`container ${c.name}: command and args must be strings`);
    if (c.command.length === 0 && c.args.length === 0) fail(`container ${c.name}: nothing to run (no command, no args)`);
    if (typeof c.env !== 'object' || c.env === null) fail(`container ${c.name}: env must be an object`);
  }
  if (!['Always', 'OnFailure', 'Never'].includes(spec.restartPolicy as string)) fail(`restartPolicy ${String(spec.restartPolicy)} is unknown`);
  if (typeof spec.terminationGracePeriodSeconds !== 'number' || spec.terminationGracePeriodSeconds < 0) {
    fail('terminationGracePeriodSeconds must be a number >= 0');
  }
  if (typeof spec.atMostOne !== 'boolean') fail('atMostOne must be a boolean');
  if (spec.runtime !== undefined && !POD_RUNTIMES.includes(spec.runtime)) fail(`runtime ${JSON.stringify(spec.runtime)} is unknown (process or runc)`);
  if (spec.hostname !== undefined && (typeof spec.hostname !== 'string' || !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(spec.hostname) || spec.hostname.length > 253)) {
    fail(`hostname ${JSON.stringify(spec.hostname)} is not a DNS name`);
  }
  const runc = spec.runtime === 'runc';
  if (runc && !isAbsolute(spec.runcRoot)) fail('runcRoot must be an absolute path when runtime is runc');
  if (spec.podNetwork !== undefined) {
    const network = spec.podNetwork as Partial<PodNetworkRunSpec> | null;
    if (!runc) fail('podNetwork needs runtime runc');
    if (!network || typeof network.podIp !== 'string' || !/^\d+\.\d+\.\d+\.\d+$/.test(network.podIp) || typeof network.resolvConf !== 'string') {
      fail('podNetwork must have podIp (IPv4) and resolvConf');
    }
    const sandbox = network?.sandbox as Partial<SandboxRunPaths> | null | undefined;
    if (sandbox !== undefined && (sandbox === null || !(['net', 'ipc', 'uts', 'shm'] as const).every((key) => isAbsolute(sandbox[key])))) {
      fail('podNetwork.sandbox must name absolute net, ipc, uts and shm paths');
    }
  }
  for (const c of spec.containers ?? []) validateContainerExtras(c, runc, (what) => fail(`container ${c.name}: ${what}`));
  if (spec.ephemeralContainers !== undefined) {
    if (!runc || !Array.isArray(spec.ephemeralContainers)) fail('ephemeralContainers must be a list, under runc only');
    for (const c of spec.ephemeralContainers ?? []) {
      if (typeof c?.name !== 'string' || !/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(c.name) || names.has(c.name)) {
        fail(`ephemeral container name ${JSON.stringify(c?.name)} is not a DNS label or is used twice`);
      }
      names.add(c.name);
      if (!Array.isArray(c.command) || !Array.isArray(c.args) || ![...c.command, ...c.args].every((a) => typeof a === 'string')) {
        fail(`ephemeral container ${c.name}: command and args must be lists of strings`);
      }
      if (c.targetContainerName !== undefined && !spec.containers?.some((t) => t.name === c.targetContainerName)) {
        fail(`ephemeral container ${c.name}: target ${String(c.targetContainerName)} is not a container of the pod`);
      }
      validateContainerExtras(c, runc, (what) => fail(`ephemeral container ${c.name}: ${what}`));
    }
  }
  return spec as PodRunSpec;
}

const isAbsolute = (value: unknown): value is string => typeof value === 'string' && path.isAbsolute(value) && !value.includes('\0');
const isStringList = (value: unknown): value is string[] => Array.isArray(value) && value.every((v) => typeof v === 'string');
const isId = (value: unknown): boolean => Number.isInteger(value) && (value as number) >= 0 && (value as number) <= 0xffffffff;
const isPositive = (value: unknown): boolean => typeof value === 'number' && Number.isFinite(value) && value > 0;

/** The container fields added for runc (image, mounts, user, securityContext, resources, probes). */
function validateContainerExtras(c: ContainerRunSpec, runc: boolean, fail: (what: string) => never): void {
  // A pod.json written before images were resolved carried the image reference as a string: the
  // process runtime never used it, so it is dropped rather than refused.
  if (typeof (c as { image?: unknown }).image === 'string') delete c.image;
  if (c.image !== undefined) {
    const image = c.image as Partial<ResolvedImage>;
    if (typeof image !== 'object' || image === null) fail('image must be an object');
    if (typeof image.ref !== 'string' || !image.ref) fail('image.ref is missing');
    if (typeof image.digest !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(image.digest)) fail('image.digest must be sha256:<64 hex>');
    if (!Array.isArray(image.layerDirs) || !image.layerDirs.every(isAbsolute)) fail('image.layerDirs must be absolute paths');
    const config = image.config as ImageRunConfig | undefined;
    if (typeof config !== 'object' || config === null) fail('image.config must be an object');
    for (const key of ['entrypoint', 'cmd', 'env'] as const) {
      if (config[key] !== undefined && !isStringList(config[key])) fail(`image.config.${key} must be a list of strings`);
    }
    for (const key of ['workingDir', 'user', 'stopSignal'] as const) {
      if (config[key] !== undefined && typeof config[key] !== 'string') fail(`image.config.${key} must be a string`);
    }
  } else if (runc) {
    fail('image is required when runtime is runc');
  }
  if (runc && c.workingDir !== undefined && !path.isAbsolute(c.workingDir)) fail('workingDir must be absolute');
  for (const key of ['stdin', 'stdinOnce', 'tty'] as const) if (c[key] !== undefined && typeof c[key] !== 'boolean') fail(`${key} must be a boolean`);
  if (c.mounts !== undefined) {
    if (!Array.isArray(c.mounts)) fail('mounts must be a list');
    for (const m of c.mounts) {
      if (typeof m !== 'object' || m === null) fail('a mount must be an object');
      if (!isAbsolute(m.destination)) fail(`mount destination ${JSON.stringify(m.destination)} must be an absolute path`);
      if (m.type !== 'bind' && m.type !== 'tmpfs') fail(`mount ${m.destination}: type ${JSON.stringify(m.type)} is not bind or tmpfs`);
      if (m.type === 'bind' && !isAbsolute(m.source)) fail(`mount ${m.destination}: source must be an absolute host path`);
      if (typeof m.readOnly !== 'boolean') fail(`mount ${m.destination}: readOnly must be a boolean`);
      if (m.options !== undefined && !isStringList(m.options)) fail(`mount ${m.destination}: options must be a list of strings`);
    }
  }
  if (c.user !== undefined) {
    if (typeof c.user !== 'object' || c.user === null || !isId(c.user.uid) || !isId(c.user.gid)) fail('user must have numeric uid and gid');
    if (c.user.additionalGids !== undefined && !(Array.isArray(c.user.additionalGids) && c.user.additionalGids.every(isId))) {
      fail('user.additionalGids must be numeric ids');
    }
  }
  if (c.securityContext !== undefined) {
    const sc = c.securityContext;
    if (typeof sc !== 'object' || sc === null) fail('securityContext must be an object');
    for (const key of ['privileged', 'readOnlyRootFilesystem', 'allowPrivilegeEscalation', 'runAsNonRoot', 'seccompUnconfined'] as const) {
      if (sc[key] !== undefined && typeof sc[key] !== 'boolean') fail(`securityContext.${key} must be a boolean`);
    }
    if (sc.capabilities !== undefined) {
      for (const key of ['add', 'drop'] as const) {
        const names = sc.capabilities[key];
        if (names !== undefined && !(isStringList(names) && names.every((n) => /^[A-Za-z_]+$/.test(n)))) {
          fail(`securityContext.capabilities.${key} must be capability names`);
        }
      }
    }
  }
  if (c.resources !== undefined) {
    const r = c.resources;
    if (typeof r !== 'object' || r === null) fail('resources must be an object');
    for (const key of ['cpuRequestMilli', 'cpuLimitMilli', 'memoryRequestBytes', 'memoryLimitBytes'] as const) {
      if (r[key] !== undefined && !isPositive(r[key])) fail(`resources.${key} must be a positive number`);
    }
  }
  if (c.probes !== undefined && (typeof c.probes !== 'object' || c.probes === null)) fail('probes must be an object');
}

export function writeRunSpec(dir: string, spec: PodRunSpec): void {
  validateRunSpec(spec, path.join(dir, RUN_SPEC_FILE));
  writeFileAtomic(path.join(dir, RUN_SPEC_FILE), `${JSON.stringify(spec, null, 2)}\n`, 0o600);
}

export function readRunSpec(dir: string): PodRunSpec {
  const file = path.join(dir, RUN_SPEC_FILE);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    throw new RunSpecError(`cannot read ${file}: ${(error as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new RunSpecError(`${file} is not valid JSON: ${(error as Error).message}`);
  }
  return validateRunSpec(parsed, file);
}

export function writeRunState(dir: string, state: PodRunState): void {
  writeFileAtomic(path.join(dir, RUN_STATE_FILE), `${JSON.stringify(state, null, 2)}\n`, 0o600);
}

/** The supervisor's last written state, or undefined when there is none (yet). */
export function readRunState(dir: string): PodRunState | undefined {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, RUN_STATE_FILE), 'utf8')) as PodRunState;
  } catch {
    return undefined;
  }
}

/**
 * The live supervisor's pid, or undefined. The pid file alone is not enough: after a reboot or a
 * crash the pid may belong to another process, so /proc/<pid>/cmdline must name this pod dir, or
 * for a spare that took the pod on, its working dir must be the pod dir (a zombie's cmdline is
 * empty, so an exited one does not count either).
 */
export function supervisorAlive(dir: string): number | undefined {
  let pid: number;
  try {
    pid = Number(fs.readFileSync(path.join(dir, SUPERVISOR_PID_FILE), 'utf8').trim());
  } catch {
    return undefined;
  }
  if (!Number.isInteger(pid) || pid <= 1) return undefined;
  try {
    const args = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    if (args.includes(path.resolve(dir))) return pid;
    // A spare supervisor that took the pod on: its argv names its spare dir, its working dir the pod.
    return args.includes(SPARE_SUPERVISOR_FLAG) && fs.readlinkSync(`/proc/${pid}/cwd`) === path.resolve(dir) ? pid : undefined;
  } catch {
    return undefined;
  }
}
