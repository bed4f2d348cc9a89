import type { ResourceDefinition } from '../definition.js';
import { builtInDefinitions } from '../builtin-definitions.js';
import { type FieldSchema, SchemaResolver } from './apply-schema.js';

/**
 * The schema server-side apply uses for a kind: a built-in kind's from the generated OpenAPI
 * definitions, a custom kind's from its CRD version's structural schema (no `$ref`s there).
 * A kind with neither is untyped: objects merge key by key, lists are atomic.
 */

let builtIns: SchemaResolver | undefined;
const plain = new SchemaResolver();

export interface KindSchema {
  resolver: SchemaResolver;
  schema: FieldSchema;
}

export function kindSchema(def: Pick<ResourceDefinition, 'group' | 'version' | 'kind' | 'crd'>): KindSchema {
  if (def.crd) return { resolver: plain, schema: plain.resolve(def.crd.schema) };
  const definitions = builtInDefinitions();
  builtIns ??= new SchemaResolver(definitions.schemas);
  const name = definitions.kinds[`${def.group}/${def.version}/${def.kind}`];
  return { resolver: builtIns, schema: name ? builtIns.resolve({ $ref: `#/components/schemas/${name}` }) : { schema: undefined } };
}
