/**
 * RFC 7386 JSON merge patch (`application/merge-patch+json`), plus the pieces every patch
 * flavour shares. {@link PatchError} lives here rather than in `index.ts` so the patch modules
 * can throw it without importing their own barrel (an import cycle).
 */
import { cloneJson, isJsonObject, type JsonObject, type JsonValue } from '../json.js';

/**
 * A patch that cannot be applied. `message` is shown to the client as is. The API server answers
 * with `status`: 400 when the patch body itself is malformed, 422 when a well-formed patch does
 * not fit the object (a failed JSON-patch `test`, a path that does not exist, ...), as Kubernetes
 * does.
 */
export class PatchError extends Error {
  override readonly name = 'PatchError';

  constructor(
    message: string,
    readonly status: 400 | 422,
  ) {
    super(message);
  }
}

/**
 * Reads only own keys: patch bodies are parsed client input, and a key such as `constructor`
 * must not resolve to something inherited from `Object.prototype`.
 */
export function getOwn(object: JsonObject, key: string): JsonValue | undefined {
  return Object.hasOwn(object, key) ? object[key] : undefined;
}

/** Stores `key` as plain data: assigning to `__proto__` would replace the prototype instead. */
export function setOwn(object: JsonObject, key: string, value: JsonValue): void {
  Object.defineProperty(object, key, { value, writable: true, enumerable: true, configurable: true });
}

/**
 * Applies `patch` to `original` per RFC 7386: objects merge recursively, `null` removes a key,
 * anything else (arrays included) replaces the target. A patch that is not an object replaces
 * the whole document, so the result need not be an object. Neither argument is modified, and
 * the result shares no structure with them.
 */
export function mergePatch(original: JsonValue, patch: JsonValue, consumeOriginal = false): JsonValue {
  return mergeInto(consumeOriginal ? original : cloneJson(original), patch);
}

/**
 * Merges into `target` (a private copy) in place. The patch is only read: its objects are merged
 * key by key into new ones, and what it puts in whole (an array) is copied, so a patch applied
 * again (a retried update) or read afterwards (managedFields) is the one the client sent.
 */
function mergeInto(target: JsonValue | undefined, patch: JsonValue): JsonValue {
  if (!isJsonObject(patch)) return Array.isArray(patch) ? cloneJson(patch) : patch;
  // A target that is not an object is replaced by the merge of the patch onto `{}`, which is
  // what drops the nulls from a subtree the document did not have.
  const result: JsonObject = isJsonObject(target) ? target : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) {
      delete result[key];
    } else {
      setOwn(result, key, mergeInto(getOwn(result, key), value));
    }
  }
  return result;
}
