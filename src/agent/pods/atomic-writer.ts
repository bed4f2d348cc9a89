import fs from 'node:fs';
import path from 'node:path';

/**
 * Writes a set of files into a volume directory so that a reader never sees half of a change, the
 * way kubelet's atomic writer does for ConfigMap and Secret volumes. The files live in a
 * timestamped directory; `..data` is a symlink to the current one, and each visible top-level
 * name is a symlink through `..data`:
 *
 *     <volume>/..2026_01_02_03_04_05.1a2b3c4d/   the files of this version (subdirectories too)
 *     <volume>/..data -> ..2026_01_02_03_04_05.1a2b3c4d
 *     <volume>/app.conf -> ..data/app.conf
 *
 * An update writes a new timestamped directory, then swaps `..data` by renaming a new symlink
 * over it (one atomic step), then fixes the top-level links and removes the old directory. A
 * reader that opens `<volume>/app.conf` gets the old file or the new one, and one that lists the
 * volume through `..data` sees one whole version.
 */

export interface FileProjection {
  data: Buffer;
  /** Permission bits, 0–0777. */
  mode: number;
}

/** Relative path (`a/b.conf`) → content. */
export type Payload = Map<string, FileProjection>;

export const DATA_DIR_LINK = '..data';
const DATA_DIR_TEMP_LINK = '..data_tmp';

export class PayloadPathError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PayloadPathError';
  }
}

/**
 * A payload path must stay inside the volume and not collide with the writer's own `..` names:
 * relative, no `..` segment, not starting with `..`, no empty segment. (API validation refuses
 * such paths already; the writer checks again because it is what touches the disk.)
 */
export function checkPayloadPath(relative: string): void {
  const segments = relative.split('/');
  if (!relative || relative.startsWith('/')) throw new PayloadPathError(`${JSON.stringify(relative)}: must be a relative path`);
  if (relative.startsWith('..')) throw new PayloadPathError(`${JSON.stringify(relative)}: must not start with '..'`);
  if (segments.some((s) => s === '..')) throw new PayloadPathError(`${JSON.stringify(relative)}: must not contain '..'`);
  if (segments.some((s) => s === '' || s === '.')) throw new PayloadPathError(`${JSON.stringify(relative)}: must not have empty or '.' segments`);
  if (relative.includes('\0')) throw new PayloadPathError(`${JSON.stringify(relative)}: must not contain NUL`);
}

/** `..2026_01_02_03_04_05.` plus a random suffix: sorts by time, never reused. */
function versionDirPrefix(now: Date): string {
  const p = (n: number): string => String(n).padStart(2, '0');
  return `..${now.getUTCFullYear()}_${p(now.getUTCMonth() + 1)}_${p(now.getUTCDate())}_${p(now.getUTCHours())}_${p(now.getUTCMinutes())}_${p(now.getUTCSeconds())}.`;
}

function readLink(file: string): string | undefined {
  try {
    return fs.readlinkSync(file);
  } catch {
    return undefined;
  }
}

/** The files under `dir` (relative paths → content and mode), or undefined when it cannot be read. */
function readTree(dir: string): Payload | undefined {
  const files: Payload = new Map();
  const walk = (relative: string): void => {
    for (const entry of fs.readdirSync(path.join(dir, relative), { withFileTypes: true })) {
      const child = relative ? `${relative}/${entry.name}` : entry.name;
      if (entry.isDirectory()) walk(child);
      else if (entry.isFile()) {
        const full = path.join(dir, child);
        files.set(child, { data: fs.readFileSync(full), mode: fs.statSync(full).mode & 0o777 });
      } else throw new Error(`unexpected entry ${child}`);
    }
  };
  try {
    walk('');
    return files;
  } catch {
    return undefined;
  }
}

function samePayload(a: Payload, b: Payload): boolean {
  if (a.size !== b.size) return false;
  for (const [name, file] of a) {
    const other = b.get(name);
    if (!other || other.mode !== file.mode || !other.data.equals(file.data)) return false;
  }
  return true;
}

