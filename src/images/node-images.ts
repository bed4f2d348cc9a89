import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from '../logging/logger.js';
import { writeFileAtomic } from '../security/files.js';
import { collectImageGarbage, type GcPolicy, type GcReport, IMAGE_GC_INTERVAL_MS } from './gc.js';
import { ImageStore } from './store.js';

/**
 * A node's images while its agent runs: archives dropped into `<data-dir>/agent/images/` are
 * imported at start and whenever one is added or replaced (K3s' air-gap images), and image
 * garbage collection runs every five minutes.
 *
 * A file is imported once it has not changed for `settleMs` (a copy in progress keeps changing
 * its modification time). One that still fails (a copy that stalled, a bad archive) is not
 * tried again until it changes. What was imported from which file (by size and modification
 * time) is kept in the store, so a restart does not import everything again, unless an image it
 * gave was removed since: the directory says which images the node has, as in K3s.
 */

export const IMAGES_DIR = 'images';
const ARCHIVE_SUFFIXES = ['.tar', '.tar.gz', '.tgz'];
const STATE_FILE = 'auto-import.json';

export interface NodeImagesOptions {
  /** `<data-dir>/agent`. */
  agentDir: string;
  logger: Logger;
  gc: GcPolicy;
  /** Default `<agentDir>/pods`. */
  podsDir?: string;
  settleMs?: number;
  /** A rescan of the directory, besides inotify (default 15 s). */
  rescanMs?: number;
  gcIntervalMs?: number;
}

interface ImportedFile {
  size: number;
  mtimeMs: number;
  refs?: string[];
  failed?: string;
  at: string;
}

export function isImageArchiveName(name: string): boolean {
  return !name.startsWith('.') && ARCHIVE_SUFFIXES.some((s) => name.endsWith(s));
}

export class NodeImages {
  readonly store: ImageStore;
  readonly dir: string;
  private readonly podsDir: string;
  private readonly logger: Logger;
  private readonly settleMs: number;
  private readonly stateFile: string;
  private watcher: fs.FSWatcher | undefined;
  private rescanTimer: NodeJS.Timeout | undefined;
  private gcTimer: NodeJS.Timeout | undefined;
  private settleTimer: NodeJS.Timeout | undefined;
  private scanning: Promise<void> = Promise.resolve();
  private stopped = false;
  private readonly ignored = new Set<string>();

  constructor(private readonly options: NodeImagesOptions) {
    this.logger = options.logger.child({ component: 'images' });
    this.store = new ImageStore(path.join(options.agentDir, 'image-store'), { logger: this.logger });
    this.dir = path.join(options.agentDir, IMAGES_DIR);
    this.podsDir = options.podsDir ?? path.join(options.agentDir, 'pods');
    this.settleMs = options.settleMs ?? 2000;
    this.stateFile = path.join(this.store.root, STATE_FILE);
  }

  /** Imports what the directory holds now, then watches it and starts garbage collection. */
  async start(): Promise<void> {
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    await this.scan();
    try {
      this.watcher = fs.watch(this.dir, () => this.scanSoon(200));
      this.watcher.on('error', (error) => this.logger.warn({ err: error, dir: this.dir }, 'watching the images directory failed; rescanning it periodically'));
    } catch (error) {
      this.logger.warn({ err: error, dir: this.dir }, 'cannot watch the images directory; rescanning it periodically');
    }
    this.rescanTimer = setInterval(() => this.scanSoon(0), this.options.rescanMs ?? 15_000);
    this.rescanTimer.unref();
    const gcEvery = this.options.gcIntervalMs ?? IMAGE_GC_INTERVAL_MS;
    this.gcTimer = setInterval(() => void this.collectGarbage().catch(() => undefined), gcEvery);
    this.gcTimer.unref();
    // A first round soon after start, not five minutes later: a node may start nearly full.
    setTimeout(() => void this.collectGarbage().catch(() => undefined), Math.min(gcEvery, 10_000)).unref();
  }

  stop(): void {
    this.stopped = true;
    this.watcher?.close();
    clearInterval(this.rescanTimer);
    clearInterval(this.gcTimer);
    clearTimeout(this.settleTimer);
  }

  /** One round of image garbage collection now (logged; never throws). */
  async collectGarbage(): Promise<GcReport | undefined> {
    if (this.stopped) return undefined;
    try {
      return await collectImageGarbage(this.store, this.podsDir, this.options.gc, this.logger);
    } catch (error) {
      this.logger.warn({ err: error }, 'image garbage collection failed');
      return undefined;
    }
  }

