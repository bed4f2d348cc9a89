/** PATCH as the Kubernetes API server does it: the three patch content types and their rules. */
import { isJsonObject, type JsonObject, type JsonValue } from '../json.js';
import { applyJsonPatch } from './json-patch.js';
import { PatchError, mergePatch } from './merge.js';
import { patchMetaForKind } from './patch-meta.js';
import { strategicMergePatch } from './strategic.js';

export { applyJsonPatch } from './json-patch.js';
export { PatchError, mergePatch } from './merge.js';
export { childMeta, patchMetaForKind, type PatchMeta, type PatchStrategy } from './patch-meta.js';
export { strategicMergePatch } from './strategic.js';
export { applyConfiguration, LAST_APPLIED_ANNOTATION } from './apply.js';
export { kindSchema } from './kind-schemas.js';
export { strategicPatchFields } from './field-sets.js';
export { encodeEntries, storedEntries } from './managed-fields.js';

export type PatchType = 'json' | 'merge' | 'strategic';

/** What a PATCH's Content-Type asks for: one of the patches, or a server-side apply. */
export type PatchRequestType = PatchType | 'apply';

const PATCH_TYPES: Readonly<Record<string, PatchRequestType>> = {
  'application/json-patch+json': 'json',
  'application/merge-patch+json': 'merge',
  'application/strategic-merge-patch+json': 'strategic',
  'application/apply-patch+yaml': 'apply',
};

/** The Content-Types a PATCH may carry, as a 415 lists them. */
export const PATCH_CONTENT_TYPES: readonly string[] = Object.keys(PATCH_TYPES);

/**
 * The patch type of a PATCH request's Content-Type (`apply` for server-side apply), or
 * `undefined` for anything else, which the server answers with 415.
 */
export function patchTypeFromContentType(contentType: string): PatchRequestType | undefined {
  const mediaType = contentType.split(';', 1)[0].trim().toLowerCase();
  return Object.hasOwn(PATCH_TYPES, mediaType) ? PATCH_TYPES[mediaType] : undefined;
}

/**
 * Applies `patch` of the given type to `original`, an object of `kind` (which picks the
 * strategic merge rules). Returns a new object sharing no structure with the arguments, which
 * are left unmodified. Throws {@link PatchError} when the patch is malformed, does not apply, or
 * would leave something other than a JSON object.
 */
/**
 * `consumeOriginal`: the caller hands over a private copy it will not use again, so the patch may
 * work in it directly instead of copying it first (the API server's hot path does this).
 */
export function applyPatch(
  type: PatchType,
  original: JsonObject,
  patch: JsonValue,
  kind: string,
  options: { consumeOriginal?: boolean } = {},
): JsonObject {
  const consume = options.consumeOriginal === true;
  let result: JsonValue;
  switch (type) {
    case 'json':
      result = applyJsonPatch(original, patch, consume);
      break;
    case 'merge':
      result = mergePatch(original, patch, consume);
      break;
    case 'strategic':
      result = strategicMergePatch(original, patch, patchMetaForKind(kind), consume);
      break;
  }
  if (!isJsonObject(result)) {
    // A merge patch only yields a non-object when its body is not an object; a JSON patch does
    // when its operations replace or remove the root.
    throw new PatchError('the patched object must be a JSON object', type === 'json' ? 422 : 400);
  }
  return result;
}
