import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

/**
 * Write via a temporary file and rename, so a crash never leaves a half-written credential, and
 * create it with its final mode so a secret is never readable by others, even for an instant.
 */
export function writeFileAtomic(file: string, content: string | Buffer, mode: number): void {
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  const temp = `${file}.${randomBytes(4).toString('hex')}.tmp`;
  const fd = fs.openSync(temp, 'w', mode);
  try {
    fs.writeFileSync(fd, content);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.chmodSync(temp, mode);
  fs.renameSync(temp, file);
}
