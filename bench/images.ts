/**
 * Image import and unpack benchmark: how fast Drover gets an image archive into its store and its
 * layers unpacked, against GNU `tar -x` unpacking the same layers, in the same run
 * (goal: Drover ≥ 0.7 × tar).
 *
 *   node --import tsx bench/images.ts [--layers 4] [--mib 64] [--rounds 5]
 *
 * Writes bench/results/images.json.
 *
 * The image is built here (test/helpers/images.ts): the busybox base layer and `--layers` more,
 * `--mib` MiB uncompressed in all, each layer a mix of large files (half random bytes, half
 * base64 text, so it compresses about as a real layer's binaries do) and a thousand small text
 * files; layers gzipped, as registries serve them; written as an OCI image-layout archive.
 * Each round, in alternating order:
 * - drover import+unpack: `ImageStore.importArchive` of the archive into an empty store (every
 *   blob hashed, staged and synced together at the end; every layer gunzipped, parsed by the
 *   tar package, written by LayerWriter and hashed as it streams in, published once its diff
 *   id matches its config),
 *   `resolve`, then `layerDirs` (which finds the layers unpacked);
 * - drover unpack: `layerDirs` alone, from a store that already holds the blobs (written one by
 *   one as a pull writes them, so nothing is unpacked yet);
 * - tar -x: `tar -xzf <layer> -C <dir>` for each layer blob, one after another (GNU tar, with
 *   gzip in a second process): the same gzipped layers Drover unpacks, no digest checked, nothing
 *   synced. The goal's baseline, and like for like with "drover unpack" (which checks the blob's
 *   digest and the diff id, and syncs nothing either: an unpacked layer is derived data).
 * - tar import: what an import does, with tar: `tar -xf <archive>` (every blob written to disk,
 *   as the import writes them into the store), then `tar -xzf` of each layer blob so written;
 *   and the same with the blobs synced (`sync <blob files>`, fsync each) before the layers are
 *   unpacked, as the import syncs its blobs before naming them. The import's fsync is for power
 *   loss, not for a kill -9 (a killed process loses nothing the kernel has; the import's
 *   crash safety against kill -9 comes from naming only complete, verified files by rename);
 *   tar checks no digest in either.
 * Each measure starts after a `sync`, so none pays for the writeback of the one before, and
 * nothing is deleted until the end: every measure unpacks into a directory of its own. On ext4
 * without a journal (this machine's root file system) a new inode is not given an inode number
 * freed in the last 30 s (`recently_deleted` in the kernel's allocator), so creating files right
 * after deleting thousands scans past every one of them: in an earlier version of this script
 * the Drover measures came right after the removal of the previous round's trees and tar's did
 * not; `perf record` of an unpack at that time put about a quarter of all samples in the kernel's
 * `recently_deleted`.
 * Throughput is uncompressed layer bytes per second; the ratios are medians of per-round ratios,
 * by wall time and by CPU time (Drover: this process, all its threads; tar: its and gzip's, from
 * /proc/self/stat), the latter less disturbed by other jobs on a shared machine. Nothing here
 * asserts a timing.
 */
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { Readable } from 'node:stream';
import { parseArgs } from 'node:util';
import { randomBytes } from 'node:crypto';
import { ImageStore } from '../src/images/store.js';
import { buildTestImage, type LayerEntry, writeOciArchive } from '../test/helpers/images.js';
import { benchTempDir, installCleanup, machineInfo, median, printMachine, round, writeResult } from './common.js';

const { values: args } = parseArgs({
  options: {
    layers: { type: 'string', default: '4' },
    mib: { type: 'string', default: '64' },
    rounds: { type: 'string', default: '5' },
  },
});
const LAYERS = Number(args.layers);
const MIB = Number(args.mib);
const ROUNDS = Number(args.rounds);

installCleanup();

function layerEntries(index: number, bytes: number): LayerEntry[] {
  const entries: LayerEntry[] = [];
  const smallCount = 1000;
  const smallSize = 4096;
  for (let i = 0; i < smallCount; i++) {
    entries.push({ path: `data${index}/small/${Math.floor(i / 100)}/f${i}.txt`, content: randomBytes(smallSize * 0.75).toString('base64') });
  }
  let left = bytes - smallCount * smallSize;
  for (let i = 0; left > 0; i++) {
    const size = Math.min(left, 4 * 1024 * 1024);
    const half = Math.floor(size / 2);
    const content = Buffer.concat([randomBytes(half), Buffer.from(randomBytes(Math.ceil(((size - half) * 3) / 4)).toString('base64')).subarray(0, size - half)]);
    entries.push({ path: `data${index}/large/blob${i}.bin`, content, mode: 0o755 });
    left -= size;
  }
  return entries;
}

function run(file: string, argv: string[]): Promise<void> {
  return new Promise((resolve, reject) => execFile(file, argv, (error, _out, stderr) => (error ? reject(new Error(`${file}: ${stderr || error.message}`)) : resolve())));
}

