/**
 * The fast half of the suite in one process: every test/unit/*.test.ts imported here, so tsx starts
 * once instead of once per file (`npm run test:unit`; ./test.sh still runs each file on its own).
 * Unit tests start no processes and need none of the tools test.sh installs.
 */
import fs from 'node:fs';

const dir = new URL('./unit/', import.meta.url);
for (const file of fs.readdirSync(dir).filter((name) => name.endsWith('.test.ts')).sort()) {
  await import(new URL(file, dir).href);
}