  private scanSoon(delayMs: number): void {
    if (this.stopped) return;
    clearTimeout(this.settleTimer);
    this.settleTimer = setTimeout(() => void this.scan(), delayMs);
    this.settleTimer.unref();
  }

  /** Scans the directory once (scans never overlap). */
  scan(): Promise<void> {
    this.scanning = this.scanning.then(() => this.scanOnce()).catch((error: unknown) => this.logger.warn({ err: error }, 'scanning the images directory failed'));
    return this.scanning;
  }

  private readState(): Record<string, ImportedFile> {
    try {
      return JSON.parse(fs.readFileSync(this.stateFile, 'utf8')) as Record<string, ImportedFile>;
    } catch {
      return {};
    }
  }

  private async scanOnce(): Promise<void> {
    if (this.stopped) return;
    const state = this.readState();
    let names: string[];
    try {
      names = fs.readdirSync(this.dir);
    } catch {
      return;
    }
    let nextCheck = Infinity;
    const present = new Set(this.store.records().map((r) => r.ref));
    for (const name of names.sort()) {
      if (this.stopped) return;
      const file = path.join(this.dir, name);
      let stat: fs.Stats;
      try {
        stat = fs.statSync(file);
      } catch {
        continue;
      }
      if (!stat.isFile()) continue;
      if (!isImageArchiveName(name)) {
        if (!name.startsWith('.') && !this.ignored.has(name)) {
          this.ignored.add(name);
          this.logger.info({ file }, `not imported: image archives must end in ${ARCHIVE_SUFFIXES.join(', ')}`);
        }
        continue;
      }
      const known = state[name];
      if (known && known.size === stat.size && known.mtimeMs === stat.mtimeMs) {
        if (known.failed || (known.refs ?? []).every((ref) => present.has(ref))) continue;
      }
      const quietFor = Date.now() - stat.mtimeMs;
      if (quietFor < this.settleMs) {
        // Still being written, perhaps: look again once it has been quiet long enough.
        nextCheck = Math.min(nextCheck, this.settleMs - quietFor + 50);
        continue;
      }
      await this.importFile(file, name, stat, state);
    }
    for (const name of Object.keys(state)) {
      if (!names.includes(name)) delete state[name];
    }
    if (JSON.stringify(state) !== JSON.stringify(this.readState())) this.writeState(state);
    if (nextCheck !== Infinity) this.scanSoon(nextCheck);
  }

  private async importFile(file: string, name: string, stat: fs.Stats, state: Record<string, ImportedFile>): Promise<void> {
    const started = Date.now();
    try {
      const result = await this.store.importArchive(file);
      // The file may have changed while it was read: then what was read is not what is there.
      const after = fs.statSync(file);
      if (after.size !== stat.size || after.mtimeMs !== stat.mtimeMs) {
        this.logger.info({ file }, 'image archive changed while it was imported; importing it again');
        this.scanSoon(this.settleMs);
        return;
      }
      state[name] = { size: stat.size, mtimeMs: stat.mtimeMs, refs: result.images.map((i) => i.ref), at: new Date().toISOString() };
      this.logger.info(
        { file, format: result.format, images: result.images.map((i) => `${i.ref}${i.ref === i.digest ? '' : ` (${i.digest})`}`), bytes: result.bytes, ms: Date.now() - started },
        'imported image archive',
      );
    } catch (error) {
      state[name] = { size: stat.size, mtimeMs: stat.mtimeMs, failed: (error as Error).message, at: new Date().toISOString() };
      this.logger.warn({ file, err: (error as Error).message }, 'could not import image archive; it is tried again when it changes');
    }
  }

  private writeState(state: Record<string, ImportedFile>): void {
    try {
      writeFileAtomic(this.stateFile, `${JSON.stringify(state, null, 2)}\n`, 0o600);
    } catch (error) {
      this.logger.warn({ err: error }, 'could not record which image archives were imported');
    }
  }
}

/** The agent's one call: start the node's images (import, watch, garbage collection). Never throws. */
export async function startNodeImages(options: NodeImagesOptions): Promise<NodeImages> {
  const images = new NodeImages(options);
  try {
    await images.start();
  } catch (error) {
    options.logger.warn({ err: error }, 'could not start importing images from the images directory');
  }
  return images;
}
