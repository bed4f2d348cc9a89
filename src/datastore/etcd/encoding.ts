/**
 * How the etcd backend's keys, key ranges and numbers map onto etcd's: keys are bytes (a string
 * key is stored as its UTF-8, which also orders like etcd's), a prefix is a [key, range_end) range,
 * and etcd's int64 fields arrive as strings.
 */

/** The smallest key: a range from it covers the whole keyspace, and as range_end it means "no end". */
export const ZERO_KEY = Buffer.from([0]);
/** etcd keys are bytes; a string key is stored as its UTF-8, which also orders like etcd's. */
export const utf8 = (s: string): Buffer => Buffer.from(s, 'utf8');
/** etcd's int64 fields (revisions, IDs) as numbers; an absent one is 0. */
export const num = (value: string | number | undefined | null): number => Number(value ?? 0);

/** The smallest key above every key starting with `prefix`, or undefined when there is none. */
function prefixEnd(prefix: Buffer): Buffer | undefined {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i]! += 1;
      return end.subarray(0, i + 1);
    }
  }
  return undefined;
}

/** etcd's [key, range_end) for all keys starting with `prefix` (`\0` as range_end: no end). */
export function prefixRange(prefix: Buffer): { key: Buffer; rangeEnd: Buffer } {
  if (prefix.length === 0) return { key: ZERO_KEY, rangeEnd: ZERO_KEY };
  return { key: prefix, rangeEnd: prefixEnd(prefix) ?? ZERO_KEY };
}
