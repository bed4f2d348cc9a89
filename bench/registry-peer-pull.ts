/**
 * Embedded-registry peer pull benchmark (docs/registry.md, docs/benchmarks.md): pulling an image
 * from a peer's embedded registry, against copying the same blobs locally (goal: peer ≥ 0.5 × the
 * local copy, on loopback) and against the same pull from a test upstream registry, in the same
 * run.
 *
 *   node --import tsx bench/registry-peer-pull.ts [--sizes 50,500] [--rounds 3]
 *
 * Writes bench/results/registry-peer-pull.json.
 *
 * For each size (MB), an image of `size / 25` layers of 25 MiB random bytes (uncompressed: random
 * data does not compress, and a peer serves whatever bytes the layers are) is written into a
 * source store (ImageStore, as a node holds it). A child process (bench/registry-peer-serve.ts)
 * serves that store with RegistryServer over TLS requiring a node-CA client certificate, as the
 * agent port does, and also runs the test upstream registry (test/helpers/registry.ts) holding the
 * same blobs in memory. Each round, in rotating order, into an empty store each time:
 * - local copy: every blob of the source store streamed into the new store with
 *   `ImageStore.putBlob` (hashed, written, synced, as a pull writes them), then named;
 * - peer pull: `Puller` with the registry listed under `mirrors` and one peer, the child's
 *   registry, with a node certificate and only the node CA trusted (the agent's peer transport);
 * - upstream pull: `Puller` without peers, from the test upstream registry.
 * Each measure starts after a `sync`. Ratios are medians of per-round ratios of wall time.
 * Nothing here asserts a timing.
 */
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Readable } from 'node:stream';
import { parseArgs } from 'node:util';
import { randomBytes } from 'node:crypto';
import { Transport } from '../src/images/registry/http.js';
import type { PeerSource } from '../src/images/registry/peers.js';
import { Puller } from '../src/images/registry/pull.js';
import { loadRegistries } from '../src/images/registry/registries.js';
import { parseImageRef } from '../src/images/reference.js';
import { ImageStore } from '../src/images/store.js';
import { createCertificateAuthority, issueCertificate } from '../src/security/pki.js';
import { buildTestImage } from '../test/helpers/images.js';
import { benchTempDir, captureOutput, installCleanup, machineInfo, median, printMachine, round, track, writeResult } from './common.js';

const { values: args } = parseArgs({
  options: {
    sizes: { type: 'string', default: '50,500' },
    rounds: { type: 'string', default: '3' },
  },
});
const SIZES = args.sizes.split(',').map(Number);
const ROUNDS = Number(args.rounds);
const LAYER_MIB = 25;
const UPSTREAM = 'registry.bench.invalid';

installCleanup();

type Kind = 'local' | 'peer' | 'upstream';

async function timed(work: () => Promise<unknown>): Promise<number> {
  execFileSync('sync');
  const start = performance.now();
  await work();
  return (performance.now() - start) / 1000;
}

