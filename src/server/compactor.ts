import type { Datastore } from '../datastore/types.js';
import type { Logger } from '../logging/logger.js';

/**
 * Keep a window of recent history so watches can resume after a brief disconnect, and discard
 * the rest, as kube-apiserver asks etcd to. Compaction goes in steps of a few thousand revisions
 * with a turn of the event loop between them: one big synchronous delete would stall every
 * request for seconds on a busy store.
 */
const COMPACTION_STEP = 5000;

/** Every `intervalMs`, compacts up to the current revision − `keep`; a run still going is not started twice. */
export function startCompactor(datastore: Datastore, logger: Logger, intervalMs: number, keep: number): NodeJS.Timeout {
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    void (async () => {
      try {
        const target = (await datastore.currentRevision()) - keep;
        let compacted = await datastore.compactRevision();
        while (compacted < target) {
          compacted = Math.min(target, compacted + COMPACTION_STEP);
          await datastore.compact(compacted);
          await new Promise((resolve) => setImmediate(resolve));
        }
        logger.debug({ revision: compacted }, 'compacted datastore history');
      } catch (error) {
        logger.warn({ err: error }, 'datastore compaction failed; will retry');
      } finally {
        running = false;
      }
    })();
  }, intervalMs);
  timer.unref();
  return timer;
}
