/**
 * Readers waiting for a cache to reach a revision, each with its own bound: resolved true when
 * the revision is reached, false when the bound passes or the cache fails. Kept sorted by
 * revision, so reaching a revision releases a prefix of them.
 */
interface Waiter {
  revision: number;
  finish: (ok: boolean) => void;
}

export class RevisionWaiters {
  private waiting: Waiter[] = [];

  get size(): number {
    return this.waiting.length;
  }

  wait(revision: number, timeoutMs: number): Promise<boolean> {
    return new Promise((resolve) => {
      let settled = false;
      const waiter: Waiter = {
        revision,
        finish: (ok) => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          this.waiting = this.waiting.filter((w) => w !== waiter);
          resolve(ok);
        },
      };
      const timer = setTimeout(() => waiter.finish(false), timeoutMs);
      // Insert in revision order (usually at the end: later readers want later revisions).
      let i = this.waiting.length;
      while (i > 0 && this.waiting[i - 1]!.revision > revision) i--;
      this.waiting.splice(i, 0, waiter);
    });
  }

  /** Everything up to `revision` is applied: release whoever waited for it. */
  reached(revision: number): void {
    let n = 0;
    while (n < this.waiting.length && this.waiting[n]!.revision <= revision) n++;
    if (n === 0) return;
    const done = this.waiting.slice(0, n);
    this.waiting = this.waiting.slice(n);
    for (const waiter of done) waiter.finish(true);
  }

  failAll(): void {
    const all = this.waiting;
    this.waiting = [];
    for (const waiter of all) waiter.finish(false);
  }
}