function topLevelNames(payload: Payload): Set<string> {
  return new Set([...payload.keys()].map((p) => p.split('/')[0]!));
}

export interface WriteOptions {
  /** Mode of the directories the writer makes (the volume's own included); 0700 unless told. */
  dirMode?: number;
  /** For tests: the time the version directory is named after. */
  now?: Date;
}

/**
 * Make `volumeDir` hold exactly `payload`. Returns false when it already did (nothing is
 * written: an unchanged ConfigMap does not churn the directory), true after an update.
 */
export function writePayload(volumeDir: string, payload: Payload, options: WriteOptions = {}): boolean {
  const dirMode = options.dirMode ?? 0o700;
  for (const name of payload.keys()) checkPayloadPath(name);
  fs.mkdirSync(volumeDir, { recursive: true, mode: dirMode });
  const dataLink = path.join(volumeDir, DATA_DIR_LINK);
  const oldVersion = readLink(dataLink);
  const oldPayload = oldVersion ? readTree(path.join(volumeDir, oldVersion)) : undefined;
  if (oldPayload && samePayload(oldPayload, payload)) {
    // The content is right; make sure every visible name leads to it (a crash may have cut an
    // earlier update short after the swap).
    linkTopLevel(volumeDir, payload, oldPayload);
    return false;
  }

  // 1. The new version, complete, in a directory nobody reads yet.
  const versionDir = fs.mkdtempSync(path.join(volumeDir, versionDirPrefix(options.now ?? new Date())));
  fs.chmodSync(versionDir, dirMode);
  for (const [name, file] of payload) {
    const target = path.join(versionDir, name);
    fs.mkdirSync(path.dirname(target), { recursive: true, mode: dirMode });
    fs.writeFileSync(target, file.data, { mode: file.mode });
    fs.chmodSync(target, file.mode);
  }

  // 2. The swap: a new link renamed over `..data` replaces it in one step.
  const tempLink = path.join(volumeDir, DATA_DIR_TEMP_LINK);
  fs.rmSync(tempLink, { force: true });
  fs.symlinkSync(path.basename(versionDir), tempLink);
  fs.renameSync(tempLink, dataLink);

  // 3. The visible names, then the old version.
  linkTopLevel(volumeDir, payload, oldPayload ?? new Map());
  if (oldVersion && oldVersion !== path.basename(versionDir) && oldVersion.startsWith('..')) {
    fs.rmSync(path.join(volumeDir, oldVersion), { recursive: true, force: true });
  }
  return true;
}

/**
 * Each top-level name of `payload` a symlink `<name> -> ..data/<name>`; names only the old payload
 * had are removed (only if they are such links: nothing else in the directory is touched).
 */
function linkTopLevel(volumeDir: string, payload: Payload, oldPayload: Payload): void {
  const wanted = topLevelNames(payload);
  for (const name of wanted) {
    const link = path.join(volumeDir, name);
    const target = `${DATA_DIR_LINK}/${name}`;
    if (readLink(link) === target) continue;
    fs.rmSync(link, { recursive: true, force: true });
    fs.symlinkSync(target, link);
  }
  for (const name of topLevelNames(oldPayload)) {
    if (wanted.has(name)) continue;
    const link = path.join(volumeDir, name);
    if (readLink(link) === `${DATA_DIR_LINK}/${name}`) fs.rmSync(link, { force: true });
  }
  // Version directories left by an update a crash interrupted.
  const current = readLink(path.join(volumeDir, DATA_DIR_LINK));
  for (const entry of fs.readdirSync(volumeDir)) {
    if (entry.startsWith('..') && entry !== DATA_DIR_LINK && entry !== current && /^\.\.\d{4}_/.test(entry)) {
      fs.rmSync(path.join(volumeDir, entry), { recursive: true, force: true });
    }
  }
}