async function benchSize(dir: string, sizeMb: number, tls: { ca: string; cert: string; key: string }): Promise<Record<string, unknown>> {
  const layers = Math.max(1, Math.round(sizeMb / LAYER_MIB));
  const image = buildTestImage({
    name: `${UPSTREAM}/bench/big:${sizeMb}`,
    base: 'empty',
    gzipLayers: false,
    layers: Array.from({ length: layers }, (_, i) => [{ path: `data/layer${i}.bin`, content: randomBytes(LAYER_MIB * 2 ** 20) }]),
  });
  const blobs = [image.configDigest, ...image.layers.map((l) => l.digest)];
  const bytes = image.config.length + image.layers.reduce((s, l) => s + l.blob.length, 0);
  const source = new ImageStore(path.join(dir, `source-${sizeMb}`));
  for (const [digest, blob] of image.blobs) await source.putBlob(digest, Readable.from([blob]));
  await source.addImage(image.ref, image.digest);
  console.log(`# ${sizeMb} MB image: ${layers} layers, ${round(bytes / 2 ** 20, 1)} MiB of blobs`);

  const specFile = path.join(dir, `serve-${sizeMb}.json`);
  const ref = parseImageRef(image.ref);
  fs.writeFileSync(specFile, JSON.stringify({ storeRoot: source.root, repository: ref.path, tag: ref.tag, manifestDigest: image.digest, manifestMediaType: 'application/vnd.oci.image.manifest.v1+json', blobs, tls }));
  const child = track(spawn(process.execPath, ['--import', 'tsx', path.join(import.meta.dirname, 'registry-peer-serve.ts'), specFile], { stdio: ['ignore', 'pipe', 'pipe'] }));
  const output = captureOutput(child);
  const line = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the serving child did not start in 120 s:\n${output()}`)), 120_000);
    const check = (): void => {
      const found = output().split('\n').find((l) => l.startsWith('{"peer"'));
      if (!found) return;
      clearTimeout(timer);
      child.stdout!.off('data', check);
      resolve(found);
    };
    child.stdout!.on('data', check);
    child.once('exit', (code) => reject(new Error(`the serving child exited with ${code}:\n${output()}`)));
  });
  const served = JSON.parse(line) as { peer: string; upstream: string; upstreamCa: string };
  const upstreamHost = new URL(served.upstream).host;
  // The image's registry is rewritten to the test upstream: a mirror entry pointing there, whose key also sends it through peers.
  const registriesFile = path.join(dir, `registries-${sizeMb}.yaml`);
  fs.writeFileSync(registriesFile, `mirrors:\n  "${UPSTREAM}":\n    endpoint: ["${served.upstream}"]\nconfigs:\n  "${upstreamHost}":\n    tls: {ca_file: ${served.upstreamCa}}\n`);
  const registries = loadRegistries(registriesFile);
  const peerTransport = new Transport(() => ({ ...tls, onlyCa: true }));
  const peers: PeerSource = {
    peersFor: () => [{ node: 'bench-peer', url: new URL(`${served.peer}/v2`) }],
    advertisers: () => 1,
    transport: () => peerTransport,
    started: () => undefined,
    finished: () => undefined,
  };

  const runs: Record<Kind, number>[] = [];
  const order: Kind[][] = [
    ['local', 'peer', 'upstream'],
    ['peer', 'upstream', 'local'],
    ['upstream', 'local', 'peer'],
  ];
  for (let r = 0; r < ROUNDS; r++) {
    const times = {} as Record<Kind, number>;
    for (const kind of order[r % order.length]!) {
      const target = new ImageStore(path.join(dir, `target-${sizeMb}-${r}-${kind}`));
      if (kind === 'local') {
        times.local = await timed(async () => {
          for (const digest of [...blobs, image.digest]) await target.putBlob(digest, fs.createReadStream(source.blobFile(digest)));
          await target.addImage(image.ref, image.digest);
        });
      } else {
        const puller = new Puller(target, registries, kind === 'peer' ? { source: peers } : undefined);
        let from = '';
        times[kind] = await timed(async () => {
          const result = await puller.pull({ image: ref });
          from = result.peer ?? result.endpoint;
        });
        puller.close();
        if ((kind === 'peer') !== (from === 'bench-peer')) throw new Error(`${kind} pull came from ${from}`);
      }
      fs.rmSync(target.root, { recursive: true, force: true });
    }
    runs.push(times);
    const mibs = (k: Kind): number => round(bytes / 2 ** 20 / times[k], 1);
    console.log(
      `${sizeMb} MB round ${r + 1}: local copy ${round(times.local, 2)} s (${mibs('local')} MiB/s), peer ${round(times.peer, 2)} s (${mibs('peer')} MiB/s), upstream ${round(times.upstream, 2)} s (${mibs('upstream')} MiB/s)`,
    );
  }
  peerTransport.close();
  child.kill('SIGKILL');
  fs.rmSync(source.root, { recursive: true, force: true });
  const med = (k: Kind): number => median(runs.map((t) => t[k]));
  const peerVsLocal = median(runs.map((t) => t.local / t.peer));
  const peerVsUpstream = median(runs.map((t) => t.upstream / t.peer));
  console.log(`${sizeMb} MB: peer pull = ${round(peerVsLocal, 2)} × the local copy's speed (goal ≥ 0.5), ${round(peerVsUpstream, 2)} × the upstream pull's`);
  return {
    sizeMb,
    layers,
    bytes,
    medianSeconds: { local: round(med('local'), 3), peer: round(med('peer'), 3), upstream: round(med('upstream'), 3) },
    medianMiBps: { local: round(bytes / 2 ** 20 / med('local'), 1), peer: round(bytes / 2 ** 20 / med('peer'), 1), upstream: round(bytes / 2 ** 20 / med('upstream'), 1) },
    peerVsLocal: round(peerVsLocal, 3),
    peerVsUpstream: round(peerVsUpstream, 3),
    goalPeerVsLocal: 0.5,
    rounds: runs,
  };
}

async function main(): Promise<void> {
  const machine = machineInfo();
  printMachine(machine);
  const dir = benchTempDir('drover-bench-registry-peer-');
  const ca = await createCertificateAuthority('drover-bench-node-ca');
  const leaf = await issueCertificate(ca, { commonName: 'system:node:bench-peer', organization: 'system:nodes', subjectAltNames: ['127.0.0.1'], usage: 'peer' });
  const tls = { ca: ca.certificatePem, cert: leaf.certificatePem, key: leaf.privateKeyPem };
  const results = [];
  for (const size of SIZES) results.push(await benchSize(dir, size, tls));
  const file = writeResult('registry-peer-pull', { machine, loadAfter: machineInfo().loadAverage, rounds: ROUNDS, results });
  console.log(`# wrote ${file}`);
}

void main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
