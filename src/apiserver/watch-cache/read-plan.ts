import { errors } from '../errors.js';

/**
 * Which state of the store a read asks for, as Kubernetes defines it for `resourceVersion` and
 * `resourceVersionMatch`, and where the API server serves it from. Pure: no server, no cache.
 *
 * - `latest` (resourceVersion unset): the most recent state, "consistent": it reflects every
 *   write acknowledged before the read began, on any server.
 * - `any` (resourceVersion "0"): whatever this server has, possibly stale (never older than what
 *   the same cache served before).
 * - `notOlderThan` (resourceVersion N, with resourceVersionMatch=NotOlderThan or, for lists, no
 *   match): a state at revision N or later.
 * - `exact` (resourceVersion N, resourceVersionMatch=Exact): the state at exactly N, from the
 *   store's history (410 once compacted).
 */
export type ReadRevision =
  | { kind: 'latest' }
  | { kind: 'any' }
  | { kind: 'notOlderThan'; revision: number }
  | { kind: 'exact'; revision: number };

/**
 * A list's ReadRevision from its query, refused (400) as kube-apiserver refuses it. With a
 * `continue` token the token's revision decides and the parameters are ignored, as before.
 */
export function listReadRevision(resourceVersion: string | undefined, match: string | undefined, continuing = false): ReadRevision {
  const m = match ?? '';
  if (m !== '' && m !== 'Exact' && m !== 'NotOlderThan') {
    throw errors.badRequest(`invalid resourceVersionMatch "${m}": supported values: "Exact", "NotOlderThan"`);
  }
  if (continuing) {
    if (m !== '') throw errors.badRequest('resourceVersionMatch is forbidden when continue is provided');
    return { kind: 'latest' };
  }
  if (resourceVersion === undefined || resourceVersion === '') {
    if (m !== '') throw errors.badRequest('resourceVersionMatch is forbidden unless resourceVersion is provided');
    return { kind: 'latest' };
  }
  const revision = Number(resourceVersion);
  if (!Number.isSafeInteger(revision) || revision < 0) {
    throw errors.badRequest(`invalid resource version "${resourceVersion}": must be a non-negative integer`);
  }
  if (m === 'Exact') {
    if (revision === 0) throw errors.badRequest('resourceVersionMatch "Exact" is forbidden for resourceVersion "0"');
    return { kind: 'exact', revision };
  }
  return revision === 0 ? { kind: 'any' } : { kind: 'notOlderThan', revision };
}

/** A get's ReadRevision: unset is the latest, "0" any, N not older than N (gets have no match). */
export function getReadRevision(resourceVersion: string | undefined): ReadRevision {
  if (resourceVersion === undefined || resourceVersion === '') return { kind: 'latest' };
  const revision = Number(resourceVersion);
  if (!Number.isSafeInteger(revision) || revision < 0) {
    throw errors.badRequest(`invalid resource version "${resourceVersion}": must be a non-negative integer`);
  }
  return revision === 0 ? { kind: 'any' } : { kind: 'notOlderThan', revision };
}

/** What the cache of one resource can say about itself when a read arrives. */
export interface CacheView {
  /** Filled and watching: it can serve once it has reached the revision a read needs. */
  ready: boolean;
  /** Every event up to this revision is applied. */
  revision: number;
  /** The revision of the last change to this resource the cache applied. */
  lastChange: number;
}

/**
 * Where a read is served from:
 * - `cache`: now, from the cache as it is;
 * - `cache-after-progress`: from the cache once a progress report (which reads the store's
 *   revision after the request began) shows the cache has every event up to that revision;
 * - `cache-after`: from the cache once it reached `revision` (a bounded wait);
 * - `store`: from the datastore (history, or no cache yet), at `revision` when given.
 */
export type ReadSource =
  | { from: 'cache' }
  | { from: 'cache-after-progress' }
  | { from: 'cache-after'; revision: number }
  | { from: 'store'; revision?: number };

/**
 * `continueRevision`: the revision of the continue token a list goes on from. Its next page comes
 * from the cache only while the cache still holds exactly that state (nothing of this resource
 * changed since); otherwise from the store's history at that revision, as the first page was.
 */
export function planRead(read: ReadRevision, cache: CacheView | undefined, continueRevision?: number): ReadSource {
  if (continueRevision !== undefined) {
    if (cache?.ready && cache.lastChange <= continueRevision && cache.revision >= continueRevision) return { from: 'cache' };
    return { from: 'store', revision: continueRevision };
  }
  if (read.kind === 'exact') return { from: 'store', revision: read.revision };
  if (!cache?.ready) return { from: 'store' };
  switch (read.kind) {
    case 'any':
      return { from: 'cache' };
    case 'notOlderThan':
      return cache.revision >= read.revision ? { from: 'cache' } : { from: 'cache-after', revision: read.revision };
    case 'latest':
      return { from: 'cache-after-progress' };
  }
}
