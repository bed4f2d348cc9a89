/**
 * Reads benchmark: lists and gets through the API (served by the watch cache since issue 18),
 * on SQLite and on etcd, against a baseline measured in the same run.
 *
 *   npm run build && node --import tsx bench/reads.ts [--baseline DIR] [--rounds 3] [--round-ms 2000]
 *        [--clients 8] [--objects 500]
 *
 * DIR is another checkout of this repository with its own `dist/` built (for instance the commit
 * before a change, unpacked with `git archive <commit> | tar -x -C DIR`, node_modules linked,
 * `npx tsc -p tsconfig.json` run there): its server is measured in the same run, in rounds
 * alternating with this build's, and each figure is given as this build / baseline. Without it,
 * the baseline is this build's datastore path: a list with `resourceVersionMatch=Exact` at the
 * revision the cache just served (read from the datastore's history).
 *
 * Each server (`drover server --disable-agent`, SQLite in the temp dir, or a fresh single-member
 * etcd on /dev/shm when writable) holds `--objects` ConfigMaps of ~1 KiB in one namespace, half
 * labelled tier=a. `--clients` keep-alive loops send one kind of read for `--round-ms`; kinds:
 * list (resourceVersion unset: consistent), list-rv0, list-selector (tier=a, unset), list-page
 * (limit=50, unset), get (unset: from the datastore), get-rv0 (from the cache). Figures: reads/s
 * (median of rounds) and server CPU per read (µs, /proc). Writes bench/results/reads.json.
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  benchTempDir,
  captureOutput,
  checkBuild,
  DROVER_BIN,
  droverReadyPort,
  fmtInt,
  installCleanup,
  machineInfo,
  median,
  parseBenchArgs,
  type PatchTarget,
  printMachine,
  processCpuSeconds,
  removeBenchTempDir,
  round,
  send,
  stopChild,
  track,
  waitForLine,
  writeResult,
} from './common.js';
import { startEtcd, type EtcdProc } from './etcd-process.js';

const { n, flags } = parseBenchArgs(
  { rounds: { default: 3, min: 1 }, 'round-ms': 2000, clients: 8, objects: 500 },
  { flags: { baseline: { type: 'string' } } },
);
const ROUNDS = n.rounds;
const ROUND_MS = n['round-ms'];
const CLIENTS = n.clients;
const OBJECTS = n.objects;
const BASELINE = flags.baseline ? path.resolve(String(flags.baseline)) : undefined;
const NS = 'bench-reads';
const CMS = `/api/v1/namespaces/${NS}/configmaps`;

interface Server {
  build: 'current' | 'baseline';
  store: 'sqlite' | 'etcd';
  child: ChildProcess;
  target: PatchTarget;
  /** The revision of the last list, for the Exact baseline. */
  lastRevision: string;
}

type Op = 'list' | 'list-rv0' | 'list-selector' | 'list-page' | 'get' | 'get-rv0' | 'list-exact';
const OPS: Op[] = ['list', 'list-rv0', 'list-selector', 'list-page', 'get', 'get-rv0', ...(BASELINE ? [] : (['list-exact'] as Op[]))];

function opPath(op: Op, server: Server, k: number): string {
  const name = `cm-${String(k % OBJECTS).padStart(5, '0')}`;
  switch (op) {
    case 'list':
      return CMS;
    case 'list-rv0':
      return `${CMS}?resourceVersion=0`;
    case 'list-selector':
      return `${CMS}?labelSelector=tier%3Da`;
    case 'list-page':
      return `${CMS}?limit=50`;
    case 'get':
      return `${CMS}/${name}`;
    case 'get-rv0':
      return `${CMS}/${name}?resourceVersion=0`;
    case 'list-exact':
      return `${CMS}?resourceVersion=${server.lastRevision}&resourceVersionMatch=Exact`;
  }
}