/** CPU seconds of the children this process has waited for (tar and gzip), from /proc/self/stat. */
function childCpuSeconds(): number {
  const fields = fs.readFileSync('/proc/self/stat', 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[13]) + Number(fields[14])) / 100; // cutime + cstime, in clock ticks (USER_HZ 100)
}

interface Timed {
  wallS: number;
  cpuS: number;
}

/** Wall time, and CPU time: this process's (all its threads) for Drover, its children's for tar. */
async function timed(work: () => Promise<unknown>, children = false): Promise<Timed> {
  // Each measure starts with no dirty pages from the one before (whose writeback would be billed to it).
  execFileSync('sync');
  const start = performance.now();
  const cpu0 = process.cpuUsage();
  const child0 = childCpuSeconds();
  await work();
  const cpu = process.cpuUsage(cpu0);
  return { wallS: (performance.now() - start) / 1000, cpuS: children ? childCpuSeconds() - child0 : (cpu.user + cpu.system) / 1e6 };
}

async function main(): Promise<void> {
  const machine = machineInfo();
  printMachine(machine);
  const dir = benchTempDir('drover-bench-images-');
  const perLayer = Math.floor((MIB * 1024 * 1024) / LAYERS);
  const layers = Array.from({ length: LAYERS }, (_, i) => layerEntries(i, perLayer));
  const image = buildTestImage({ name: 'bench.test/big:1', layers });
  const archive = path.join(dir, 'big.tar');
  writeOciArchive(image, archive);
  const layerBytes = image.layers.reduce((sum, l) => sum + l.tar.length, 0);
  const blobBytes = image.layers.reduce((sum, l) => sum + l.blob.length, 0);
  const files = layers.reduce((sum, l) => sum + l.length, 0);
  console.log(
    `# image: ${image.layers.length} layers, ${round(layerBytes / 2 ** 20, 1)} MiB uncompressed, ${round(blobBytes / 2 ** 20, 1)} MiB gzipped, ${files} files besides the base layer; archive ${round(fs.statSync(archive).size / 2 ** 20, 1)} MiB`,
  );
  const blobsDir = path.join(dir, 'blobs');
  fs.mkdirSync(blobsDir);
  const blobFiles = image.layers.map((l, i) => {
    const file = path.join(blobsDir, `layer${i}.tar.gz`);
    fs.writeFileSync(file, l.blob);
    return file;
  });
  type Key = 'importUnpack' | 'unpack' | 'tar' | 'tarImport' | 'tarImportSynced';
  const rounds: Record<Key, Timed>[] = [];
  for (let r = 0; r < ROUNDS + 1; r++) {
    const kinds = r % 2 === 0 ? (['drover', 'tar'] as const) : (['tar', 'drover'] as const);
    const none: Timed = { wallS: 0, cpuS: 0 };
    const times: Record<Key, Timed> = { importUnpack: none, unpack: none, tar: none, tarImport: none, tarImportSynced: none };
    for (const kind of kinds) {
      if (kind === 'drover') {
        const store = new ImageStore(path.join(benchTempDir('drover-bench-store-'), 'image-store'));
        times.importUnpack = await timed(async () => {
          await store.importArchive(archive);
          await store.layerDirs(await store.resolve(image.ref));
        });
        // A store that holds the blobs already (written untimed, as a pull writes them: an
        // import would unpack the layers too), for the unpack-only measure.
        const warm = new ImageStore(path.join(benchTempDir('drover-bench-warm-'), 'image-store'));
        for (const [digest, blob] of image.blobs) await warm.putBlob(digest, Readable.from([blob]));
        await warm.addImage(image.ref, image.digest);
        const warmImage = await warm.resolve(image.ref);
        times.unpack = await timed(() => warm.layerDirs(warmImage));
      } else {
        const out = benchTempDir('drover-bench-tar-');
        times.tar = await timed(async () => {
          for (const [i, file] of blobFiles.entries()) {
            const target = path.join(out, `layer${i}`);
            fs.mkdirSync(target);
            await run('tar', ['-xzf', file, '-C', target]);
          }
        }, true);
        for (const synced of [false, true]) {
          const into = benchTempDir('drover-bench-tar-import-');
          times[synced ? 'tarImportSynced' : 'tarImport'] = await timed(async () => {
            const layout = path.join(into, 'archive');
            fs.mkdirSync(layout);
            await run('tar', ['-xf', archive, '-C', layout]);
            const blobs = image.layers.map((l) => path.join(layout, 'blobs', 'sha256', l.digest.slice('sha256:'.length)));
            if (synced) await run('sync', blobs);
            for (const [i, file] of blobs.entries()) {
              const target = path.join(into, `layer${i}`);
              fs.mkdirSync(target);
              await run('tar', ['-xzf', file, '-C', target]);
            }
          }, true);
        }
      }
    }
    // The first round warms caches and the JIT; it is not counted.
    if (r === 0) continue;
    rounds.push(times);
    const mibps = (t: Timed): string => `${round(layerBytes / 2 ** 20 / t.wallS, 1)} MiB/s, cpu ${round(t.cpuS, 2)} s`;
    console.log(
      `round ${r}: drover import+unpack ${round(times.importUnpack.wallS, 2)} s (${mibps(times.importUnpack)}), drover unpack ${round(times.unpack.wallS, 2)} s (${mibps(times.unpack)}), tar -x ${round(times.tar.wallS, 2)} s (${mibps(times.tar)}), ` +
        `tar import ${round(times.tarImport.wallS, 2)} s (${mibps(times.tarImport)}), synced ${round(times.tarImportSynced.wallS, 2)} s (${mibps(times.tarImportSynced)})`,
    );
  }
  const throughput = (key: Key): number => round(layerBytes / 2 ** 20 / median(rounds.map((t) => t[key].wallS)), 1);
  const cpuPerGiB = (key: Key): number => round(median(rounds.map((t) => t[key].cpuS)) / (layerBytes / 2 ** 30), 2);
  const ratio = (key: Key, measure: keyof Timed, base: Key = 'tar'): number => round(median(rounds.map((t) => t[base][measure] / t[key][measure])), 2);
  const ratios = {
    importUnpackVsTar: ratio('importUnpack', 'wallS'),
    unpackVsTar: ratio('unpack', 'wallS'),
    importUnpackVsTarByCpu: ratio('importUnpack', 'cpuS'),
    unpackVsTarByCpu: ratio('unpack', 'cpuS'),
    importUnpackVsTarImport: ratio('importUnpack', 'wallS', 'tarImport'),
    importUnpackVsTarImportSynced: ratio('importUnpack', 'wallS', 'tarImportSynced'),
    importUnpackVsTarImportSyncedByCpu: ratio('importUnpack', 'cpuS', 'tarImportSynced'),
    goal: 0.7,
  };
  console.log(
    `\nmedian: drover import+unpack ${throughput('importUnpack')} MiB/s, drover unpack ${throughput('unpack')} MiB/s, tar -x ${throughput('tar')} MiB/s` +
      `\nCPU seconds per GiB: drover import+unpack ${cpuPerGiB('importUnpack')}, drover unpack ${cpuPerGiB('unpack')}, tar -x ${cpuPerGiB('tar')}` +
      `\nratio drover/tar by throughput: import+unpack ${ratios.importUnpackVsTar}x, unpack alone ${ratios.unpackVsTar}x (goal >= 0.7x)` +
      `\nratio drover/tar by CPU time: import+unpack ${ratios.importUnpackVsTarByCpu}x, unpack alone ${ratios.unpackVsTarByCpu}x` +
      `\nlike for like, import+unpack vs tar -xf archive + tar -xzf layers: ${ratios.importUnpackVsTarImport}x unsynced, ${ratios.importUnpackVsTarImportSynced}x with tar's blobs fsynced (by CPU ${ratios.importUnpackVsTarImportSyncedByCpu}x)` +
      `\ntar import ${throughput('tarImport')} MiB/s, synced ${throughput('tarImportSynced')} MiB/s`,
  );
  const file = writeResult('images', {
    machine,
    loadAverageAtEnd: machineInfo().loadAverage,
    options: { layers: LAYERS, mib: MIB, rounds: ROUNDS },
    image: { layers: image.layers.length, uncompressedBytes: layerBytes, gzippedBytes: blobBytes, archiveBytes: fs.statSync(archive).size, files },
    throughputMiBps: {
      droverImportUnpack: throughput('importUnpack'),
      droverUnpack: throughput('unpack'),
      tar: throughput('tar'),
      tarImport: throughput('tarImport'),
      tarImportSynced: throughput('tarImportSynced'),
    },
    cpuSecondsPerGiB: {
      droverImportUnpack: cpuPerGiB('importUnpack'),
      droverUnpack: cpuPerGiB('unpack'),
      tar: cpuPerGiB('tar'),
      tarImport: cpuPerGiB('tarImport'),
      tarImportSynced: cpuPerGiB('tarImportSynced'),
    },
    ratio: ratios,
    rounds: rounds.map((t) => ({
      importUnpack: { wallS: round(t.importUnpack.wallS, 3), cpuS: round(t.importUnpack.cpuS, 3) },
      unpack: { wallS: round(t.unpack.wallS, 3), cpuS: round(t.unpack.cpuS, 3) },
      tar: { wallS: round(t.tar.wallS, 3), cpuS: round(t.tar.cpuS, 3) },
      tarImport: { wallS: round(t.tarImport.wallS, 3), cpuS: round(t.tarImport.cpuS, 3) },
      tarImportSynced: { wallS: round(t.tarImportSynced.wallS, 3), cpuS: round(t.tarImportSynced.cpuS, 3) },
    })),
  });
  console.log(`# wrote ${file}`);
}

await main();
