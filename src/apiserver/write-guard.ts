import type { GuardFailedError } from '../datastore/types.js';
import { ApiError } from './errors.js';

/**
 * A guarded write refused by the datastore: the guard key moved on. For the controllers, the
 * controller lease was written since this server's last renewal (another server took it, or this
 * server's own renewal raced the write: fenced-client.ts tells the two apart). The guard comes
 * with the call (storage-types.ts, WriteOptions.writeGuard; LocalClient.withWriteGuard).
 */
export class WriteGuardRefusedError extends ApiError {
  override name = 'WriteGuardRefusedError';
  constructor(readonly refusal: GuardFailedError) {
    super(503, 'ServiceUnavailable', `the write was refused by its guard: ${refusal.guard.key} changed (revision ${refusal.actualModRevision || 'gone'}, the writer expected ${refusal.guard.modRevision})`);
  }
}
