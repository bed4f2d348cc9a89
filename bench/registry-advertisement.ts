/**
 * Embedded-registry advertisement cost (docs/registry.md, docs/benchmarks.md): what 1,000 nodes ×
 * 200 images of peer advertisements cost a real server (SQLite), against node heartbeat Leases
 * written the same way in the same run.
 *
 *   node --import tsx bench/registry-advertisement.ts [--nodes 1000] [--images 200] [--clients 8] [--seconds 10]
 *
 * Writes bench/results/registry-advertisement.json.
 *
 * A `drover server` (SQLite) gets one advertisement per simulated node: the ConfigMap an agent
 * writes (src/node-protocol/registry-peers.ts), `--images` lines of realistic references and
 * digests (a quarter multi-platform, with a third field). Measured:
 * - bytes: the objects as the API returns them (what the datastore holds and a watcher downloads
 *   at its first list), and the growth of the SQLite files (db, WAL) over the creates;
 * - writes/s the server sustains for advertisement updates (one image replaced per write, the
 *   change an agent publishes), from `--clients` keep-alive clients for `--seconds`; the same for
 *   Lease renewals (small objects) as the baseline;
 * - what a pulling node pays to index them all (decodeAdvertisement into lookup sets): time and
 *   heap.
 * Writes in a cluster happen on image changes only, never on heartbeats: the figure to compare
 * with the capacity is the rate of image changes (printed for one change per node every 10
 * minutes), against 1,000 Lease renewals every 10 s.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { type AdvertisedImage, decodeAdvertisement, encodeAdvertisement } from '../src/node-protocol/registry-peers.js';
import { BenchApi, benchTempDir, checkBuild, installCleanup, machineInfo, printMachine, round, startBenchServer, writeResult } from './common.js';

const { values: args } = parseArgs({
  options: {
    nodes: { type: 'string', default: '1000' },
    images: { type: 'string', default: '200' },
    clients: { type: 'string', default: '8' },
    seconds: { type: 'string', default: '10' },
  },
});
const NODES = Number(args.nodes);
const IMAGES = Number(args.images);
const CLIENTS = Number(args.clients);
const SECONDS = Number(args.seconds);

installCleanup();

const digest = (seed: string): string => `sha256:${createHash('sha256').update(seed).digest('hex')}`;

/** A node's images: mostly shared across nodes (the same workloads), some its own. */
function imagesOf(node: number, generation = 0): AdvertisedImage[] {
  const out: AdvertisedImage[] = [];
  for (let i = 0; i < IMAGES; i++) {
    const shared = i < IMAGES * 0.8;
    const id = shared ? `shared-${i}` : `own-${node}-${i}-${generation}`;
    const ref = `registry.example.com/team-${i % 17}/service-${id}:v1.${i % 9}.${(i * 7) % 31}`;
    out.push({ ref, digest: digest(`${id}/index`), ...(i % 4 === 0 ? { manifestDigest: digest(`${id}/amd64`) } : {}) });
  }
  return out;
}

const advertisement = (node: number, text: string, rv?: string): unknown => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: {
    name: `bench-node-${node}`,
    namespace: 'kube-node-lease',
    ...(rv ? { resourceVersion: rv } : {}),
    labels: { 'drover.io/registry-peer': 'true' },
    annotations: { 'drover.io/node-uid': digest(`uid-${node}`).slice(7, 43) },
  },
  data: { images: text },
});

const lease = (node: number, beat: number, rv?: string): unknown => ({
  apiVersion: 'coordination.k8s.io/v1',
  kind: 'Lease',
  metadata: { name: `bench-node-${node}`, namespace: 'kube-node-lease', ...(rv ? { resourceVersion: rv } : {}) },
  spec: { holderIdentity: `bench-node-${node}/${digest(`uid-${node}`).slice(7, 43)}`, leaseDurationSeconds: 40, renewTime: new Date(Date.UTC(2026, 0, 1, 0, 0, beat)).toISOString().replace('Z', '000Z') },
});

/** A keep-alive socket the server closed as idle answers ECONNRESET at once: asked again (a few times) on another. */
async function call<T>(api: BenchApi, method: string, apiPath: string, body?: unknown): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await api.json<T>(method, apiPath, body);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ECONNRESET' || attempt >= 4) throw error;
      resets++;
    }
  }
}
let resets = 0;

function dbBytes(dataDir: string): number {
  const dir = path.join(dataDir, 'server', 'db');
  return fs.readdirSync(dir).reduce((sum, f) => sum + fs.statSync(path.join(dir, f)).size, 0);
}

/** `work(i)` for i = 0.. from `clients` concurrent loops until `seconds` pass; writes/s and errors. */
async function sustained(work: (i: number) => Promise<void>): Promise<{ writes: number; perSecond: number; errors: number }> {
  let next = 0;
  let done = 0;
  let errors = 0;
  const end = performance.now() + SECONDS * 1000;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      while (performance.now() < end) {
        const i = next++;
        try {
          await work(i);
          done++;
        } catch {
          errors++;
        }
      }
    }),
  );
  const seconds = (performance.now() - start) / 1000;
  return { writes: done, perSecond: round(done / seconds, 1), errors };
}