async function startServer(build: Server['build'], store: Server['store'], root: string, etcd?: EtcdProc): Promise<Server> {
  const bin = build === 'baseline' ? path.join(BASELINE!, 'dist/cli/main.js') : DROVER_BIN;
  const dataDir = fs.mkdtempSync(path.join(root, `${build}-${store}-`));
  const child = track(
    spawn(
      process.execPath,
      [
        bin, 'server', '--disable-agent', '--https-listen-port', '0', '--bind-address', '127.0.0.1', '--data-dir', dataDir,
        '--node-monitor-grace-period', '1h',
        ...(etcd ? ['--datastore-endpoint', etcd.endpoint.replace(/^http:\/\//, 'etcd://')] : []),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    ),
  );
  const output = captureOutput(child);
  const port = await waitForLine(child, `${build} server on ${store}`, droverReadyPort, output, 60_000);
  const target: PatchTarget = {
    port,
    ca: fs.readFileSync(path.join(dataDir, 'server', 'tls', 'server-ca.crt'), 'utf8'),
    token: fs.readFileSync(path.join(dataDir, 'server', 'cred', 'admin.token'), 'utf8').trim(),
    agent: new https.Agent({ keepAlive: true, maxSockets: CLIENTS }),
  };
  return { build, store, child, target, lastRevision: '' };
}

async function fill(server: Server): Promise<void> {
  const ns = await send(server.target, 'POST', '/api/v1/namespaces', JSON.stringify({ metadata: { name: NS } }));
  if (ns.status !== 201) throw new Error(`creating the namespace: ${ns.status} ${ns.text}`);
  const payload = 'x'.repeat(900);
  for (let i = 0; i < OBJECTS; i += CLIENTS) {
    await Promise.all(
      Array.from({ length: Math.min(CLIENTS, OBJECTS - i) }, async (_, j) => {
        const k = i + j;
        const body = { metadata: { name: `cm-${String(k).padStart(5, '0')}`, labels: { tier: k % 2 ? 'b' : 'a' } }, data: { payload } };
        const res = await send(server.target, 'POST', CMS, JSON.stringify(body));
        if (res.status !== 201) throw new Error(`creating ConfigMap ${k}: ${res.status} ${res.text}`);
      }),
    );
  }
}

async function load(server: Server, op: Op, ms: number): Promise<{ perSec: number; cpuUsPerOp: number; errors: number }> {
  const list = await send(server.target, 'GET', CMS, undefined);
  server.lastRevision = (JSON.parse(list.text) as { metadata: { resourceVersion: string } }).metadata.resourceVersion;
  const cpu0 = processCpuSeconds(server.child.pid!);
  let done = 0;
  let errors = 0;
  const started = performance.now();
  const deadline = started + ms;
  await Promise.all(
    Array.from({ length: CLIENTS }, async (_, w) => {
      for (let k = w; performance.now() < deadline; k += CLIENTS) {
        const res = await send(server.target, 'GET', opPath(op, server, k), undefined);
        if (res.status === 200) done++;
        else errors++;
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const cpu = processCpuSeconds(server.child.pid!) - cpu0;
  return { perSec: done / seconds, cpuUsPerOp: done ? (cpu * 1e6) / done : 0, errors };
}

async function main(): Promise<void> {
  checkBuild();
  installCleanup();
  const machine = machineInfo();
  printMachine(machine);
  const root = benchTempDir('reads');
  const etcdParent = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();
  const etcds: EtcdProc[] = [];
  const servers: Server[] = [];
  try {
    for (const build of BASELINE ? (['current', 'baseline'] as const) : (['current'] as const)) {
      for (const store of ['sqlite', 'etcd'] as const) {
        const etcd = store === 'etcd' ? await startEtcd(etcdParent) : undefined;
        if (etcd) etcds.push(etcd);
        const server = await startServer(build, store, root, etcd);
        servers.push(server);
        await fill(server);
      }
    }
    console.log(`# ${OBJECTS} ConfigMaps of ~1 KiB per server, ${CLIENTS} keep-alive clients, ${ROUNDS} x ${ROUND_MS} ms per read kind, servers alternating`);
    const samples = new Map<string, { perSec: number[]; cpu: number[]; errors: number }>();
    const keyOf = (s: Server, op: Op): string => `${s.store} ${s.build} ${op}`;
    for (const op of OPS) for (const s of servers) await load(s, op, 300); // warm-up (caches start on first list)
    for (let r = 0; r < ROUNDS; r++) {
      const order = r % 2 ? [...servers].reverse() : servers;
      for (const op of OPS) {
        for (const s of order) {
          const result = await load(s, op, ROUND_MS);
          const entry = samples.get(keyOf(s, op)) ?? { perSec: [], cpu: [], errors: 0 };
          entry.perSec.push(result.perSec);
          entry.cpu.push(result.cpuUsPerOp);
          entry.errors += result.errors;
          samples.set(keyOf(s, op), entry);
        }
      }
    }
    const results: Record<string, unknown> = {};
    for (const store of ['sqlite', 'etcd'] as const) {
      for (const op of OPS) {
        const cur = samples.get(`${store} current ${op}`)!;
        const base = BASELINE ? samples.get(`${store} baseline ${op}`)! : op.startsWith('list') && op !== 'list-exact' ? samples.get(`${store} current list-exact`) : undefined;
        const ratio = base ? median(cur.perSec) / median(base.perSec) : undefined;
        results[`${store} ${op}`] = {
          perSec: round(median(cur.perSec), 0),
          cpuUsPerOp: round(median(cur.cpu), 0),
          errors: cur.errors,
          ...(base ? { baselinePerSec: round(median(base.perSec), 0), baselineCpuUsPerOp: round(median(base.cpu), 0), ratio: round(ratio!, 2) } : {}),
        };
        console.log(
          `  ${store.padEnd(6)} ${op.padEnd(13)} ${fmtInt(median(cur.perSec)).padStart(7)}/s  ${fmtInt(median(cur.cpu)).padStart(6)} us/read` +
            (base ? `   baseline ${fmtInt(median(base.perSec)).padStart(7)}/s ${fmtInt(median(base.cpu)).padStart(6)} us/read   ratio ${ratio!.toFixed(2)}` : '') +
            (cur.errors ? `  errors ${cur.errors}` : ''),
        );
      }
    }
    const file = writeResult('reads', {
      benchmark: 'reads',
      machine,
      settings: { rounds: ROUNDS, roundMs: ROUND_MS, clients: CLIENTS, objects: OBJECTS, baseline: BASELINE ? 'another build (--baseline)' : 'list-exact (datastore history)' },
      results,
    });
    console.log(`\nwrote ${file}`);
  } finally {
    for (const s of servers) {
      s.target.agent.destroy();
      await stopChild(s.child);
    }
    for (const etcd of etcds) await etcd.stop();
    removeBenchTempDir(root);
  }
}

await main();
