import fs from 'node:fs';

/**
 * The built-in kinds' OpenAPI schemas, generated into schemas/kubernetes-definitions.json (from
 * @kubernetes/client-node's models by scripts/openapi-definitions.ts), read once: the OpenAPI
 * documents serve them, server-side apply merges by them (src/apiserver/patch/kind-schemas.ts).
 */

export interface Definitions {
  /** `group/version/Kind` → schema name. */
  kinds: Record<string, string>;
  schemas: Record<string, Record<string, unknown>>;
}

let definitions: Definitions | undefined;

/** The generated built-in schemas (none if the file is missing: explain then fails, nothing else does). */
export function builtInDefinitions(): Definitions {
  if (definitions) return definitions;
  try {
    definitions = JSON.parse(fs.readFileSync(new URL('../../schemas/kubernetes-definitions.json', import.meta.url), 'utf8')) as Definitions;
  } catch {
    definitions = { kinds: {}, schemas: {} };
  }
  return definitions;
}
