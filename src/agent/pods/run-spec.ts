import fs from 'node:fs';
import path from 'node:path';
import { writeFileAtomic } from '../../security/files.js';

/**
 * The contract between the agent and a pod's supervisor: what to run (`pod.json`, written by the
 * agent before it spawns the supervisor) and how it is going (`state.json`, written by the
 * supervisor on every change). Both are replaced atomically, so a reader never sees half a file.
 */

export interface ContainerRunSpec {
  name: string;
  command: string[];
  args: string[];
  env: Record<string, string>;
  workingDir?: string;
  image?: string;
}

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
}

export type ContainerRunState =
  | { running: { startedAt: string; pid: number } }
  | { waiting: { reason: string; message?: string } }
  | {
      terminated: {
        exitCode: number;
        signal?: string;
        /** Completed | Error | Fenced | Killed */
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
  /** present while renewals are missing but a majority of nodes is cut off too: the workload keeps running */
  outage?: PodOutageState;
  updatedAt: string;
}

export const DEFAULT_LOG_MAX_BYTES = 10 * 1024 * 1024;

export const RUN_SPEC_FILE = 'pod.json';
export const RUN_STATE_FILE = 'state.json';
export const SUPERVISOR_PID_FILE = 'supervisor.pid';
export const SUPERVISOR_LOG_FILE = 'supervisor.log';
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

function validateRunSpec(value: unknown, file: string): PodRunSpec {
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
  return spec as PodRunSpec;
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
 * crash the pid may belong to another process, so /proc/<pid>/cmdline must name this pod dir
 * (a zombie's cmdline is empty, so an exited one does not count either).
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
    return args.includes(path.resolve(dir)) ? pid : undefined;
  } catch {
    return undefined;
  }
}
