/**
 * The plaintext of the latest value of each encrypted key that this process has written or
 * decrypted, and of the value before it, so that reading either again costs no decryption:
 * EncryptingDatastore's read side. The value before the latest is what a watch event's prevKv
 * holds: without it, every write would cost each watcher of Secrets a decryption.
 *
 * A (key, modRevision) pair names one stored value for good (revisions are never reused), so an
 * entry is valid exactly while the stored value still has its revision; a newer write replaces
 * it, an older revision (a list at a past revision, a lagging watch) is never cached over a newer
 * one. The cache lives in this process's memory only, as kube-apiserver's watch cache holds
 * Secrets decrypted; what is encrypted at rest is the datastore. Bounded by bytes, least recently
 * used first out.
 */

interface Revision {
  modRevision: number;
  plaintext: Buffer;
}

interface Entry extends Revision {
  /** The value this one replaced, kept for the watch events of that write. */
  previous?: Revision;
}

const entryBytes = (entry: Entry): number => entry.plaintext.length + (entry.previous?.plaintext.length ?? 0);

export const DEFAULT_PLAINTEXT_CACHE_BYTES = 32 * 1024 * 1024;

export class PlaintextCache {
  /** In recency order: Map iteration order is insertion order, and a hit re-inserts. */
  private readonly entries = new Map<string, Entry>();
  private bytes = 0;

  constructor(private readonly maxBytes: number = DEFAULT_PLAINTEXT_CACHE_BYTES) {}

  get(key: string, modRevision: number): Buffer | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    const found = entry.modRevision === modRevision ? entry : entry.previous?.modRevision === modRevision ? entry.previous : undefined;
    if (!found) return undefined;
    this.entries.delete(key);
    this.entries.set(key, entry);
    // A copy: callers may reuse or change the buffer they are given (a datastore copies values).
    return Buffer.from(found.plaintext);
  }

  set(key: string, modRevision: number, plaintext: Buffer): void {
    const old = this.entries.get(key);
    if (old) {
      if (old.modRevision > modRevision) return;
      this.remove(key, old);
    }
    if (plaintext.length > this.maxBytes) return;
    const entry: Entry = { modRevision, plaintext: Buffer.from(plaintext) };
    // A newer value demotes the latest to `previous` (whose own previous goes).
    const previous = !old ? undefined : old.modRevision < modRevision ? { modRevision: old.modRevision, plaintext: old.plaintext } : old.previous;
    if (previous && previous.plaintext.length + plaintext.length <= this.maxBytes) entry.previous = previous;
    this.entries.set(key, entry);
    this.bytes += entryBytes(entry);
    for (const [oldest, candidate] of this.entries) {
      if (this.bytes <= this.maxBytes) break;
      this.remove(oldest, candidate);
    }
  }

  /** The key was deleted at `revision`: drop what is cached from before it. */
  forget(key: string, revision: number): void {
    const entry = this.entries.get(key);
    if (entry && entry.modRevision < revision) this.remove(key, entry);
  }

  clear(): void {
    this.entries.clear();
    this.bytes = 0;
  }

  /** Bytes of plaintext held (for tests). */
  size(): { entries: number; bytes: number } {
    return { entries: this.entries.size, bytes: this.bytes };
  }

  private remove(key: string, entry: Entry): void {
    this.entries.delete(key);
    this.bytes -= entryBytes(entry);
  }
}
