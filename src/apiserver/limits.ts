import { errors } from './errors.js';

/**
 * The bounds the API server puts on what a client sends: how deep a body may nest, how large an
 * object may be, which numbers a query may carry, and how many long-running requests (watches,
 * followed logs) one client may hold open. docs/security.md ("Hostile input") lists them.
 */

/**
 * Deepest nesting of arrays and objects a request body may have. Every built-in kind nests fewer
 * than 20 levels; the cap keeps the server's recursive code (clone, merge, serialise) far from the
 * JavaScript stack limit, which a body of 3 MiB of `[` would otherwise hit.
 */
export const MAX_NESTING_DEPTH = 100;

/**
 * Largest object the server stores, encoded: etcd refuses requests above 1.5 MiB by default, so
 * objects are held to that on every datastore (one kept in SQLite can then move to etcd).
 */
export const MAX_OBJECT_BYTES = 1.5 * 1024 * 1024;

/**
 * Most tokens a YAML body may have. The YAML parser costs tens of microseconds a token, so a
 * 3 MiB body of tiny nodes would hold the event loop for a minute. kubectl and the client
 * libraries send JSON; this is room for about 2500 lines of hand-written YAML.
 */
export const MAX_YAML_TOKENS = 20_000;

/** Upper bound of Kubernetes' int32 fields (replicas), also used for seconds fields, as kube-apiserver bounds activeDeadlineSeconds. */
export const MAX_INT32 = 2_147_483_647;

/**
 * Events a watch's client may leave unread, beyond the initial list, before the server cuts the
 * watch: a client that stops reading would otherwise make the server buffer every later event.
 * kube-apiserver likewise closes a watcher that does not keep up. The client re-watches.
 */
export const MAX_WATCH_UNREAD_BYTES = 16 * 1024 * 1024;

/** Longest fieldManager, as in kube-apiserver. */
export const MAX_FIELD_MANAGER_LENGTH = 128;

interface Pending {
  value: unknown;
  depth: number;
  key: string | number | undefined;
  parent: Pending | undefined;
}

function pathOf(entry: Pending): string {
  const keys: (string | number)[] = [];
  for (let e: Pending | undefined = entry; e?.key !== undefined; e = e.parent) keys.push(e.key);
  return keys.reverse().reduce<string>((path, key) => (typeof key === 'number' ? `${path}[${key}]` : path ? `${path}.${key}` : key), '') || '(the top level)';
}

/**
 * Checks a decoded body before anything else looks at it: nesting within MAX_NESTING_DEPTH,
 * numbers finite (JSON.parse reads 1e400 as Infinity, YAML has .nan), and only plain JSON values
 * (a YAML tag could produce something else). Iterative, so a body nested 100 000 deep is refused
 * rather than overflowing the stack.
 */
export function checkDecoded(value: unknown, what: string): void {
  const stack: Pending[] = [{ value, depth: 0, key: undefined, parent: undefined }];
  for (let entry = stack.pop(); entry !== undefined; entry = stack.pop()) {
    const current = entry.value;
    if (current === null || typeof current === 'string' || typeof current === 'boolean') continue;
    if (typeof current === 'number') {
      if (!Number.isFinite(current)) {
        throw errors.badRequest(`${what} holds a number out of range at ${pathOf(entry)}`);
      }
      continue;
    }
    if (typeof current !== 'object') {
      throw errors.badRequest(`${what} holds a value that is not JSON (${typeof current}) at ${pathOf(entry)}`);
    }
    if (entry.depth >= MAX_NESTING_DEPTH) {
      throw errors.badRequest(`${what} is nested deeper than ${MAX_NESTING_DEPTH} levels (at ${pathOf(entry)})`);
    }
    const depth = entry.depth + 1;
    if (Array.isArray(current)) {
      for (let i = 0; i < current.length; i++) stack.push({ value: current[i], depth, key: i, parent: entry });
      continue;
    }
    const proto = Object.getPrototypeOf(current) as unknown;
    if (proto !== Object.prototype && proto !== null) {
      throw errors.badRequest(`${what} holds a value that is not JSON (${current.constructor?.name ?? 'object'}) at ${pathOf(entry)}`);
    }
    for (const key of Object.keys(current)) {
      stack.push({ value: (current as Record<string, unknown>)[key], depth, key, parent: entry });
    }
  }
}

