import fs from 'node:fs';
import path from 'node:path';
import { killPodProcesses, listPodDirs } from '../../src/agent/pods/launch.js';

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
