import fs from 'node:fs';
import path from 'node:path';
import { killPodProcesses, listPodDirs } from '../../src/agent/pods/launch.js';

/**
 * How long a test lets launchSupervisor() wait for a supervisor started from the TypeScript
 * source: tsx makes it slow to start, and a loaded machine slower (the agent's own 5 s is for the
 * compiled build). A ceiling, not a figure.
 */
export const LAUNCH_CEILING_MS = 60_000;

/**
 * Pod supervisors outlive their agent on purpose, so a test that kills an agent or a server must
 * reap the pods it left: by PID, from the pod directories under the node's data dir.
 */
export function reapPods(dataDir: string): number {
  const podsDir = path.join(dataDir, 'agent', 'pods');
  if (!fs.existsSync(podsDir)) return 0;
  const dirs = listPodDirs(podsDir);
  for (const dir of dirs) killPodProcesses(dir);
  return dirs.length;
}
