import fs from 'node:fs';
import path from 'node:path';
import type { ReadEntry } from 'tar';

/**
 * Writes the entries of a layer's tar (parsed by the tar package's Parser) into a directory, on
 * this thread, one system call after another: per file `open(O_CREAT|O_EXCL)`, its writes,
 * `fchown` when the owner is not ours, `fchmod` only when the umask or the chown changed the
 * mode, `futimes`, `close` - what GNU tar does. The tar package's own UnpackSync adds a
 * recursive `mkdir` of the parent and an `lstat` of the path (thrown as an exception when it is
 * absent, the common case) to every file, and its per-entry bookkeeping (path reservations,
 * events); for a layer of thousands of small files that was a third of the unpack's time.
 *
 * Safety rests on what the caller guarantees and on O_EXCL: paths are clean and relative (no
 * `..`, no root: layers.ts filters them) and no symlink exists in the directory while entries
 * are written (symlinks are made afterwards), so no write can leave the directory; O_EXCL never
 * opens an existing path (a later entry for the same path removes the earlier one first).
 * Directories get their times at the end, as GNU tar sets them, so files written into them
 * afterwards do not change them.
 */

export interface WriterReport {
  /** Entries not written (devices, FIFOs: not part of a container's image). */
  skipped: string[];
  /** Entries that could not be written: the layer is not usable. */
  problems: string[];
}

/** The process umask, read without changing it (process.umask() with no argument is deprecated). */
function currentUmask(): number | undefined {
  try {
    const match = /^Umask:\s*([0-7]+)$/m.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    return match ? parseInt(match[1]!, 8) : undefined;
  } catch {
    return undefined;
  }
}

const FILE_FLAGS = fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW;

function errorCode(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException).code;
}

export class LayerWriter {
  /** Directories (relative) known to exist. */
  private readonly made = new Set<string>(['']);
  private readonly dirTimes = new Map<string, { atime: Date; mtime: Date }>();
  private readonly uid = process.getuid?.() ?? -1;
  private readonly gid = process.getgid?.() ?? -1;
  private readonly root = this.uid === 0;
  /** Bits the umask takes from a mode open() or mkdir() is given (all, when unknown: then every mode is set explicitly). */
  private readonly umask = currentUmask() ?? 0o7777;

  constructor(
    private readonly dir: string,
    private readonly report: WriterReport,
  ) {}

  /** An entry whose path (`clean`, relative, '' for the root) the caller checked; consumes its data. */
  write(entry: ReadEntry, clean: string, linkTarget: string | undefined): void {
    try {
      switch (entry.type) {
        case 'File':
        case 'OldFile':
        case 'ContiguousFile':
          this.file(entry, clean);
          return;
        case 'Directory':
        case 'GNUDumpDir':
          this.directory(entry, clean);
          break;
        case 'Link':
          this.hardLink(clean, linkTarget ?? '');
          break;
        default:
          this.report.skipped.push(`${entry.path}: unsupported entry type: ${entry.type}`);
      }
    } catch (error) {
      this.report.problems.push(`${entry.path}: ${(error as Error).message}`);
    }
    entry.resume();
  }

  /** Sets the directories' times (after their contents were written). */
  finish(): void {
    for (const [rel, times] of this.dirTimes) {
      try {
        fs.utimesSync(path.join(this.dir, rel), times.atime, times.mtime);
      } catch (error) {
        this.report.problems.push(`${rel || '.'}: ${(error as Error).message}`);
      }
    }
  }

  /** The parent directories of `rel` made (0755, as tar makes the ones a layer does not list). */
  private parents(rel: string): void {
    const parent = path.posix.dirname(rel);
    if (parent === '.' || this.made.has(parent)) return;
    fs.mkdirSync(path.join(this.dir, parent), { recursive: true, mode: 0o755 });
    for (let p = parent; p !== '.' && !this.made.has(p); p = path.posix.dirname(p)) this.made.add(p);
  }

