import { createHash } from 'node:crypto';
import { apiVersionOf, type ResourceDefinition } from './definition.js';
import type { ResourceRegistry } from './resources.js';

/**
 * A minimal OpenAPI v3 description. kubectl 1.27+ reads it before `apply` to learn whether the
 * server validates fields itself (a PATCH operation per kind listing `fieldValidation`); when it
 * does, kubectl sends `fieldValidation=Strict` and leaves validation to us. Schemas are left out:
 * kubectl falls back to its compiled-in types for patch computation.
 */

interface GroupVersionDoc {
  path: string;
  hash: string;
  body: string;
}

const FIELD_VALIDATION_PARAM = {
  name: 'fieldValidation',
  in: 'query',
  description: 'How the server treats unknown fields: Ignore, Warn (default) or Strict.',
  schema: { type: 'string', uniqueItems: true },
};

const OK = { description: 'OK', content: { 'application/json': { schema: { type: 'object' } } } };

function itemPath(def: ResourceDefinition): string {
  const base = def.group ? `/apis/${def.group}/${def.version}` : `/api/${def.version}`;
  return def.namespaced
    ? `${base}/namespaces/{namespace}/${def.plural}/{name}`
    : `${base}/${def.plural}/{name}`;
}

function operations(def: ResourceDefinition, withStatus: boolean): Record<string, object> {
  const gvk = { group: def.group, version: def.version, kind: def.kind };
  const op = (action: string, extra: object = {}): object => ({
    operationId: `${action}${def.kind}`,
    'x-kubernetes-action': action,
    'x-kubernetes-group-version-kind': gvk,
    responses: { '200': OK },
    ...extra,
  });
  if (def.respondToCreate) {
    // Never stored (the access reviews): only a POST to the collection.
    return { [itemPath(def).replace(/\/\{name\}$/, '')]: { post: op('create') } };
  }
  if (def.reads) {
    // Read, not stored (metrics): get and list.
    return { [itemPath(def)]: { get: op('get') }, [itemPath(def).replace(/\/\{name\}$/, '')]: { get: op('list') } };
  }
  const docs: Record<string, object> = {
    [itemPath(def)]: {
      get: op('get'),
      put: op('put', { parameters: [FIELD_VALIDATION_PARAM] }),
      patch: op('patch', { parameters: [FIELD_VALIDATION_PARAM] }),
      delete: op('delete'),
    },
  };
  if (withStatus) {
    docs[`${itemPath(def)}/status`] = {
      get: op('get'),
      put: op('put', { parameters: [FIELD_VALIDATION_PARAM] }),
      patch: op('patch', { parameters: [FIELD_VALIDATION_PARAM] }),
    };
  }
  return docs;
}

export class OpenApiDocuments {
  private docs = new Map<string, GroupVersionDoc>();
  private indexBody = '';
  private builtAt = -1;

  constructor(private readonly registry: ResourceRegistry) {}

  /** Rebuilt when the registry changed (a CRD came, changed or went): its hash changes with it, so clients fetch again. */
  private current(): void {
    if (this.builtAt === this.registry.generation) return;
    this.builtAt = this.registry.generation;
    const groupVersions = new Map<string, ResourceDefinition[]>();
    for (const def of this.registry.all) {
      const path = def.group ? `apis/${apiVersionOf(def)}` : `api/${def.version}`;
      groupVersions.set(path, [...(groupVersions.get(path) ?? []), def]);
    }
    const docs = new Map<string, GroupVersionDoc>();
    const indexPaths: Record<string, { serverRelativeURL: string }> = {};
    for (const [path, defs] of groupVersions) {
      const paths: Record<string, object> = {};
      for (const def of defs) Object.assign(paths, operations(def, def.subresources.includes('status')));
      const body = JSON.stringify({
        openapi: '3.0.0',
        info: { title: 'Drover', version: path },
        paths,
        components: { schemas: {} },
      });
      const hash = createHash('sha512').update(body).digest('hex').slice(0, 32).toUpperCase();
      docs.set(path, { path, hash, body });
      indexPaths[path] = { serverRelativeURL: `/openapi/v3/${path}?hash=${hash}` };
    }
    this.docs = docs;
    this.indexBody = JSON.stringify({ paths: indexPaths });
  }

  get index(): string {
    this.current();
    return this.indexBody;
  }

  /** The document for `api/v1` or `apis/<group>/<version>`. */
  document(path: string): GroupVersionDoc | undefined {
    this.current();
    return this.docs.get(path);
  }
}
