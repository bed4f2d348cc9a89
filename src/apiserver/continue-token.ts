import { errors } from './errors.js';

/**
 * A list's `continue` token: the revision the first page was read at and the key to go on from,
 * base64url JSON as kube-apiserver makes its own.
 */

export interface ContinueToken {
  rv: number;
  start: string;
}

export function encodeContinue(token: ContinueToken): string {
  return Buffer.from(JSON.stringify({ v: 'meta.k8s.io/v1', ...token })).toString('base64url');
}

/**
 * A continue token, checked as kube-apiserver checks its own: a revision that could exist and a
 * start key inside the listed prefix. A forged one is a 400, never a read elsewhere or a 504.
 */
export function decodeContinue(text: string, prefix: string): ContinueToken {
  try {
    const parsed = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as Partial<ContinueToken>;
    if (
      typeof parsed.rv === 'number' &&
      Number.isSafeInteger(parsed.rv) &&
      parsed.rv > 0 &&
      typeof parsed.start === 'string' &&
      parsed.start.startsWith(prefix)
    ) {
      return { rv: parsed.rv, start: parsed.start };
    }
  } catch {
    // fall through to the error below
  }
  throw errors.badRequest('invalid continue token: it was not produced by this server for this list');
}