  /** `rel` removed if it exists and is not a directory (a later entry for the same path wins). */
  private clear(rel: string): void {
    const file = path.join(this.dir, rel);
    const stat = fs.lstatSync(file, { throwIfNoEntry: false });
    if (!stat) return;
    if (stat.isDirectory()) fs.rmdirSync(file);
    else fs.unlinkSync(file);
  }

  private owner(entry: ReadEntry): { uid: number; gid: number } | undefined {
    if (!this.root) return undefined;
    const uid = typeof entry.uid === 'number' ? entry.uid : this.uid;
    const gid = typeof entry.gid === 'number' ? entry.gid : this.gid;
    return uid === this.uid && gid === this.gid ? undefined : { uid, gid };
  }

  private file(entry: ReadEntry, rel: string): void {
    const file = path.join(this.dir, rel);
    const mode = typeof entry.mode === 'number' ? entry.mode & 0o7777 : 0o644;
    let fd: number;
    try {
      this.parents(rel);
      try {
        fd = fs.openSync(file, FILE_FLAGS, mode);
      } catch (error) {
        if (errorCode(error) !== 'EEXIST' && errorCode(error) !== 'ELOOP') throw error;
        this.clear(rel);
        fd = fs.openSync(file, FILE_FLAGS, mode);
      }
    } catch (error) {
      this.report.problems.push(`${entry.path}: ${(error as Error).message}`);
      entry.resume();
      return;
    }
    let failed: Error | undefined;
    entry.on('data', (chunk: Buffer) => {
      if (failed) return;
      try {
        for (let off = 0; off < chunk.length; ) off += fs.writeSync(fd, chunk, off, chunk.length - off);
      } catch (error) {
        failed = error as Error;
      }
    });
    entry.on('end', () => {
      try {
        if (!failed) {
          const owner = this.owner(entry);
          if (owner) fs.fchownSync(fd, owner.uid, owner.gid);
          // chown drops set-id bits; the umask drops what it masks: then the mode is set again.
          if ((owner && mode & 0o6000) || mode & this.umask) fs.fchmodSync(fd, mode);
          if (entry.mtime) fs.futimesSync(fd, entry.atime ?? new Date(), entry.mtime);
        }
      } catch (error) {
        failed = error as Error;
      } finally {
        fs.closeSync(fd);
      }
      if (failed) this.report.problems.push(`${entry.path}: ${failed.message}`);
    });
  }

  private directory(entry: ReadEntry, rel: string): void {
    const dir = path.join(this.dir, rel);
    const mode = typeof entry.mode === 'number' ? entry.mode & 0o7777 : 0o755;
    if (rel !== '') {
      this.parents(rel);
      let created = false;
      try {
        fs.mkdirSync(dir, { mode });
        created = true;
      } catch (error) {
        if (errorCode(error) !== 'EEXIST') throw error;
        if (!fs.lstatSync(dir).isDirectory()) {
          fs.unlinkSync(dir);
          fs.mkdirSync(dir, { mode });
          created = true;
        }
      }
      this.made.add(rel);
      if (!created || mode & this.umask) fs.chmodSync(dir, mode);
    } else {
      fs.chmodSync(dir, mode);
    }
    const owner = this.owner(entry);
    if (owner) {
      fs.chownSync(dir, owner.uid, owner.gid);
      if (mode & 0o6000) fs.chmodSync(dir, mode);
    }
    if (entry.mtime) this.dirTimes.set(rel, { atime: entry.atime ?? new Date(), mtime: entry.mtime });
  }

  private hardLink(rel: string, target: string): void {
    const file = path.join(this.dir, rel);
    this.parents(rel);
    try {
      fs.linkSync(path.join(this.dir, target), file);
    } catch (error) {
      if (errorCode(error) !== 'EEXIST') throw error;
      this.clear(rel);
      fs.linkSync(path.join(this.dir, target), file);
    }
  }
}
