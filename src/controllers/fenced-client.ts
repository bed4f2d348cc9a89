import { ApiError } from '../apiserver/errors.js';
import { WriteGuardRefusedError } from '../apiserver/write-guard.js';
import type { ApiClient } from '../client/types.js';
import type { WriteGuard } from '../datastore/types.js';

/**
 * The client the leader-only controllers write through: every write first asks whether it may go
 * out (the elector's term, read by its monotonic clock at that instant; the term's informers all
 * listed) and is refused when not. A deposed leader (paused past its lease, cut off from the datastore, or slow to notice)
 * therefore issues no write once another server could have taken over, even from a work queue or
 * a timer that runs before its step-down has stopped the controllers. Reads pass through.
 *
 * A write issued inside the term whose commit is delayed past it (the process paused between this
 * check and the datastore's commit, or the datastore stalled with the write in flight) is caught by
 * the write guard: `client` guards each write with the term's guard (LocalClient.withWriteGuard:
 * the controller lease's key at this server's last renewal), and the datastore refuses it once the
 * lease was written by anyone since. When the one who wrote it was this server (its own renewal,
 * committed while the write was on its way: `guard()` has moved past the refused guard), the write
 * is made again, under the new revision.
 * docs/high-availability.md, "What a new leader may not do".
 */

export class NotLeaderError extends ApiError {
  override name = 'NotLeaderError';
  constructor(identity: string, why: string) {
    super(503, 'ServiceUnavailable', `${identity}: a controller write was refused: ${why}`);
  }
}

/** Times a write refused by its guard is made again under this server's newer renewal. */
const GUARD_RETRIES = 3;

/**
 * `refusal()` is undefined when a write may go out now, else why not (it becomes the error's
 * message): the term is over or suspended, or its informers have not all listed yet.
 */
export function fencedClient(
  client: ApiClient,
  refusal: () => string | undefined,
  identity: string,
  onRefused?: (verb: string, why: string) => void,
  /** The term's write guard now, the one `client` writes under; to tell this server's own renewal from a takeover. */
  guard?: () => WriteGuard | undefined,
): ApiClient {
  const check = (verb: string): void => {
    const why = refusal();
    if (why === undefined) return;
    onRefused?.(verb, why);
    throw new NotLeaderError(identity, why);
  };
  const write = async <T>(verb: string, run: () => Promise<T>): Promise<T> => {
    for (let attempt = 0; ; attempt++) {
      check(verb);
      try {
        return await run();
      } catch (error) {
        if (!(error instanceof WriteGuardRefusedError)) throw error;
        // Nothing was written. Made again only if this server has renewed since the guard the
        // write carried (its own renewal moved the lease); otherwise someone else wrote the lease.
        const renewed = guard?.();
        if (attempt >= GUARD_RETRIES || !renewed || renewed.modRevision <= error.refusal.guard.modRevision) {
          const why = `the controller lease changed while the write was on its way (${error.message})`;
          onRefused?.(verb, why);
          throw new NotLeaderError(identity, why);
        }
      }
    }
  };
  return {
    get: (ref, namespace, name) => client.get(ref, namespace, name),
    list: (ref, namespace, options) => client.list(ref, namespace, options),
    watch: (ref, namespace, resourceVersion, options, handler) => client.watch(ref, namespace, resourceVersion, options, handler),
    create: (ref, namespace, obj) => write('create', () => client.create(ref, namespace, obj)),
    update: (ref, namespace, obj, subresource) => write('update', () => client.update(ref, namespace, obj, subresource)),
    patch: (ref, namespace, name, kind, patch, subresource) => write('patch', () => client.patch(ref, namespace, name, kind, patch, subresource)),
    delete: (ref, namespace, name, options) => write('delete', () => client.delete(ref, namespace, name, options)),
    evict: (namespace, name, options) => write('evict', () => client.evict(namespace, name, options)),
    requestToken: (namespace, serviceAccount, request) => write('requestToken', () => client.requestToken(namespace, serviceAccount, request)),
  };
}
