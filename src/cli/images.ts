import fs from 'node:fs';
import path from 'node:path';
import type { Command } from 'commander';
import { defaultOf } from '../config/schema.js';
import { imagesInUse, podsUsing } from '../images/gc.js';
import { IMAGES_DIR } from '../images/node-images.js';
import { isSha256Digest, parseImageRef } from '../images/reference.js';
import { type ImageRecord, ImageStore } from '../images/store.js';
import { EXIT_FAILURE } from './run.js';

/**
 * `drover image import|ls|rm|prune`: this node's image store, read and changed directly in the
 * data dir (as `crictl` does with the node's containerd, not through the API server). Safe while
 * the agent runs: the store is shared by renames of complete files, and an image a pod on this
 * node uses is never removed.
 */

interface StoreOptions {
  dataDir: string;
}

class UsageError extends Error {
  override name = 'UsageError';
}

/** The store of an existing data dir (`import` may make one: images can be imported before a node first starts). */
function storeOf(opts: StoreOptions, create = false): ImageStore {
  const dataDir = path.resolve(opts.dataDir);
  if (!create && !fs.existsSync(dataDir)) throw new UsageError(`no data dir at ${dataDir}; has a server or agent run with --data-dir ${opts.dataDir}?`);
  return ImageStore.forDataDir(dataDir);
}

function podsDirOf(opts: StoreOptions): string {
  return path.join(path.resolve(opts.dataDir), 'agent', 'pods');
}

async function run(command: string, action: () => Promise<void>): Promise<void> {
  try {
    await action();
  } catch (error) {
    process.stderr.write(`drover image ${command}: ${(error as Error).message}\n`);
    process.exit(EXIT_FAILURE);
  }
}

function shortId(digest: string): string {
  return digest.slice('sha256:'.length, 'sha256:'.length + 12);
}

