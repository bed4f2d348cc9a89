import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { PassThrough, type Readable, Transform, type TransformCallback } from 'node:stream';
import type { Logger } from '../logging/logger.js';
import { type LayerInfo, unpackLayer } from './layers.js';

/**
 * Unpacking an archive's layers while the import writes them into the store: the archive is read
 * and each layer gunzipped once, not read back from the store and gunzipped again afterwards.
 *
 * While a blob streams into the store, a tee hands the same bytes to an unpack into a work dir
 * under tmp/ when its first bytes look like a layer (gzip, or a plain tar). The import does not
 * know yet which config names the blob, so the unpack learns the diff id (the sha256 of what it
 * unpacked) rather than checking one. Once the import has verified and named everything, a work
 * dir is published (renamed to layers/<diff id>) only when the blob's digest verified and a
 * config of the imported images names that very diff id for that blob: a blob that did not match
 * its name, or a layer whose content is not what its config says, never becomes a usable layer.
 * Everything else is removed. An unpack that fails (not a tar, a path climbing out) is dropped
 * quietly: the layer is then unpacked from the store when first used, which reports the error.
 */

export interface EarlyLayer {
  info: LayerInfo;
  workDir: string;
}

type Compression = 'gzip' | 'none';

/** What the first bytes of a blob say it is, when it looks like a layer. */
function sniff(chunk: Buffer): Compression | undefined {
  if (chunk.length >= 2 && chunk[0] === 0x1f && chunk[1] === 0x8b) return 'gzip';
  if (chunk.length >= 263 && chunk.toString('latin1', 257, 262) === 'ustar') return 'none';
  return undefined;
}

/** A pass-through that also feeds an unpack, keeping to the slower of the two (backpressure). */
class LayerTee extends Transform {
  readonly result: Promise<EarlyLayer | undefined>;
  private settle!: (layer: EarlyLayer | undefined) => void;
  private side: PassThrough | undefined;
  private decided = false;
  private flushed = false;
  private waiting: (() => void) | undefined;

  constructor(private readonly start: (input: Readable, compression: Compression) => Promise<EarlyLayer | undefined>) {
    super();
    this.result = new Promise((resolve) => {
      this.settle = resolve;
    });
  }

  private decide(chunk: Buffer | undefined): void {
    if (this.decided) return;
    this.decided = true;
    const compression = chunk ? sniff(chunk) : undefined;
    if (!compression) {
      this.settle(undefined);
      return;
    }
    const side = new PassThrough({ highWaterMark: 1024 * 1024 });
    this.side = side;
    const release = (): void => {
      const waiting = this.waiting;
      this.waiting = undefined;
      waiting?.();
    };
    side.on('drain', release);
    // The unpack gave up (its pipeline destroys the side stream): the blob goes on alone.
    side.on('close', () => {
      this.side = undefined;
      release();
    });
    this.start(side, compression).then(this.settle, () => this.settle(undefined));
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.decide(chunk);
    const side = this.side;
    if (side && !side.destroyed && !side.write(chunk)) {
      this.waiting = () => callback(null, chunk);
      return;
    }
    callback(null, chunk);
  }

  override _flush(callback: TransformCallback): void {
    this.flushed = true;
    this.decide(undefined);
    this.side?.end();
    callback();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.decide(undefined);
    // Destroyed before the end (the blob's stream failed): the unpack must not finish as if whole.
    if (!this.flushed) this.side?.destroy(error ?? new Error('the blob stream was aborted'));
    callback(error);
  }
}

export interface EarlyUnpackOptions {
  tmpDir: string;
  overlayMarks: boolean;
  logger?: Logger | undefined;
}

/** The unpacks started during one import. */
export class EarlyUnpacks {
  private readonly started: { tee: LayerTee; digest?: string }[] = [];

  constructor(private readonly options: EarlyUnpackOptions) {}

  /** A tee for a blob being staged; `done` binds it to the blob's digest once that verified. */
  tee(): { stream: Transform; done: (digest: string) => void } {
    const entry: { tee: LayerTee; digest?: string } = { tee: new LayerTee((input, compression) => this.unpack(input, compression)) };
    this.started.push(entry);
    return {
      stream: entry.tee,
      done: (digest) => {
        entry.digest = digest;
      },
    };
  }

  private async unpack(input: Readable, compression: Compression): Promise<EarlyLayer | undefined> {
    fs.mkdirSync(this.options.tmpDir, { recursive: true, mode: 0o700 });
    const workDir = path.join(this.options.tmpDir, `layer-${process.pid}-${randomBytes(6).toString('hex')}`);
    fs.mkdirSync(workDir, { mode: 0o700 });
    try {
      const info = await unpackLayer({ source: input, compression, diffId: undefined, blob: 'being imported', workDir, overlayMarks: this.options.overlayMarks, logger: this.options.logger });
      return { info, workDir };
    } catch (error) {
      input.destroy();
      fs.rmSync(workDir, { recursive: true, force: true });
      this.options.logger?.debug({ error: (error as Error).message }, 'archive member not unpacked during import; it is unpacked from the store when used');
      return undefined;
    }
  }

  /**
   * Waits for every unpack; `wanted` maps a verified blob digest to the diff ids configs name for
   * it (empty when the import failed). `publish` moves a work dir into place; what is not
   * published is removed.
   */
  async finish(wanted: ReadonlyMap<string, ReadonlySet<string>>, publish: (digest: string, layer: EarlyLayer) => void): Promise<void> {
    for (const { tee, digest } of this.started) {
      const layer = await tee.result;
      if (!layer) continue;
      try {
        if (digest !== undefined && wanted.get(digest)?.has(layer.info.diffId)) publish(digest, layer);
      } finally {
        fs.rmSync(layer.workDir, { recursive: true, force: true });
      }
    }
  }
}