/**
 * An integer query parameter, or undefined when absent or empty. Anything else than decimal
 * digits (with an optional sign), or a value outside [min, max], is a 400 naming the parameter.
 */
export function integerParam(params: URLSearchParams, name: string, min: number, max: number): number | undefined {
  const text = params.get(name);
  if (text === null || text === '') return undefined;
  if (!/^[-+]?\d+$/.test(text)) {
    throw errors.badRequest(`invalid ${name} "${text}": must be an integer`);
  }
  const value = Number(text);
  if (value < min || value > max) {
    throw errors.badRequest(`invalid ${name} "${text}": must be between ${min} and ${max}`);
  }
  return value;
}

/** A resourceVersion query parameter: empty, or a revision (decimal digits). */
export function resourceVersionParam(params: URLSearchParams): string | undefined {
  const text = params.get('resourceVersion');
  if (text === null || text === '') return undefined;
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(Number(text))) {
    throw errors.badRequest(`invalid resource version "${text}": must be a non-negative integer`);
  }
  return text;
}

export interface LongRunningLimits {
  /** Long-running requests one user (one credential's identity) may hold open at once. */
  perUser: number;
  /** Long-running requests the whole server holds open at once. */
  total: number;
}

export const DEFAULT_LONG_RUNNING_LIMITS: LongRunningLimits = { perUser: 100, total: 1000 };

/**
 * Counts long-running requests (watches, followed logs) per user and in all, so that one client
 * cannot hold an unbounded number of connections and datastore watches. Beyond a limit the
 * request is refused with 429 and Retry-After, as kube-apiserver refuses requests beyond its
 * in-flight limits.
 */
export class LongRunningLimiter {
  private readonly perUser = new Map<string, number>();
  private total = 0;

  constructor(private readonly limits: LongRunningLimits) {}

  /** Takes a slot for `user`, or throws 429. Call the returned function once, when the request ends. */
  acquire(user: string, what: string): () => void {
    const mine = this.perUser.get(user) ?? 0;
    if (mine >= this.limits.perUser) {
      throw errors.tooManyRequests(
        `too many open ${what}: user "${user}" already holds ${mine}, the most one user may (max-watches-per-user); close some and retry`,
        1,
      );
    }
    if (this.total >= this.limits.total) {
      throw errors.tooManyRequests(
        `too many open ${what} on this server: ${this.total}, the most it serves at once (max-watches); retry later`,
        1,
      );
    }
    this.perUser.set(user, mine + 1);
    this.total++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.total--;
      const left = (this.perUser.get(user) ?? 1) - 1;
      if (left > 0) this.perUser.set(user, left);
      else this.perUser.delete(user);
    };
  }

  /** Open long-running requests, in all and for one user (tests, metrics). */
  count(user?: string): number {
    return user === undefined ? this.total : (this.perUser.get(user) ?? 0);
  }
}

/**
 * The first key that appears twice in one object of a JSON text, if any: JSON.parse keeps the
 * last silently, and fieldValidation=Strict refuses such bodies, as kube-apiserver does. Expects
 * text that JSON.parse accepted; one pass, no recursion.
 */
export function duplicateJsonKey(text: string): string | undefined {
  const objects: (Set<string> | null)[] = []; // null: an array
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      let end = i + 1;
      let escaped = false;
      for (; end < text.length; end++) {
        const d = text.charCodeAt(end);
        if (d === 0x5c) {
          end++;
          escaped = true;
        } else if (d === 0x22) {
          break;
        }
      }
      const keys = objects[objects.length - 1];
      if (expectKey && keys) {
        const key = escaped ? (JSON.parse(text.slice(i, end + 1)) as string) : text.slice(i + 1, end);
        if (keys.has(key)) return key;
        keys.add(key);
        expectKey = false;
      }
      i = end;
    } else if (c === 0x7b) {
      objects.push(new Set());
      expectKey = true;
    } else if (c === 0x5b) {
      objects.push(null);
    } else if (c === 0x7d || c === 0x5d) {
      objects.pop();
      expectKey = false;
    } else if (c === 0x2c) {
      expectKey = Boolean(objects[objects.length - 1]);
    }
  }
  return undefined;
}
