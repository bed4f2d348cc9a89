import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { containerEnvironment } from '../environment.js';
import { WORK_DIR, type ContainerRunSpec, type PodRunSpec } from '../run-spec.js';
import { RUNC_BINARY, runcContainerId } from './names.js';
import { onTerminal } from './terminal.js';

/**
 * Running a command in a running container: the one entry point `kubectl exec` (streaming) and
 * exec probes build on. Process runtime: a process in the container's working directory with its
 * environment. runc: `runc exec`, which takes the container's user, environment, working directory,
 * capabilities and namespaces from its config.json.
 *
 * A TTY is made by util-linux `script` (terminal.ts): under runc, script gives a foreground `runc
 * exec --tty` the terminal it needs on its stdio, runc makes the container's own and passes sizes
 * on; under the process runtime the command runs right on script's terminal.
 */

export interface ExecOptions {
  tty: boolean;
  /** Keep stdin open as a pipe; without it stdin is /dev/null. */
  stdin: boolean;
}

/** What to spawn; exposed for callers that spawn on their own terms (probes with timeouts). */
export interface ExecPlan {
  file: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
}

export class ExecError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ExecError';
  }
}

export { shellQuote } from './terminal.js';

function withTty(plan: ExecPlan): ExecPlan {
  return { ...plan, ...onTerminal(plan.file, plan.args) };
}

export function execPlan(podDir: string, spec: PodRunSpec, container: ContainerRunSpec, argv: readonly string[], options: Pick<ExecOptions, 'tty'>): ExecPlan {
  if (argv.length === 0 || argv.some((a) => typeof a !== 'string')) throw new ExecError('exec needs a command');
  const runtime = spec.runtime ?? 'process';
  let plan: ExecPlan;
  if (runtime === 'runc') {
    if (!spec.runcRoot) throw new ExecError(`pod ${spec.namespace}/${spec.name} has no runc root`);
    // On a terminal TERM is xterm (as CRI runtimes set it for exec -t), unless the container sets its own.
    const term = options.tty && container.env.TERM === undefined ? ['--env', 'TERM=xterm'] : [];
    const args = ['--root', spec.runcRoot, 'exec', ...(options.tty ? ['--tty', ...term] : []), runcContainerId(spec.uid, container.name), ...argv];
    plan = { file: RUNC_BINARY, args, cwd: podDir, env: containerEnvironment({}) };
  } else {
    plan = {
      file: argv[0]!,
      args: argv.slice(1),
      cwd: container.workingDir ?? path.join(podDir, WORK_DIR),
      env: containerEnvironment(options.tty && container.env.TERM === undefined ? { TERM: 'xterm', ...container.env } : container.env),
    };
  }
  return options.tty ? withTty(plan) : plan;
}

/**
 * Spawns `argv` in `container` of the pod at `podDir`. stdout and stderr are pipes (with a TTY
 * both carry the terminal's output on stdout). The caller owns the process; its exit code is the
 * command's (126/127 when it cannot be run, as shells and runc report it).
 */
export function execInContainer(
  podDir: string,
  spec: PodRunSpec,
  container: ContainerRunSpec | string,
  argv: readonly string[],
  options: ExecOptions,
): ChildProcess {
  const found = typeof container === 'string' ? spec.containers.find((c) => c.name === container) : container;
  if (!found) throw new ExecError(`container ${String(container)} is not valid for pod ${spec.name}`);
  const plan = execPlan(podDir, spec, found, argv, options);
  return spawn(plan.file, plan.args, { cwd: plan.cwd, env: plan.env, stdio: [options.stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'] });
}
