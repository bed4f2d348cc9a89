import os from 'node:os';
import path from 'node:path';
import { createLogger } from '../../logging/logger.js';
import { readRunSpec } from './run-spec.js';
import { INHERITED_PRIORITY_ENV, SUPERVISOR_PRIORITY_BOOST } from './container-process.js';
import { PodSupervisor } from './supervisor.js';

/**
 * Entry point of a pod's supervisor process: `node supervisor-main.js <podDir>`. Started
 * detached by the agent with stdout and stderr going to `<podDir>/supervisor.log`.
 * SIGTERM (or SIGINT) stops the pod gracefully; SIGUSR2 starts ephemeral containers newly in pod.json.
 */

const dirArg = process.argv[2];
const logger = createLogger('info', 'drover-pod-supervisor');
if (!dirArg) {
  logger.fatal('usage: supervisor-main <podDir>');
  process.exit(64);
}
const dir = path.resolve(dirArg);

// A singleton's fence must land on time even on a busy host: the supervisor is idle nearly always,
// so it may ask for a better CPU priority (root only; elsewhere it keeps the agent's). Containers
// are put back to the priority the supervisor was started with (supervisor.ts).
const inheritedPriority = os.getPriority();
try {
  os.setPriority(Math.max(-20, inheritedPriority - SUPERVISOR_PRIORITY_BOOST));
} catch {
  // not permitted: run at the inherited priority
}
process.env[INHERITED_PRIORITY_ENV] = String(inheritedPriority);

let supervisor: PodSupervisor | undefined;
// The agent appended ephemeral containers to pod.json (`kubectl debug`). Listened for before
// anything else, so the signal never finds its default action (exit).
process.on('SIGUSR2', () => {
  try {
    supervisor?.addEphemeralContainers(readRunSpec(dir));
  } catch (error) {
    logger.error({ err: error }, 'cannot read the ephemeral containers from pod.json');
  }
});
try {
  const spec = readRunSpec(dir);
  supervisor = new PodSupervisor({
    dir,
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
  // The agent going away must not take the supervisor with it.
  process.on('SIGHUP', () => logger.info('ignoring SIGHUP'));
  process.on('uncaughtException', (error) => {
    // Nothing can supervise the containers any more: take them down rather than orphan them.
    logger.fatal({ err: error }, 'supervisor crashed; killing every container');
    supervisor?.killAll();
    process.exit(70);
  });
  supervisor.start();
} catch (error) {
  logger.fatal({ err: error, dir }, 'cannot start the pod supervisor');
  supervisor?.killAll();
  process.exit(1);
}
