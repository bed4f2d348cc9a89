import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Writable } from 'node:stream';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import {
  killPodProcesses,
  launchSupervisor,
  listPodDirs,
  liveSupervisor,
  podDir,
  processAlive,
  readRunState,
  stopSupervisor,
  writeRunSpec,
} from '../../src/agent/pods/launch.js';
import { PodLogError, streamContainerLog } from '../../src/agent/pods/logs.js';
import type { ContainerRunSpec, PodRunSpec, PodRunState } from '../../src/agent/pods/run-spec.js';
import { eventually, tempDir } from '../helpers/server.js';
import { LAUNCH_CEILING_MS } from '../helpers/pods.js';

/**
 * The pod supervisor as real processes: containers are process groups, restarts back off, stop
 * is graceful then forceful, the supervisor outlives its launcher, logs rotate and stream.
 */

const roots: string[] = [];
const pods: string[] = [];

after(() => {
  for (const dir of pods) killPodProcesses(dir);
  for (const root of roots) fs.rmSync(root, { recursive: true, force: true });
});

function container(name: string, script: string, extra: Partial<ContainerRunSpec> = {}): ContainerRunSpec {
  return { name, command: ['sh', '-c', script], args: [], env: {}, ...extra };
}

function newPod(containers: ContainerRunSpec[], overrides: Partial<PodRunSpec> = {}): { dir: string; spec: PodRunSpec; podsDir: string } {
  const root = tempDir('pods');
  roots.push(root);
  const podsDir = path.join(root, 'agent', 'pods');
  const spec: PodRunSpec = {
    uid: randomUUID(),
    namespace: 'default',
    name: `pod-${pods.length}`,
    containers,
    restartPolicy: 'Always',
    terminationGracePeriodSeconds: 5,
    atMostOne: false,
    ...overrides,
  };
  const dir = podDir(podsDir, spec.uid);
  fs.mkdirSync(dir, { recursive: true });
  writeRunSpec(dir, spec);
  pods.push(dir);
  return { dir, spec, podsDir };
}

function waitState(dir: string, check: (state: PodRunState) => boolean, what: string, timeoutMs = 10_000): Promise<PodRunState> {
  return eventually(() => {
    const state = readRunState(dir);
    return state && check(state) ? state : undefined;
  }, what, timeoutMs, 20);
}

const alive = processAlive;

/** Fields of /proc/<pid>/stat after the command name: [state, ppid, pgrp, session, ...]. */
function procStat(pid: number): string[] {
  const text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  return text.slice(text.lastIndexOf(')') + 2).split(' ');
}

function runningPid(state: PodRunState, name: string): number | undefined {
  const c = state.containers.find((x) => x.name === name);
  return c && 'running' in c.state ? c.state.running.pid : undefined;
}

class Collector extends Writable {
  chunks: Buffer[] = [];
  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: () => void): void {
    this.chunks.push(Buffer.from(chunk));
    callback();
  }
  get text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }
}

async function logText(dir: string, name: string, options: Parameters<typeof streamContainerLog>[2] = {}): Promise<string> {
  const out = new Collector();
  await streamContainerLog(dir, name, options, out, new AbortController().signal);
  return out.text;
}

