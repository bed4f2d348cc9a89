/**
 * Server-side apply against a strategic-merge PATCH of the same change: the same kind (suspended
 * CronJobs: a pod template with a container list merged by name, and no controller reacting to
 * the writes), the same change each time (a label value and the container's image), through
 * HTTPS against one real `drover server`. The apply sends the whole configuration, as kubectl
 * and GitOps tools do; the patch sends only the change. Rounds alternate between the two (same
 * server, same clients), each on its own objects, so noise hits both.
 *
 *   npm run build && node --import tsx bench/server-side-apply.ts [--objects 100] [--writes 1500] [--rounds 3] [--clients 8]
 *
 * Prints each round's writes per second and the ratio apply / strategic patch (goal >= 0.5), and
 * writes bench/results/server-side-apply.json.
 */
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  BenchApi,
  benchTempDir,
  checkBuild,
  fmtInt,
  HttpStatusError,
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

const { n } = parseBenchArgs({ objects: 100, writes: 1500, rounds: { default: 3, min: 1 }, clients: 8 });
const { objects: OBJECTS, writes: WRITES, rounds: ROUNDS, clients: CLIENTS } = n;
const GOAL_RATIO = 0.5;
const COLLECTION = '/apis/batch/v1/namespaces/default/cronjobs';

type Way = 'apply' | 'strategic';
const WAYS: Way[] = ['apply', 'strategic'];

/** The whole configuration an applier sends; `version` moves the label and the image. */
function configuration(name: string, version: number): object {
  return {
    apiVersion: 'batch/v1',
    kind: 'CronJob',
    metadata: { name, labels: { app: name, version: String(version) } },
    spec: {
      schedule: '0 0 1 1 *',
      suspend: true,
      jobTemplate: {
        spec: {
          template: {
            metadata: { labels: { app: name } },
            spec: {
              restartPolicy: 'Never',
              containers: [
                { name: 'main', image: `registry.example/app:${version}`, command: ['sleep', '3600'], env: [{ name: 'MODE', value: 'bench' }], ports: [{ containerPort: 8080 }] },
                { name: 'sidecar', image: 'registry.example/proxy:1', command: ['proxy'], args: ['--port', '9090'] },
              ],
            },
          },
        },
      },
    },
  };
}

/** The same change as a strategic merge patch: only what moved, the container by its name. */
function strategicPatch(version: number): object {
  return {
    metadata: { labels: { version: String(version) } },
    spec: { jobTemplate: { spec: { template: { spec: { containers: [{ name: 'main', image: `registry.example/app:${version}` }] } } } } },
  };
}

const objectName = (way: Way, i: number): string => `${way}-${i}`;

async function write(api: BenchApi, way: Way, i: number, version: number): Promise<void> {
  const name = objectName(way, i);
  const res =
    way === 'apply'
      ? await api.request('PATCH', `${COLLECTION}/${name}?fieldManager=bench-apply`, configuration(name, version), 5000, 'application/apply-patch+yaml')
      : await api.request('PATCH', `${COLLECTION}/${name}?fieldManager=bench-patch`, strategicPatch(version), 5000, 'application/strategic-merge-patch+json');
  if (res.status !== 200) throw new HttpStatusError('PATCH', `${COLLECTION}/${name}`, res.status, res.body);
}

/** WRITES writes of one way from CLIENTS loops, over its objects in turn; writes per second. */
async function runRound(api: BenchApi, way: Way, version: number): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CLIENTS }, async () => {
      for (let i = next++; i < WRITES; i = next++) await write(api, way, i % OBJECTS, version * WRITES + i);
    }),
  );
  return WRITES / ((performance.now() - started) / 1000);
}

async function main(): Promise<void> {
  checkBuild();
  installCleanup();
  const info = machineInfo();
  printMachine(info);
  const dir = benchTempDir('server-side-apply');
  const server = await startBenchServer(path.join(dir, 'data'), path.join(dir, 'server.log'));
  const api = new BenchApi(server, CLIENTS);
  try {
    // Both sets of objects are made by an apply (the applier that then changes them), so both
    // carry managedFields from the start.
    for (const way of WAYS) {
      for (let i = 0; i < OBJECTS; i++) {
        const name = objectName(way, i);
        const res = await api.request('PATCH', `${COLLECTION}/${name}?fieldManager=bench-apply`, configuration(name, 0), 5000, 'application/apply-patch+yaml');
        if (res.status !== 201) throw new HttpStatusError('PATCH', `${COLLECTION}/${name}`, res.status, res.body);
      }
    }
    // A warm-up round of each, not counted.
    for (const way of WAYS) await runRound(api, way, 0);
    const results: Record<Way, number[]> = { apply: [], strategic: [] };
    for (let r = 1; r <= ROUNDS; r++) {
      const order = r % 2 === 1 ? WAYS : [...WAYS].reverse();
      for (const way of order) {
        const perSec = await runRound(api, way, r);
        results[way].push(perSec);
        console.log(`round ${r} ${way.padEnd(9)} ${fmtInt(perSec)} writes/s`);
      }
    }
    const apply = median(results.apply);
    const strategic = median(results.strategic);
    const ratio = apply / strategic;
    console.log(`\nmedian of rounds: apply ${fmtInt(apply)}/s  strategic merge patch ${fmtInt(strategic)}/s  ratio ${round(ratio, 2)} (goal >= ${GOAL_RATIO})${ratio >= GOAL_RATIO ? '' : '  BELOW GOAL'}`);
    const file = writeResult('server-side-apply', {
      machine: info,
      settings: { objects: OBJECTS, writes: WRITES, rounds: ROUNDS, clients: CLIENTS, kind: 'CronJob (suspended)' },
      goalRatio: GOAL_RATIO,
      rounds: results,
      summary: { applyPerSec: round(apply, 0), strategicPerSec: round(strategic, 0), ratio: round(ratio, 2), meetsGoal: ratio >= GOAL_RATIO },
    });
    console.log(`\nwrote ${file}`);
  } finally {
    api.destroy();
    await stopChild(server.child, 'SIGTERM', 10_000);
    if (!fs.existsSync(path.join(dir, 'keep'))) removeBenchTempDir(dir);
  }
}

await main();
