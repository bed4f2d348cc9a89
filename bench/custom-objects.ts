/**
 * Custom objects against a built-in kind of the same size: create, update (PUT) and get per
 * second through HTTPS against one real `drover server`, for Widgets of a CRD (a structural
 * schema with a default, a pruned unknown-free body, a status subresource) and for ConfigMaps
 * carrying the same bytes. Rounds alternate between the two kinds (same server, same clients),
 * so noise hits both; each round creates, updates and reads its own fresh objects.
 *
 *   npm run build && node --import tsx bench/custom-objects.ts [--objects 400] [--rounds 3] [--clients 16] [--bytes 1024]
 *
 * Prints each phase's rate and the ratio custom / built-in (goal >= 0.8), and writes
 * bench/results/custom-objects.json.
 */
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { widgetCrd } from '../test/helpers/crd.js';
import {
  BenchApi,
  benchTempDir,
  checkBuild,
  fmtInt,
  installCleanup,
  machineInfo,
  median,
  parseBenchArgs,
  printMachine,
  removeBenchTempDir,
  round,
  startBenchServer,
  stopChild,
  writeResult,
} from './common.js';

const { n } = parseBenchArgs({ objects: 400, rounds: { default: 3, min: 1 }, clients: 16, bytes: 1024 });
const { objects: OBJECTS, rounds: ROUNDS, clients: CLIENTS, bytes: BYTES } = n;
const GOAL_RATIO = 0.8;
const PHASES = ['create', 'update', 'get'] as const;
type Phase = (typeof PHASES)[number];

interface Kind {
  name: 'custom' | 'builtin';
  collection: string;
  body(name: string, version: number): object;
}

const blob = (version: number): string => `${version}`.padEnd(BYTES, 'x');

const KINDS: Kind[] = [
  {
    name: 'custom',
    collection: '/apis/example.com/v1/namespaces/default/widgets',
    body: (name, version) => ({ apiVersion: 'example.com/v1', kind: 'Widget', metadata: { name }, spec: { size: 'small', color: 'red', blob: blob(version) } }),
  },
  {
    name: 'builtin',
    collection: '/api/v1/namespaces/default/configmaps',
    body: (name, version) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name }, data: { size: 'small', color: 'red', blob: blob(version) } }),
  },
];

/** `count` calls of `call(i)` from CLIENTS concurrent loops; calls per second. */
async function rate(count: number, call: (i: number) => Promise<void>): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      for (let i = next++; i < count; i = next++) await call(i);
    }),
  );
  return count / ((performance.now() - started) / 1000);
}

async function runRound(api: BenchApi, kind: Kind, roundNo: number): Promise<Record<Phase, number>> {
  const name = (i: number) => `${kind.name}-r${roundNo}-${i}`;
  const create = await rate(OBJECTS, async (i) => {
    await api.json('POST', kind.collection, kind.body(name(i), 0));
  });
  const update = await rate(OBJECTS, async (i) => {
    await api.json('PUT', `${kind.collection}/${name(i)}`, kind.body(name(i), 1));
  });
  const get = await rate(OBJECTS, async (i) => {
    await api.json('GET', `${kind.collection}/${name(i)}`);
  });
  return { create, update, get };
}

async function main(): Promise<void> {
  checkBuild();
  installCleanup();
  const info = machineInfo();
  printMachine(info);
  const dir = benchTempDir('custom-objects');
  const server = await startBenchServer(path.join(dir, 'data'), path.join(dir, 'server.log'));
  const api = new BenchApi(server, CLIENTS);
  try {
    await api.json('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', widgetCrd());
    for (let i = 0; ; i++) {
      const res = await api.request('GET', '/apis/example.com/v1/namespaces/default/widgets');
      if (res.status === 200) break;
      if (i > 100) throw new Error(`the CRD is not served: HTTP ${res.status} ${res.body}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    // A warm-up round of each, not counted.
    for (const kind of KINDS) await runRound(api, kind, -1);
    const results: Record<Kind['name'], Record<Phase, number[]>> = {
      custom: { create: [], update: [], get: [] },
      builtin: { create: [], update: [], get: [] },
    };
    for (let r = 0; r < ROUNDS; r++) {
      const order = r % 2 === 0 ? KINDS : [...KINDS].reverse();
      for (const kind of order) {
        const round_ = await runRound(api, kind, r);
        for (const phase of PHASES) results[kind.name][phase].push(round_[phase]);
        console.log(`round ${r + 1} ${kind.name.padEnd(7)} ${PHASES.map((p) => `${p} ${fmtInt(round_[p])}/s`).join('  ')}`);
      }
    }
    const summary = Object.fromEntries(
      PHASES.map((phase) => {
        const custom = median(results.custom[phase]);
        const builtin = median(results.builtin[phase]);
        return [phase, { customPerSec: round(custom, 0), builtinPerSec: round(builtin, 0), ratio: round(custom / builtin, 2), meetsGoal: custom / builtin >= GOAL_RATIO }];
      }),
    );
    console.log('\nmedian of rounds (custom Widget vs ConfigMap of the same bytes):');
    for (const [phase, s] of Object.entries(summary)) {
      console.log(`  ${phase.padEnd(6)} custom ${fmtInt(s.customPerSec)}/s  built-in ${fmtInt(s.builtinPerSec)}/s  ratio ${s.ratio} (goal >= ${GOAL_RATIO})${s.meetsGoal ? '' : '  BELOW GOAL'}`);
    }
    const file = writeResult('custom-objects', {
      machine: info,
      settings: { objects: OBJECTS, rounds: ROUNDS, clients: CLIENTS, bytes: BYTES },
      goalRatio: GOAL_RATIO,
      rounds: results,
      summary,
    });
    console.log(`\nwrote ${file}`);
  } finally {
    api.destroy();
    await stopChild(server.child, 'SIGTERM', 10_000);
    if (!fs.existsSync(path.join(dir, 'keep'))) removeBenchTempDir(dir);
  }
}

await main();
