import type { WatchEvent } from '../datastore/types.js';
import type { ResourceDefinition } from './definition.js';
import type { ObjectCodec } from './object-codec.js';
import { matchesSelection } from './selection.js';
import type { Selection, WatchSink } from './storage-types.js';

/**
 * One datastore event as a watcher of one kind and selection sees it: ADDED, MODIFIED or
 * DELETED, where an object that stops matching the selection is DELETED and one that starts
 * matching is ADDED.
 */
export function deliverWatchEvent(
  codec: ObjectCodec,
  def: ResourceDefinition,
  event: WatchEvent,
  selection: Selection,
  sink: WatchSink,
): void {
  if (event.type === 'delete') {
    // Shared by every watcher of this event, as a put's object is (do not mutate).
    const obj = codec.decodeShared(def, event.kv);
    if (matchesSelection(def, obj, selection)) sink.event('DELETED', obj);
    return;
  }
  const obj = codec.decodeShared(def, event.kv);
  if (!selection.labelSelector.length && !selection.fieldSelector.length) {
    // Everything matches: no need to decode the previous value to see what changed.
    sink.event(event.prevKv ? 'MODIFIED' : 'ADDED', obj);
    return;
  }
  const nowMatches = matchesSelection(def, obj, selection);
  // Shared by every watcher of this event (do not mutate).
  const before = event.prevKv ? codec.decodeShared(def, event.prevKv) : undefined;
  const beforeMatched = before !== undefined && matchesSelection(def, before, selection);
  if (nowMatches) sink.event(beforeMatched ? 'MODIFIED' : 'ADDED', obj);
  else if (beforeMatched) {
    // Leaving the selection: the watcher last saw (and can only match) the old state, at the
    // revision it left.
    sink.event('DELETED', { ...before!, metadata: { ...before!.metadata, resourceVersion: obj.metadata.resourceVersion } });
  }
}
