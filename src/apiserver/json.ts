/** JSON values as they arrive on the wire and as objects are stored. */
export type JsonPrimitive = string | number | boolean | null;
export type JsonValue = JsonPrimitive | JsonValue[] | JsonObject;
export interface JsonObject {
  [key: string]: JsonValue;
}

export function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Deep copy through JSON; objects here are always plain JSON. */
export function cloneJson<T extends JsonValue>(value: T): T {
  return structuredClone(value);
}

/**
 * Deep equality of JSON values where object key order does not matter (as it does not to
 * Kubernetes): a client that serialises fields in another order has not changed anything.
 */
export function jsonEqual(a: unknown, b: unknown, ignoreKeys?: ReadonlySet<string>): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!jsonEqual(a[i], b[i])) return false;
    return true;
  }
  if (Array.isArray(b)) return false;
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  let count = 0;
  for (const key in left) {
    if (ignoreKeys?.has(key) || left[key] === undefined) continue;
    count++;
    if (!(key in right) || !jsonEqual(left[key], right[key])) return false;
  }
  for (const key in right) {
    if (ignoreKeys?.has(key) || right[key] === undefined) continue;
    count--;
  }
  return count === 0;
}
