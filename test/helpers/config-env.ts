import fs from 'node:fs';
import path from 'node:path';
import { tempDir } from './server.js';

/**
 * For suites about configuration, whose results depend on every DROVER_* variable and config
 * file in sight.
 */

/**
 * Call at a test file's top level: no DROVER_* variable leaks from the test runner into the
 * servers and agents the shared helpers spawn (they inherit this process's environment), and
 * DROVER_CONFIG_FILE names an empty file in a fresh suite dir, not /etc/drover/config.yaml.
 */
export function isolateFromDroverEnv(prefix: string): { suiteDir: string; emptyConfig: string } {
  for (const key of Object.keys(process.env)) if (key.startsWith('DROVER_')) delete process.env[key];
  const suiteDir = tempDir(prefix);
  const emptyConfig = path.join(suiteDir, 'empty.yaml');
  fs.writeFileSync(emptyConfig, '');
  process.env.DROVER_CONFIG_FILE = emptyConfig;
  return { suiteDir, emptyConfig };
}

/** The environment of a CLI run: the runner's minus every DROVER_* variable and KUBECONFIG, plus `extra` (undefined removes a key). */
export function droverFreeEnv(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith('DROVER_') && key !== 'KUBECONFIG') env[key] = value;
  }
  for (const [key, value] of Object.entries(extra)) {
    if (value === undefined) delete env[key];
    else env[key] = value;
  }
  return env;
}
