import { ApiError } from '../apiserver/errors.js';
import type { ApiClient } from '../client/types.js';

/**
 * The client the leader-only controllers write through: every write first asks whether it may go
 * out (the elector's term, read by its monotonic clock at that instant; the term's informers all
 * listed) and is refused when not. A deposed leader (paused past its lease, cut off from the datastore, or slow to notice)
 * therefore issues no write once another server could have taken over, even from a work queue or
 * a timer that runs before its step-down has stopped the controllers. Reads pass through.
 *
 * What this does not cover: a write issued inside the term whose commit is delayed past it (the
 * process paused between this check and the datastore's commit, a few milliseconds of code). Only
 * a precondition on the lease inside the datastore's own transaction closes that; see
 * docs/high-availability.md.
 */

export class NotLeaderError extends ApiError {
  override name = 'NotLeaderError';
  constructor(identity: string, why: string) {
    super(503, 'ServiceUnavailable', `${identity}: a controller write was refused: ${why}`);
  }
}

/**
 * `refusal()` is undefined when a write may go out now, else why not (it becomes the error's
 * message): the term is over or suspended, or its informers have not all listed yet.
 */
export function fencedClient(client: ApiClient, refusal: () => string | undefined, identity: string, onRefused?: (verb: string, why: string) => void): ApiClient {
  const check = (verb: string): void => {
    const why = refusal();
    if (why === undefined) return;
    onRefused?.(verb, why);
    throw new NotLeaderError(identity, why);
  };
  return {
    get: (ref, namespace, name) => client.get(ref, namespace, name),
    list: (ref, namespace, options) => client.list(ref, namespace, options),
    watch: (ref, namespace, resourceVersion, options, handler) => client.watch(ref, namespace, resourceVersion, options, handler),
    create: async (ref, namespace, obj) => {
      check('create');
      return client.create(ref, namespace, obj);
    },
    update: async (ref, namespace, obj, subresource) => {
      check('update');
      return client.update(ref, namespace, obj, subresource);
    },
    patch: async (ref, namespace, name, kind, patch, subresource) => {
      check('patch');
      return client.patch(ref, namespace, name, kind, patch, subresource);
    },
    delete: async (ref, namespace, name, options) => {
      check('delete');
      return client.delete(ref, namespace, name, options);
    },
    evict: async (namespace, name, options) => {
      check('evict');
      return client.evict(namespace, name, options);
    },
    requestToken: async (namespace, serviceAccount, request) => {
      check('requestToken');
      return client.requestToken(namespace, serviceAccount, request);
    },
  };
}