describe('pod supervisor', () => {
  it('runs a container as its own process group, logs its output, and outlives the process that launched it', async () => {
    const { dir, podsDir } = newPod([container('main', 'echo hi; echo oops >&2; sleep 30')]);
    // Launch from a separate node process that exits right away, as a crashing agent would.
    const launcher = fileURLToPath(new URL('../../src/agent/pods/launch.ts', import.meta.url));
    const script = `const { launchSupervisor } = await import(${JSON.stringify(launcher)}); console.log(await launchSupervisor(${JSON.stringify(dir)}, ${LAUNCH_CEILING_MS}));`;
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { timeout: LAUNCH_CEILING_MS + 15_000 });
    const supervisorPid = Number(stdout.trim());
    assert.ok(supervisorPid > 1, `launcher printed the supervisor pid (${stdout})`);
    assert.equal(liveSupervisor(dir), supervisorPid);
    assert.deepEqual(listPodDirs(podsDir), [dir]);

    const state = await waitState(dir, (s) => runningPid(s, 'main') !== undefined, 'main running');
    const pid = runningPid(state, 'main')!;
    assert.ok(alive(pid), 'the container process is alive');
    assert.equal(state.supervisorPid, supervisorPid);
    assert.equal(state.finished, false);
    assert.equal(state.containers[0]!.restartCount, 0);
    const [, containerPpid, containerGroup] = procStat(pid);
    assert.equal(Number(containerGroup), pid, 'the container leads its own process group');
    assert.equal(Number(containerPpid), supervisorPid, 'the supervisor is the container parent');
    const [, supervisorPpid, , supervisorSession] = procStat(supervisorPid);
    assert.notEqual(Number(supervisorPpid), process.pid, 'the supervisor is not our child');
    assert.equal(Number(supervisorSession), supervisorPid, 'the supervisor runs in its own session (detached)');

    await eventually(() => fs.readFileSync(path.join(dir, 'logs/main/0.log'), 'utf8').includes('oops'), 'log output');
    assert.equal(fs.readFileSync(path.join(dir, 'logs/main/0.log'), 'utf8'), 'hi\noops\n', 'raw stdout and stderr, no timestamps');
    assert.ok(fs.readFileSync(path.join(dir, 'supervisor.log'), 'utf8').includes('supervisor started'));

    // follow on a running instance ends when the caller aborts
    const abort = new AbortController();
    const out = new Collector();
    const following = streamContainerLog(dir, 'main', { follow: true }, out, abort.signal);
    await eventually(() => out.text.includes('oops'), 'followed output');
    abort.abort();
    await following;

    await stopSupervisor(dir, 5000);
    assert.equal(liveSupervisor(dir), undefined);
    assert.equal(alive(pid), false, 'the container is gone after stop');
    const final = readRunState(dir)!;
    assert.equal(final.finished, true);
    assert.equal(final.finishReason, 'Stopped');
  });

  it('restarts a crashing container (Always) with growing back-off and keeps the last termination', async () => {
    const { dir } = newPod([container('crash', 'echo crashing; exit 3')]);
    await launchSupervisor(dir, LAUNCH_CEILING_MS);
    const messages: string[] = [];
    const state = await eventually(
      () => {
        const s = readRunState(dir);
        const c = s?.containers[0];
        if (c && 'waiting' in c.state && c.state.waiting.message && !messages.includes(c.state.waiting.message)) {
          messages.push(c.state.waiting.message);
        }
        return s && c && c.restartCount >= 2 && 'waiting' in c.state && c.state.waiting.reason === 'CrashLoopBackOff' ? s : undefined;
      },
      'two restarts and back-off',
      15_000,
      20,
    );
    const status = state.containers[0]!;
    assert.ok(status.lastState && 'terminated' in status.lastState, 'lastState holds the termination');
    assert.equal(status.lastState.terminated.exitCode, 3);
    assert.equal(status.lastState.terminated.reason, 'Error');
    const backoffs = messages.map((m) => /^back-off (\d+)s restarting failed container=crash pod=default\/pod-\d+$/.exec(m)?.[1]);
    assert.deepEqual(backoffs.slice(0, 3), ['1', '2', '4'], `back-off doubles: ${JSON.stringify(messages)}`);
    // Three instances ran (0, 1, 2); only the current and the previous one keep logs.
    assert.deepEqual(fs.readdirSync(path.join(dir, 'logs/crash')).sort(), ['1.log', '2.log']);
    killPodProcesses(dir);
  });

  it('OnFailure: exit 0 completes the pod without a restart and the supervisor exits', async () => {
    const { dir } = newPod([container('job', 'echo done; exit 0')], { restartPolicy: 'OnFailure' });
    const pid = await launchSupervisor(dir, LAUNCH_CEILING_MS);
    const state = await waitState(dir, (s) => s.finished, 'finished');
    assert.equal(state.finishReason, 'Completed');
    const c = state.containers[0]!;
    assert.equal(c.restartCount, 0);
    assert.ok('terminated' in c.state);
    assert.equal(c.state.terminated.exitCode, 0);
    assert.equal(c.state.terminated.reason, 'Completed');
    await eventually(() => !alive(pid), 'supervisor exited');
    assert.equal(await logText(dir, 'job'), 'done\n');
  });

  it('Never: a failure is final', async () => {
    const { dir } = newPod([container('once', 'exit 2')], { restartPolicy: 'Never' });
    await launchSupervisor(dir, LAUNCH_CEILING_MS);
    const state = await waitState(dir, (s) => s.finished, 'finished');
    assert.equal(state.finishReason, 'Completed');
    const c = state.containers[0]!;
    assert.equal(c.restartCount, 0);
    assert.ok('terminated' in c.state);
    assert.equal(c.state.terminated.exitCode, 2);
    assert.equal(c.state.terminated.reason, 'Error');
  });

  it('gives the container its env, PATH and HOME only, and its working directory', async () => {
    const custom = path.join(tempDir('workdir'), 'nested');
    roots.push(path.dirname(custom));
    process.env.DROVER_TEST_AGENT_ONLY = 'leaked';
    const print = 'echo "$GREETING|$(pwd)|${DROVER_TEST_AGENT_ONLY:-unset}|${HOME:+home}"; command -v sleep >/dev/null && echo path-ok';
    const { dir } = newPod(
      [container('plain', print, { env: { GREETING: 'hello world' } }), container('custom', print, { env: { GREETING: 'x' }, workingDir: custom })],
      { restartPolicy: 'Never' },
    );
    try {
      await launchSupervisor(dir, LAUNCH_CEILING_MS);
    } finally {
      delete process.env.DROVER_TEST_AGENT_ONLY;
    }
    await waitState(dir, (s) => s.finished, 'finished');
    assert.equal(await logText(dir, 'plain'), `hello world|${path.join(dir, 'work')}|unset|home\npath-ok\n`);
    assert.equal(await logText(dir, 'custom'), `x|${custom}|unset|home\npath-ok\n`);
  });

  it('a command that cannot be spawned is CreateContainerError, retried with back-off', async () => {
    const { dir } = newPod([{ name: 'missing', command: ['/nonexistent/drover-no-such-binary'], args: ['x'], env: {} }]);
    await launchSupervisor(dir, LAUNCH_CEILING_MS);
    const state = await waitState(
      dir,
      (s) => 'waiting' in s.containers[0]!.state && s.containers[0]!.state.waiting.reason === 'CreateContainerError',
      'CreateContainerError',
    );
    const c = state.containers[0]!;
    assert.ok('waiting' in c.state);
    assert.match(c.state.waiting.message ?? '', /ENOENT/);
    await eventually(
      () => (fs.readFileSync(path.join(dir, 'supervisor.log'), 'utf8').match(/cannot start container/g) ?? []).length >= 2,
      'a retry after back-off',
    );
    await assert.rejects(logText(dir, 'missing'), (error: unknown) => error instanceof PodLogError && error.code === 'ContainerNotStarted');
    killPodProcesses(dir);
  });

  it('stops gracefully: SIGTERM first, SIGKILL for what ignores it after the grace period', async () => {
    const graceSeconds = 2;
    const { dir } = newPod(
      [
        container('polite', 'trap "echo got TERM; exit 0" TERM; echo ready; while true; do sleep 0.1; done'),
        container('stubborn', 'trap "" TERM; echo ready; while true; do sleep 0.1; done'),
      ],
      { terminationGracePeriodSeconds: graceSeconds },
    );
    const supervisorPid = await launchSupervisor(dir, LAUNCH_CEILING_MS);
    const running = await waitState(dir, (s) => s.containers.every((c) => 'running' in c.state), 'both running');
    const pids = running.containers.map((c) => runningPid(running, c.name)!);
    assert.equal(pids.length, 2, 'both containers have a PID');
    await eventually(() => fs.readFileSync(path.join(dir, 'logs/stubborn/0.log'), 'utf8').includes('ready'), 'traps installed');
    await eventually(() => fs.readFileSync(path.join(dir, 'logs/polite/0.log'), 'utf8').includes('ready'), 'traps installed');

    const started = Date.now();
    await stopSupervisor(dir, graceSeconds * 1000);
    const tookMs = Date.now() - started;
    console.log(`# graceful stop with ${graceSeconds}s grace took ${tookMs} ms`);
    assert.ok(tookMs >= graceSeconds * 1000 - 100, `the stubborn container had its grace period (${tookMs} ms)`);
    // That the supervisor itself killed it when the grace ran out (and not stopSupervisor's
    // fallback, grace + 2 s later) is shown by the state below: finished, Stopped, SIGKILL.
    // The time is held only to a ceiling a loaded machine cannot miss.
    assert.ok(tookMs < graceSeconds * 1000 + 15_000, `and was killed after it (${tookMs} ms)`);
    assert.equal(alive(supervisorPid), false);
    for (const pid of pids) assert.equal(alive(pid), false, `container ${pid} is gone`);

    const state = readRunState(dir)!;
    assert.equal(state.finished, true);
    assert.equal(state.finishReason, 'Stopped');
    const [polite, stubborn] = state.containers;
    assert.ok(polite && 'terminated' in polite.state && stubborn && 'terminated' in stubborn.state);
    assert.equal(polite.state.terminated.exitCode, 0);
    assert.equal(polite.state.terminated.reason, 'Completed');
    assert.equal(stubborn.state.terminated.reason, 'Killed');
    assert.equal(stubborn.state.terminated.signal, 'SIGKILL');
    assert.match(fs.readFileSync(path.join(dir, 'logs/polite/0.log'), 'utf8'), /got TERM/);
  });

  it('a grace period beyond the longest timer (24.8 days) still waits instead of killing at once', async () => {
    // 35 days: a timer that long would overflow and fire after 1 ms.
    const { dir } = newPod(
      [
        container('polite', 'trap "exit 0" TERM; echo ready; while true; do sleep 0.1; done'),
        container('stubborn', 'trap "" TERM; echo ready; while true; do sleep 0.1; done'),
      ],
      { terminationGracePeriodSeconds: 35 * 24 * 3600 },
    );
    const supervisorPid = await launchSupervisor(dir);
    const running = await waitState(dir, (s) => s.containers.every((c) => 'running' in c.state), 'both running');
    const stubborn = runningPid(running, 'stubborn')!;
    await eventually(() => fs.readFileSync(path.join(dir, 'logs/stubborn/0.log'), 'utf8').includes('ready'), 'traps installed');
    await eventually(() => fs.readFileSync(path.join(dir, 'logs/polite/0.log'), 'utf8').includes('ready'), 'traps installed');
    process.kill(supervisorPid, 'SIGTERM');
    // The polite container's exit is recorded after the stop began: an overflowed grace timer
    // would have killed the stubborn one long before.
    await waitState(dir, (s) => s.containers.some((c) => c.name === 'polite' && 'terminated' in c.state), 'polite stopped');
    assert.ok(alive(stubborn), 'the stubborn container is still in its grace period');
    killPodProcesses(dir);
    await eventually(() => !alive(stubborn), 'stubborn container reaped');
  });

  it('a SIGKILLed supervisor leaves its workload running until killPodProcesses reaps it', async () => {
    const { dir } = newPod([container('orphan', 'sleep 30 & wait')]);
    const supervisorPid = await launchSupervisor(dir, LAUNCH_CEILING_MS);
    const state = await waitState(dir, (s) => runningPid(s, 'orphan') !== undefined, 'running');
    const pid = runningPid(state, 'orphan')!;
    process.kill(supervisorPid, 'SIGKILL');
    await eventually(() => liveSupervisor(dir) === undefined, 'supervisor dead');
    assert.ok(alive(pid), 'the container survives its supervisor');
    killPodProcesses(dir);
    await eventually(() => !alive(pid), 'orphaned container reaped');
  });

  it('rotates the log at logMaxBytes, keeping one rotation', async () => {
    const line = (i: number): string => `line-${String(i).padStart(3, '0')}-${'x'.repeat(40)}`;
    const { dir } = newPod([container('chatty', 'i=0; while [ $i -lt 60 ]; do printf "line-%03d-%s\\n" $i ' + "'" + 'x'.repeat(40) + "'" + '; i=$((i+1)); done')], {
      restartPolicy: 'Never',
      logMaxBytes: 1000,
    });
    await launchSupervisor(dir, LAUNCH_CEILING_MS);
    await waitState(dir, (s) => s.finished, 'finished');
    const current = fs.readFileSync(path.join(dir, 'logs/chatty/0.log'), 'utf8');
    const rotated = fs.readFileSync(path.join(dir, 'logs/chatty/0.log.1'), 'utf8');
    assert.ok(current.length <= 1000 && rotated.length === 1000, `sizes ${rotated.length} + ${current.length}`);
    assert.ok(current.endsWith(`${line(59)}\n`));
    assert.ok(!rotated.includes(line(0)), 'the oldest output was dropped');
    const all = await logText(dir, 'chatty');
    assert.equal(all, rotated + current);
    assert.equal(await logText(dir, 'chatty', { tailLines: 2 }), `${line(58)}\n${line(59)}\n`);
    assert.equal(await logText(dir, 'chatty', { limitBytes: 10 }), rotated.slice(0, 10));
  });

  it('streams logs: tail, previous, follow until the instance ends, and typed errors', async () => {
    const { dir } = newPod([container('ticker', 'echo start; for i in 0 1 2; do echo tick-$i; sleep 0.3; done; exit 1')]);
    await launchSupervisor(dir, LAUNCH_CEILING_MS);
    await waitState(dir, (s) => runningPid(s, 'ticker') !== undefined && s.containers[0]!.restartCount === 0, 'first instance running');
    await assert.rejects(logText(dir, 'ticker', { previous: true }), (error: unknown) => error instanceof PodLogError && error.code === 'NoPreviousInstance');
    await assert.rejects(logText(dir, 'nope'), (error: unknown) => error instanceof PodLogError && error.code === 'NoSuchContainer' && /ticker/.test(error.message));

    const followed = new Collector();
    const started = Date.now();
    let ceiling: NodeJS.Timeout | undefined;
    await Promise.race([
      streamContainerLog(dir, 'ticker', { follow: true }, followed, new AbortController().signal),
      new Promise((_, reject) => {
        ceiling = setTimeout(() => reject(new Error('follow did not end with the instance')), 10_000);
      }),
    ]).finally(() => clearTimeout(ceiling));
    console.log(`# follow ended ${Date.now() - started} ms after it began`);
    assert.equal(followed.text, 'start\ntick-0\ntick-1\ntick-2\n');
    const afterExit = readRunState(dir)!.containers[0]!;
    assert.ok(!('running' in afterExit.state) || afterExit.restartCount > 0, 'follow ended because the instance did');

    await waitState(dir, (s) => s.containers[0]!.restartCount === 1 && runningPid(s, 'ticker') !== undefined, 'second instance');
    assert.equal(await logText(dir, 'ticker', { previous: true }), 'start\ntick-0\ntick-1\ntick-2\n');
    assert.equal(await logText(dir, 'ticker', { previous: true, tailLines: 1 }), 'tick-2\n');
    assert.equal(await logText(dir, 'ticker', { previous: true, follow: true, tailLines: 0 }), '');
    killPodProcesses(dir);
  });
});
