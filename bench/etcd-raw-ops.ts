/** The datastore operations of bench/etcd.ts made straight with the etcd3 client (also bench/etcd-client-cost.ts). */
import type { Etcd3 } from 'etcd3';

/** The three operations; each answers the new modRevision (get: whether the key was found). */
export interface Ops {
  create(key: string, value: Buffer): Promise<number>;
  update(key: string, value: Buffer, expected: number): Promise<number>;
  get(key: string): Promise<boolean>;
  close(): Promise<void>;
}

/**
 * The same operations with the etcd3 client's `kv.txn` / `kv.range` on `client` (its options are
 * the caller's). `oursUpdateRequest`: update sends the transaction Drover's etcd datastore sends
 * (two compares, a put and a keys-only range, a failure range, a 30 s deadline), not the bare
 * compare-and-put.
 */
export function rawOps(client: Etcd3, oursUpdateRequest = false): Ops {
  const utf8 = (s: string): Buffer => Buffer.from(s, 'utf8');
  return {
    async create(key, value) {
      const k = utf8(key);
      const r = await client.kv.txn({
        compare: [{ key: k, target: 'Create', result: 'Equal', create_revision: 0 }],
        success: [{ request_put: { key: k, value } }],
        failure: [],
      });
      if (!r.succeeded) throw new Error(`create ${key}: exists`);
      return Number(r.header.revision);
    },
    async update(key, value, expected) {
      const k = utf8(key);
      const r = oursUpdateRequest
        ? await client.kv.txn(
            {
              compare: [
                { key: k, target: 'Create', result: 'Greater', create_revision: 0 },
                { key: k, target: 'Mod', result: 'Equal', mod_revision: expected },
              ],
              success: [{ request_put: { key: k, value } }, { request_range: { key: k, keys_only: true } }],
              failure: [{ request_range: { key: k } }],
            },
            { deadline: new Date(Date.now() + 30_000) },
          )
        : await client.kv.txn({
            compare: [{ key: k, target: 'Mod', result: 'Equal', mod_revision: expected }],
            success: [{ request_put: { key: k, value } }],
            failure: [],
          });
      if (!r.succeeded) throw new Error(`update ${key}: conflict`);
      return Number(r.header.revision);
    },
    async get(key) {
      const r = await client.kv.range({ key: utf8(key) });
      return r.kvs.length > 0;
    },
    close: async () => client.close(),
  };
}
