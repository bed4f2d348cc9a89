import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createLogger } from '../../logging/logger.js';
import { readRunSpec, SPARE_SUPERVISOR_FLAG } from './run-spec.js';
import { INHERITED_PRIORITY_ENV, SUPERVISOR_PRIORITY_BOOST } from './container-process.js';
import { PodSupervisor } from './supervisor.js';

/**
 * Entry point of a pod's supervisor process: `node supervisor-main.js <podDir>`. Started
 * detached by the agent with stdout and stderr going to `<podDir>/supervisor.log`.
 * SIGTERM (or SIGINT) stops the pod gracefully; SIGUSR2 starts ephemeral containers newly in pod.json.
 *
 * Or a spare (spare-supervisor.ts): `node supervisor-main.js --spare <spareDir>`, started before
 * any pod needs it so that Node's start and these imports are done when one does. It reads one
 * line from stdin, the pod dir it takes on (its log file already moved there by the agent), and
 * from then on is that pod's supervisor exactly as if started with it. Stdin's end without a pod
 * (the agent stopped, or died) ends it.
 */

const logger = createLogger('info', 'drover-pod-supervisor');
const argv = process.argv.slice(2);
const spareDir = argv[0] === SPARE_SUPERVISOR_FLAG && argv[1] ? path.resolve(argv[1]) : undefined;
if (!argv[0] || (argv[0] === SPARE_SUPERVISOR_FLAG && !spareDir)) {
  logger.fatal(`usage: supervisor-main <podDir> | supervisor-main ${SPARE_SUPERVISOR_FLAG} <spareDir>`);
  process.exit(64);
}

// A singleton's fence must land on time even on a busy host: the supervisor is idle nearly always,
// so it may ask for a better CPU priority (root only; elsewhere it keeps the agent's). Containers
// are put back to the priority the supervisor was started with (supervisor.ts): the agent's, which
// the agent passes to a spare (it starts a spare at a lower priority, so that its start yields to
// the pods starting meanwhile; the spare takes the boost when it gets its pod).
const passedPriority = Number(process.env[INHERITED_PRIORITY_ENV]);
const inheritedPriority = Number.isInteger(passedPriority) && passedPriority >= -20 && passedPriority <= 19 ? passedPriority : os.getPriority();
process.env[INHERITED_PRIORITY_ENV] = String(inheritedPriority);
function takeBoost(): void {
  try {
    os.setPriority(Math.max(-20, inheritedPriority - SUPERVISOR_PRIORITY_BOOST));
  } catch {
    // not permitted: run at the inherited priority
  }
}

let supervisor: PodSupervisor | undefined;
let dir: string | undefined;
// The agent appended ephemeral containers to pod.json (`kubectl debug`). Listened for before
// anything else, so the signal never finds its default action (exit).
process.on('SIGUSR2', () => {
  if (!dir) return;
  try {
    supervisor?.addEphemeralContainers(readRunSpec(dir));
  } catch (error) {
    logger.error({ err: error }, 'cannot read the ephemeral containers from pod.json');
  }
});
// The agent going away must not take the supervisor with it.
process.on('SIGHUP', () => logger.info('ignoring SIGHUP'));

function superviseFrom(podDir: string): void {
  takeBoost();
  dir = podDir;
  try {
    const spec = readRunSpec(podDir);
    supervisor = new PodSupervisor({
      dir: podDir,
      spec,
      logger: logger.child({ uid: spec.uid }),
      onFinished: () => {
        // Let the last log lines out; the state file is already final.
        setImmediate(() => process.exit(0));
      },
    });
    const stop = (): void => supervisor?.stop();
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
    process.on('uncaughtException', (error) => {
      // Nothing can supervise the containers any more: take them down rather than orphan them.
      logger.fatal({ err: error }, 'supervisor crashed; killing every container');
      supervisor?.killAll();
      process.exit(70);
    });
    supervisor.start();
  } catch (error) {
    logger.fatal({ err: error, dir: podDir }, 'cannot start the pod supervisor');
    supervisor?.killAll();
    process.exit(1);
  }
}

/** A spare waits for its pod on stdin; the agent's end of the pipe closing first retires it. */
function waitForPod(ownDir: string): void {
  const retire = (): void => {
    fs.rmSync(ownDir, { recursive: true, force: true });
    process.exit(0);
  };
  process.on('SIGTERM', retire);
  process.on('SIGINT', retire);
  let input = '';
  const onData = (chunk: string): void => {
    input += chunk;
    const end = input.indexOf('\n');
    if (end < 0) return;
    // From here on the agent's pipe means nothing: the supervisor outlives the agent.
    process.stdin.off('data', onData);
    process.stdin.off('end', retire);
    process.stdin.destroy();
    process.off('SIGTERM', retire);
    process.off('SIGINT', retire);
    const podDir = path.resolve(input.slice(0, end));
    // Its working dir names the pod it supervises (run-spec.ts supervisorAlive), as a cold start's argv does.
    process.chdir(podDir);
    fs.rmSync(ownDir, { recursive: true, force: true });
    superviseFrom(podDir);
  };
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', onData);
  process.stdin.on('end', retire);
}

if (spareDir) waitForPod(spareDir);
else superviseFrom(path.resolve(argv[0]));
