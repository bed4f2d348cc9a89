import { isIPv6 } from 'node:net';
import { errors } from '../apiserver/errors.js';

/**
 * Per-source limits on node registration (POST /drover/v1/register). A registration costs the
 * server an scrypt hash (about 45 ms of CPU) and a serving certificate (about 20 ms), and a new
 * name leaves a record; so, per source address, token buckets:
 *
 * - failed registrations (wrong token: 401, wrong password for a name: 403): once a source has
 *   used them up, every registration from it is answered 429 with Retry-After before anything is
 *   checked or hashed, until the bucket refills;
 * - registrations of new names (no record yet): 429 once used up.
 *
 * Re-registrations of known names with the right password cost nothing here: a node coming back
 * after a restart, an outage or `kubectl delete node` is never starved by the limits (unless its
 * own source is the one failing). The buckets live in each server's memory.
 */

export interface BucketSpec {
  /** Burst: how many at once from a fresh source. */
  capacity: number;
  /** Refill rate. */
  perMinute: number;
}

export const FAILED_REGISTRATIONS: BucketSpec = { capacity: 10, perMinute: 10 };
export const NEW_NAME_REGISTRATIONS: BucketSpec = { capacity: 30, perMinute: 30 };
/** Sources remembered at most; the least recently seen go first (a full bucket is no loss). */
const MAX_SOURCES = 10_000;

interface Bucket {
  tokens: number;
  at: number;
}

export class TokenBuckets {
  private readonly buckets = new Map<string, Bucket>();

  constructor(
    private readonly spec: BucketSpec,
    private readonly now: () => number = Date.now,
  ) {}

  private refilled(source: string): Bucket {
    const now = this.now();
    const bucket = this.buckets.get(source);
    if (!bucket) return { tokens: this.spec.capacity, at: now };
    const tokens = Math.min(this.spec.capacity, bucket.tokens + ((now - bucket.at) * this.spec.perMinute) / 60_000);
    return { tokens, at: now };
  }

  /** Seconds until the source has a whole token again; 0 when it has one now. */
  retryAfterSeconds(source: string): number {
    const { tokens } = this.refilled(source);
    return tokens >= 1 ? 0 : Math.max(1, Math.ceil(((1 - tokens) * 60) / this.spec.perMinute));
  }

  /** Take a token: false (and nothing taken) when the source has none. */
  take(source: string): boolean {
    const bucket = this.refilled(source);
    if (bucket.tokens < 1) return false;
    bucket.tokens -= 1;
    this.remember(source, bucket);
    return true;
  }

  /** Take a token whether or not there is one (failures happen regardless; never below zero). */
  charge(source: string): void {
    const bucket = this.refilled(source);
    bucket.tokens = Math.max(0, bucket.tokens - 1);
    this.remember(source, bucket);
  }

  get size(): number {
    return this.buckets.size;
  }

  private remember(source: string, bucket: Bucket): void {
    this.buckets.delete(source);
    this.buckets.set(source, bucket);
    if (this.buckets.size <= MAX_SOURCES) return;
    // Least recently seen first (Map keeps insertion order and we re-insert on every use).
    for (const key of this.buckets.keys()) {
      this.buckets.delete(key);
      if (this.buckets.size <= MAX_SOURCES) break;
    }
  }
}

/**
 * The source a limit applies to: an IPv4 address, or an IPv6 /64 (one host commonly has a whole
 * /64, so counting addresses would let it multiply its allowance at will).
 */
export function registrationSource(remoteAddress: string | undefined): string {
  const address = (remoteAddress ?? 'unknown').toLowerCase().replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/, '');
  if (!isIPv6(address)) return address;
  const [head = '', tail = ''] = address.split('::');
  const headGroups = head ? head.split(':') : [];
  const tailGroups = tail ? tail.split(':') : [];
  const groups = address.includes('::')
    ? [...headGroups, ...Array<string>(8 - headGroups.length - tailGroups.length).fill('0'), ...tailGroups]
    : headGroups;
  return `${groups.slice(0, 4).map((g) => g.replace(/^0+(?=.)/, '')).join(':')}::/64`;
}

export class RegistrationLimiter {
  readonly failures: TokenBuckets;
  readonly newNames: TokenBuckets;

  constructor(
    failures: BucketSpec = FAILED_REGISTRATIONS,
    newNames: BucketSpec = NEW_NAME_REGISTRATIONS,
    now: () => number = Date.now,
  ) {
    this.failures = new TokenBuckets(failures, now);
    this.newNames = new TokenBuckets(newNames, now);
  }

  /** First of all, and free: a source that used up its failures is refused (429). */
  admit(source: string): void {
    const wait = this.failures.retryAfterSeconds(source);
    if (wait > 0) {
      throw errors.tooManyRequests(
        `too many failed node registrations from ${source}; try again in ${wait} s`,
        wait,
      );
    }
  }

  /** A registration from `source` failed (401 or 403). */
  failed(source: string): void {
    this.failures.charge(source);
  }

  /** Before registering a name that has no record yet: 429 once the source's allowance is used. */
  newName(source: string, nodeName: string): void {
    if (this.newNames.take(source)) return;
    const wait = this.newNames.retryAfterSeconds(source);
    throw errors.tooManyRequests(
      `too many registrations of new node names from ${source} (registering "${nodeName}"); try again in ${wait} s`,
      wait,
    );
  }
}
