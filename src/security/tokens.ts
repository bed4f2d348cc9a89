import { randomBytes } from 'node:crypto';

/** A random secret suitable for a bearer token: 32 bytes, hex. */
export function generateSecret(bytes = 32): string {
  return randomBytes(bytes).toString('hex');
}
