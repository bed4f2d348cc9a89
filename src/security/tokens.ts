import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { writeFileAtomic } from './files.js';

/** A random secret suitable for a bearer token: 32 bytes, hex. */
export function generateSecret(bytes = 32): string {
  return randomBytes(bytes).toString('hex');
}

/** Read a token file, creating it with a fresh secret (mode 0600) on first start. */
export function ensureTokenFile(file: string): { token: string; created: boolean } {
  if (fs.existsSync(file)) {
    const token = fs.readFileSync(file, 'utf8').trim();
    if (token) return { token, created: false };
  }
  const token = generateSecret();
  writeFileAtomic(file, `${token}\n`, 0o600);
  return { token, created: true };
}