function humanSize(bytes: number): string {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(value < 10 ? 2 : 1)}${units[unit]}`;
}

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]! + 3))).join('').trimEnd()).join('\n') + '\n';
}

/** The records a user's argument names: a reference, a digest, or an image id (or its first 4+ hex characters). */
async function matching(store: ImageStore, arg: string): Promise<ImageRecord[]> {
  const records = store.records();
  const id = /^(?:sha256:)?([a-f0-9]{4,64})$/.exec(arg)?.[1];
  if (id) {
    const found: ImageRecord[] = [];
    for (const record of records) {
      const image = await store.imageAt(record.digest, record.ref).catch(() => undefined);
      const ids = [record.digest, image?.id, image?.manifestDigest].filter((d): d is string => d !== undefined);
      if (ids.some((d) => d.slice('sha256:'.length).startsWith(id))) found.push(record);
    }
    if (found.length) return found;
  }
  let ref: string;
  try {
    ref = parseImageRef(arg).ref;
  } catch (error) {
    if (id) return [];
    throw new UsageError((error as Error).message);
  }
  return records.filter((r) => r.ref === ref);
}

async function importCommand(archives: string[], opts: StoreOptions & { name?: string }): Promise<void> {
  const store = storeOf(opts, true);
  if (opts.name !== undefined) parseImageRef(opts.name);
  for (const archive of archives) {
    const result = await store.importArchive(path.resolve(archive), opts.name !== undefined ? { name: opts.name } : {});
    for (const image of result.images) {
      process.stdout.write(`imported ${image.ref === image.digest ? '<none>' : image.ref} (${image.digest}) from ${archive}\n`);
    }
  }
}

async function lsCommand(opts: StoreOptions & { json?: boolean; digests?: boolean }): Promise<void> {
  const store = storeOf(opts);
  const uses = imagesInUse(podsDirOf(opts));
  const rows = [];
  for (const record of store.records()) {
    const image = await store.imageAt(record.digest, record.ref).catch((error: unknown) => error as Error);
    const pods = await podsUsing(store, record, uses);
    rows.push({ record, image, pods });
  }
  if (opts.json) {
    const out = rows.map(({ record, image, pods }) => ({
      ...record,
      ...(image instanceof Error ? { error: image.message } : { id: image.id, manifestDigest: image.manifestDigest, size: image.size }),
      pods,
    }));
    process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
    return;
  }
  const header = ['IMAGE', 'TAG', ...(opts.digests ? ['DIGEST'] : []), 'IMAGE ID', 'SIZE', 'PODS'];
  const lines = rows.map(({ record, image, pods }) => {
    const named = !isSha256Digest(record.ref);
    const parsed = named ? parseImageRef(record.ref) : undefined;
    return [
      parsed?.name ?? '<none>',
      parsed?.tag ?? '<none>',
      ...(opts.digests ? [record.digest] : []),
      image instanceof Error ? `(${image.message})` : shortId(image.id),
      image instanceof Error ? '-' : humanSize(image.size),
      String(pods.length),
    ];
  });
  process.stdout.write(lines.length ? table([header, ...lines]) : `no images in ${store.root}\n`);
}

async function rmCommand(refs: string[], opts: StoreOptions): Promise<void> {
  const store = storeOf(opts);
  const uses = imagesInUse(podsDirOf(opts));
  const problems: string[] = [];
  let removed = 0;
  for (const arg of refs) {
    const records = await matching(store, arg);
    if (!records.length) {
      problems.push(`no image ${arg} in ${store.root}`);
      continue;
    }
    for (const record of records) {
      const pods = await podsUsing(store, record, uses);
      if (pods.length) {
        problems.push(`image ${record.ref} is used by pod${pods.length > 1 ? 's' : ''} ${pods.join(', ')} on this node; delete ${pods.length > 1 ? 'them' : 'it'} first`);
        continue;
      }
      store.removeImage(record.ref);
      removed++;
      process.stdout.write(`removed ${isSha256Digest(record.ref) ? `<none> (${record.digest})` : record.ref}\n`);
    }
  }
  if (removed) {
    const swept = await store.sweep([...uses.keys()], 0);
    process.stdout.write(`freed ${humanSize(swept.bytes)} (${swept.blobs} blobs, ${swept.layers} unpacked layers)\n`);
  }
  if (problems.length) throw new Error(problems.join('\n'));
}

async function pruneCommand(opts: StoreOptions): Promise<void> {
  const store = storeOf(opts);
  const uses = imagesInUse(podsDirOf(opts));
  for (const record of store.records()) {
    if ((await podsUsing(store, record, uses)).length) continue;
    store.removeImage(record.ref);
    process.stdout.write(`removed ${isSha256Digest(record.ref) ? `<none> (${record.digest})` : record.ref}\n`);
  }
  // No grace period: imports and pulls in progress hold leases on what they have not named yet.
  const swept = await store.sweep([...uses.keys()], 0);
  process.stdout.write(`freed ${humanSize(swept.bytes)} (${swept.blobs} blobs, ${swept.layers} unpacked layers)\n`);
}

export function addImageCommands(program: Command): void {
  const dataDirHelp = 'the node’s data dir (its store is <data-dir>/agent/image-store)';
  const image = program
    .command('image')
    .description(`This node's container images (its image store; archives in <data-dir>/agent/${IMAGES_DIR}/ are imported by the agent)`);
  image
    .command('import')
    .description('Import OCI image-layout or docker save archives (tar, gzip or not) into this node\'s image store')
    .argument('<archive...>', 'archive files')
    .option('--name <ref>', 'name for images the archive leaves unnamed, or names by tag only')
    .option('--data-dir <dir>', dataDirHelp, defaultOf('data-dir'))
    .action((archives: string[], opts: StoreOptions & { name?: string }) => run('import', () => importCommand(archives, opts)));
  image
    .command('ls')
    .alias('list')
    .description('List the images in this node\'s store, with the number of pods on this node using each')
    .option('--digests', 'show the digest each name points at')
    .option('--json', 'machine-readable output')
    .option('--data-dir <dir>', dataDirHelp, defaultOf('data-dir'))
    .action((opts: StoreOptions & { json?: boolean; digests?: boolean }) => run('ls', () => lsCommand(opts)));
  image
    .command('rm')
    .alias('rmi')
    .description('Remove images by name, digest or image id (refused for an image a pod on this node uses), then their content no other image shares')
    .argument('<image...>', 'names (busybox:1.36), digests or image ids (or their first characters)')
    .option('--data-dir <dir>', dataDirHelp, defaultOf('data-dir'))
    .action((refs: string[], opts: StoreOptions) => run('rm', () => rmCommand(refs, opts)));
  image
    .command('prune')
    .description('Remove every image no pod on this node uses, and any content no image holds')
    .option('--data-dir <dir>', dataDirHelp, defaultOf('data-dir'))
    .action((opts: StoreOptions) => run('prune', () => pruneCommand(opts)));
}