async function main(): Promise<void> {
  checkBuild();
  const machine = machineInfo();
  printMachine(machine);
  const dir = benchTempDir('drover-bench-registry-adverts-');
  const server = await startBenchServer(path.join(dir, 'server'), path.join(dir, 'server.log'));
  const api = new BenchApi(server, CLIENTS);
  const base = '/api/v1/namespaces/kube-node-lease';

  // Creates: every node's advertisement once.
  const dbBefore = dbBytes(server.dataDir);
  const texts = Array.from({ length: NODES }, (_, n) => encodeAdvertisement(imagesOf(n)));
  const versions = new Array<string>(NODES);
  let created = 0;
  const createStart = performance.now();
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      for (let n = created++; n < NODES; n = created++) {
        const object = await call<{ metadata: { resourceVersion: string } }>(api, 'POST', `${base}/configmaps`, advertisement(n, texts[n]!));
        versions[n] = object.metadata.resourceVersion;
      }
    }),
  );
  const createSeconds = (performance.now() - createStart) / 1000;
  // Listed as a watcher lists them (pages of 100), so no single answer is tens of MiB.
  let listBytes = 0;
  const items: { data: { images: string } }[] = [];
  for (let token = ''; ; ) {
    const page = await call<{ items: { data: { images: string } }[]; metadata: { continue?: string } }>(
      api,
      'GET',
      `${base}/configmaps?labelSelector=drover.io%2Fregistry-peer%3Dtrue&limit=100${token ? `&continue=${encodeURIComponent(token)}` : ''}`,
    );
    listBytes += Buffer.byteLength(JSON.stringify(page));
    items.push(...page.items);
    token = page.metadata.continue ?? '';
    if (!token) break;
  }
  const dbAfter = dbBytes(server.dataDir);
  const textBytes = texts.reduce((s, t) => s + Buffer.byteLength(t), 0);
  console.log(
    `adverts: ${NODES} nodes × ${IMAGES} images: ${round(textBytes / NODES / 1024, 1)} KiB of lines per node, list of all ${round(listBytes / 2 ** 20, 2)} MiB, ` +
      `SQLite files +${round((dbAfter - dbBefore) / 2 ** 20, 1)} MiB; created at ${round(NODES / createSeconds, 1)}/s`,
  );

  // Indexing them all, as a pulling node's directory does.
  const heapBefore = process.memoryUsage().heapUsed;
  const indexStart = performance.now();
  const index = items.map((item) => {
    const keys = new Set<string>();
    for (const image of decodeAdvertisement(item.data.images)) {
      keys.add(image.ref);
      keys.add(image.digest);
      if (image.manifestDigest) keys.add(image.manifestDigest);
    }
    return keys;
  });
  const indexMs = performance.now() - indexStart;
  const indexHeap = process.memoryUsage().heapUsed - heapBefore;
  console.log(`index on a pulling node: ${round(indexMs, 1)} ms, ~${round(indexHeap / 2 ** 20, 1)} MiB heap for ${index.reduce((s, k) => s + k.size, 0)} keys`);

  // Updates: one image replaced per write (what an agent publishes after a pull), round robin over nodes.
  const generation = new Array<number>(NODES).fill(0);
  const updates = await sustained(async (i) => {
    const n = i % NODES;
    generation[n]!++;
    const text = encodeAdvertisement(imagesOf(n, generation[n]));
    const object = await call<{ metadata: { resourceVersion: string } }>(api, 'PUT', `${base}/configmaps/bench-node-${n}`, advertisement(n, text, versions[n]));
    versions[n] = object.metadata.resourceVersion;
  });
  // Baseline: Lease renewals, the small writes every node makes every 10 s.
  const leaseVersions = new Array<string>(NODES);
  for (let n = 0; n < NODES; n++) leaseVersions[n] = (await call<{ metadata: { resourceVersion: string } }>(api, 'POST', `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases`, lease(n, 0))).metadata.resourceVersion;
  const leases = await sustained(async (i) => {
    const n = i % NODES;
    const object = await call<{ metadata: { resourceVersion: string } }>(api, 'PUT', `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/bench-node-${n}`, lease(n, i + 1, leaseVersions[n]));
    leaseVersions[n] = object.metadata.resourceVersion;
  });
  const changeRate = NODES / 600;
  const heartbeatRate = NODES / 10;
  console.log(
    `writes/s sustained (${CLIENTS} clients, ${SECONDS} s): advertisement updates ${updates.perSecond} (${updates.errors} errors), Lease renewals ${leases.perSecond} (baseline); ` +
      `ratio ${round(updates.perSecond / leases.perSecond, 3)}`,
  );
  console.log(
    `load model: one image change per node every 10 min = ${round(changeRate, 2)} advertisement writes/s (${round((100 * changeRate) / updates.perSecond, 1)}% of capacity), ` +
      `${round((changeRate * textBytes) / NODES / 1024, 1)} KiB/s; the ${NODES} nodes' Lease renewals every 10 s = ${heartbeatRate} writes/s`,
  );
  api.destroy();
  const file = writeResult('registry-advertisement', {
    machine,
    loadAfter: machineInfo().loadAverage,
    nodes: NODES,
    imagesPerNode: IMAGES,
    clients: CLIENTS,
    seconds: SECONDS,
    bytesPerNode: Math.round(textBytes / NODES),
    listBytes,
    sqliteGrowthBytes: dbAfter - dbBefore,
    createsPerSecond: round(NODES / createSeconds, 1),
    indexMs: round(indexMs, 1),
    indexHeapBytes: indexHeap,
    updatesPerSecond: updates.perSecond,
    updateErrors: updates.errors,
    connectionResetsRetried: resets,
    leaseRenewalsPerSecond: leases.perSecond,
    updatesVsLeases: round(updates.perSecond / leases.perSecond, 3),
    modelChangeWritesPerSecond: round(changeRate, 3),
    modelLeaseWritesPerSecond: heartbeatRate,
  });
  console.log(`# wrote ${file}`);
}

void main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
