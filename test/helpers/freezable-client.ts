import type { ApiClient } from '../../src/client/types.js';

/** A client whose calls hang while `frozen` (a datastore without quorum, a cut link), then go through. */
export class FreezableClient {
  frozen = false;
  private readonly waiting: (() => void)[] = [];
  constructor(private readonly inner: ApiClient) {}

  private async gate(): Promise<void> {
    if (this.frozen) await new Promise<void>((resolve) => this.waiting.push(resolve));
  }

  /** Calls held at the gate now. */
  get held(): number {
    return this.waiting.length;
  }

  thaw(): void {
    this.frozen = false;
    for (const resolve of this.waiting.splice(0)) resolve();
  }

  get client(): ApiClient {
    const inner = this.inner;
    const gate = (): Promise<void> => this.gate();
    return {
      get: async (...args) => (await gate(), inner.get(...args)),
      list: async (...args) => (await gate(), inner.list(...args)),
      create: async (...args) => (await gate(), inner.create(...args)),
      update: async (...args) => (await gate(), inner.update(...args)),
      patch: async (...args) => (await gate(), inner.patch(...args)),
      delete: async (...args) => (await gate(), inner.delete(...args)),
      evict: async (...args) => (await gate(), inner.evict(...args)),
      requestToken: async (...args) => (await gate(), inner.requestToken(...args)),
      watch: (...args) => inner.watch(...args),
    };
  }
}
