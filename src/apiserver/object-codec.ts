import type { KeyValue } from '../datastore/types.js';
import type { ResourceDefinition } from './definition.js';
import { ApiError } from './errors.js';
import { MAX_OBJECT_BYTES } from './limits.js';
import type { KubeObject } from './objects.js';

/**
 * Objects to and from datastore values: JSON in the stored version's shape, without the
 * resourceVersion (which is the value's revision), bounded in size. Keeps the objects it has just
 * written parsed, so the next read-modify-write of the same object and every watcher of that
 * write need not parse the value again.
 */

/** A stored object as known to this server: the shared parsed object, its stored bytes, its revision. */
export interface KnownObject {
  modRevision: number;
  /** Shared: never mutated by anyone who reads it. */
  obj: KubeObject;
  /** The stored bytes (plaintext) of `obj`, without resourceVersion. */
  value: Buffer;
}

/** Recently written objects kept parsed. */
const RECENT_OBJECTS = 4096;

export class ObjectCodec {
  /**
   * Objects just written, by key, at their revision. Shared, so treated as immutable: only code
   * that does not mutate what it gets reads from here (guaranteedUpdate's `current`, watch
   * delivery). Not used for kinds served through a conversion.
   */
  private readonly recent = new Map<string, KnownObject>();

  /** `value`: the stored bytes of `obj` (what encode made), so a later copy is a parse, not a clone. */
  remember(def: ResourceDefinition, key: string, obj: KubeObject, value: Buffer): void {
    if (def.conversion) return;
    if (this.recent.size >= RECENT_OBJECTS) this.recent.clear();
    this.recent.set(key, { modRevision: Number(obj.metadata.resourceVersion), obj, value });
  }

  /**
   * The last object this codec remembered for the key, whatever its revision: possibly stale (a
   * write through another server), so only a compare-and-swap may rely on it.
   */
  lastKnown(def: ResourceDefinition, key: string): KnownObject | undefined {
    return def.conversion ? undefined : this.recent.get(key);
  }

  /** The key was deleted (or its write failed to say what is stored): forget what was remembered. */
  forget(key: string): void {
    this.recent.delete(key);
  }

  /**
   * The objects decoded from the key-values the datastore handed out, by the key-value itself:
   * a backend hands every watch of a prefix the same event objects, so each event's object and
   * its previous one are parsed once, not once per watch (a thousand agents watching their pods
   * by node name would otherwise parse every pod change a thousand times).
   */
  private readonly decoded = new WeakMap<KeyValue, KubeObject>();

  /** The object as stored at this kv's revision, parsed once and shared (do not mutate). */
  decodeShared(def: ResourceDefinition, kv: KeyValue): KubeObject {
    // A kind served through a conversion is decoded per watch: watches of two of its versions
    // share the stored key-value but not the object.
    if (def.conversion) return this.decode(def, kv);
    const hit = this.recent.get(kv.key);
    if (hit && hit.modRevision === kv.modRevision) return hit.obj;
    const known = this.decoded.get(kv);
    if (known) return known;
    const obj = this.decode(def, kv);
    this.decoded.set(kv, obj);
    return obj;
  }

  /** A private copy of the object as stored at this kv's revision. */
  decode(def: ResourceDefinition, kv: KeyValue): KubeObject {
    const stored = JSON.parse(kv.value.toString('utf8')) as KubeObject;
    stored.metadata.resourceVersion = String(kv.modRevision);
    return def.conversion ? def.conversion.fromStorage(stored) : stored;
  }

  encode(def: ResourceDefinition, obj: KubeObject): Buffer {
    const stored = def.conversion ? def.conversion.toStorage(obj) : obj;
    const { resourceVersion: _rv, ...metadata } = stored.metadata;
    const encoded = Buffer.from(JSON.stringify({ ...stored, metadata }));
    if (encoded.length > MAX_OBJECT_BYTES) {
      throw new ApiError(
        413,
        'RequestEntityTooLarge',
        `${def.kind} "${obj.metadata.name ?? ''}" is too large to store: ${encoded.length} bytes, the limit is ${MAX_OBJECT_BYTES} bytes (etcd's request limit)`,
      );
    }
    return encoded;
  }
}
