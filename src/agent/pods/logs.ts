import fs from 'node:fs';
import path from 'node:path';
import { once } from 'node:events';
import { containerLogDir, instanceLogFile, readRunSpec, readRunState, supervisorAlive, type PodRunSpec } from './run-spec.js';

/**
 * Container logs: one raw file per container instance (`<restartCount>.log`, what the process
 * wrote, no timestamps added), rotated once to `.log.1`, and the reader behind `kubectl logs`.
 */

/** Appends one instance's output; rotates so neither file grows past `maxBytes`. */
export class InstanceLogWriter {
  private fd: number;
  private size: number;

  constructor(
    readonly file: string,
    private readonly maxBytes: number,
  ) {
    fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    this.fd = fs.openSync(file, 'a', 0o600);
    this.size = fs.fstatSync(this.fd).size;
  }

  write(chunk: Buffer): void {
    if (this.fd < 0) return;
    let offset = 0;
    while (offset < chunk.length) {
      if (this.size >= this.maxBytes) this.rotate();
      const room = this.maxBytes - this.size;
      const part = chunk.subarray(offset, offset + room);
      fs.writeSync(this.fd, part);
      this.size += part.length;
      offset += part.length;
    }
  }

  close(): void {
    if (this.fd < 0) return;
    fs.closeSync(this.fd);
    this.fd = -1;
  }

  private rotate(): void {
    // Rename, then reopen: a follower holding the old file reads it to its end, then moves on.
    fs.closeSync(this.fd);
    fs.renameSync(this.file, `${this.file}.1`);
    this.fd = fs.openSync(this.file, 'a', 0o600);
    this.size = 0;
  }
}

/** Instances of a container that have a log, oldest first. */
export function logInstances(dir: string, container: string): number[] {
  let names: string[];
  try {
    names = fs.readdirSync(containerLogDir(dir, container));
  } catch {
    return [];
  }
  const instances = new Set<number>();
  for (const name of names) {
    const match = /^(\d+)\.log(\.1)?$/.exec(name);
    if (match) instances.add(Number(match[1]));
  }
  return [...instances].sort((a, b) => a - b);
}

/** Keep only the logs of `current` and the instance before it (what `--previous` can show). */
export function pruneInstanceLogs(dir: string, container: string, current: number): void {
  for (const instance of logInstances(dir, container)) {
    if (instance >= current - 1) continue;
    const file = instanceLogFile(dir, container, instance);
    fs.rmSync(file, { force: true });
    fs.rmSync(`${file}.1`, { force: true });
  }
}

export interface LogOptions {
  tailLines?: number;
  previous?: boolean;
  follow?: boolean;
  limitBytes?: number;
}

export type PodLogErrorCode = 'NoSuchPod' | 'NoSuchContainer' | 'ContainerNotStarted' | 'NoPreviousInstance';

export class PodLogError extends Error {
  constructor(
    readonly code: PodLogErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'PodLogError';
  }
}

const FOLLOW_POLL_MS = 100;

function readWhole(file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch {
    return Buffer.alloc(0);
  }
}

function lastLines(content: Buffer, lines: number): Buffer {
  if (lines <= 0) return Buffer.alloc(0);
  // A final newline ends the last line rather than starting an empty one.
  let end = content.length;
  if (end > 0 && content[end - 1] === 0x0a) end--;
  let position = end;
  for (let found = 0; position > 0; ) {
    const newline = content.lastIndexOf(0x0a, position - 1);
    if (newline < 0) return content;
    found++;
    if (found === lines) return content.subarray(newline + 1);
    position = newline;
  }
  return content;
}

/** Has the instance stopped producing output (exited, replaced, or nobody left to run it)? */
function instanceEnded(dir: string, container: string, instance: number): boolean {
  const state = readRunState(dir);
  if (!state) return supervisorAlive(dir) === undefined;
  if (state.finished) return true;
  const status = [...state.containers, ...(state.ephemeralContainers ?? [])].find((c) => c.name === container);
  if (!status || status.restartCount !== instance) return true;
  if ('running' in status.state) return supervisorAlive(dir) === undefined;
  // The log file appears just before the state says running.
  if ('waiting' in status.state && status.state.waiting.reason === 'ContainerCreating') return supervisorAlive(dir) === undefined;
  return true;
}

class LimitedOutput {
  private written = 0;
  constructor(
    private readonly out: NodeJS.WritableStream,
    private readonly limitBytes: number | undefined,
  ) {}

  get full(): boolean {
    return this.limitBytes !== undefined && this.written >= this.limitBytes;
  }

  async write(chunk: Buffer): Promise<void> {
    if (chunk.length === 0 || this.full) return;
    const part = this.limitBytes === undefined ? chunk : chunk.subarray(0, this.limitBytes - this.written);
    this.written += part.length;
    if (!this.out.write(part)) await once(this.out, 'drain');
  }
}

/** Reads a growing, rotating log file from a position on. */
class LogFollower {
  private fd: number;
  private position: number;
  private inode: number;

  constructor(private readonly file: string) {
    this.fd = fs.openSync(file, 'r');
    const stat = fs.fstatSync(this.fd);
    this.position = stat.size;
    this.inode = stat.ino;
  }

  get startPosition(): number {
    return this.position;
  }

  /** New bytes since the last call, following a rotation to the new file. */
  read(): Buffer {
    const chunks = [this.drain()];
    let current: fs.Stats | undefined;
    try {
      current = fs.statSync(this.file);
    } catch {
      current = undefined;
    }
    if (current && current.ino !== this.inode) {
      // Rotated: what was written to the old file before the rename has been drained above.
      chunks.push(this.drain());
      fs.closeSync(this.fd);
      this.fd = fs.openSync(this.file, 'r');
      this.inode = current.ino;
      this.position = 0;
      chunks.push(this.drain());
    }
    return Buffer.concat(chunks);
  }

  close(): void {
    fs.closeSync(this.fd);
  }

  private drain(): Buffer {
    const chunks: Buffer[] = [];
    const buffer = Buffer.alloc(64 * 1024);
    for (;;) {
      const n = fs.readSync(this.fd, buffer, 0, buffer.length, this.position);
      if (n === 0) break;
      this.position += n;
      chunks.push(Buffer.from(buffer.subarray(0, n)));
    }
    return Buffer.concat(chunks);
  }
}

/**
 * Writes the container's log to `out`; with follow, keeps writing until the instance ends or
 * `signal` aborts. Throws a PodLogError when there is no such container / no previous instance.
 */
export async function streamContainerLog(
  dir: string,
  container: string,
  options: LogOptions,
  out: NodeJS.WritableStream,
  signal: AbortSignal,
): Promise<void> {
  let spec: PodRunSpec;
  try {
    spec = readRunSpec(dir);
  } catch (error) {
    throw new PodLogError('NoSuchPod', `no pod in ${dir}: ${(error as Error).message}`);
  }
  const podName = `${spec.namespace}/${spec.name}`;
  if (!spec.containers.some((c) => c.name === container) && !spec.ephemeralContainers?.some((c) => c.name === container)) {
    const names = spec.containers.map((c) => c.name).join(', ');
    throw new PodLogError('NoSuchContainer', `container ${container} is not valid for pod ${podName} (its containers: ${names})`);
  }
  const instances = logInstances(dir, container);
  const current = instances.at(-1);
  if (current === undefined) {
    const run = readRunState(dir);
    const status = [...(run?.containers ?? []), ...(run?.ephemeralContainers ?? [])].find((c) => c.name === container);
    const waiting = status && 'waiting' in status.state ? `: ${status.state.waiting.reason}` : '';
    throw new PodLogError('ContainerNotStarted', `container "${container}" in pod "${podName}" is waiting to start${waiting}`);
  }
  let instance = current;
  if (options.previous) {
    const previous = instances.at(-2);
    if (previous === undefined) {
      throw new PodLogError('NoPreviousInstance', `previous terminated container "${container}" in pod "${podName}" not found`);
    }
    instance = previous;
  }
  const file = instanceLogFile(dir, container, instance);
  const output = new LimitedOutput(out, options.limitBytes);
  const follow = options.follow === true && !options.previous;
  if (!follow) {
    const content = Buffer.concat([readWhole(`${file}.1`), readWhole(file)]);
    await output.write(options.tailLines === undefined ? content : lastLines(content, options.tailLines));
    return;
  }

  // Open before reading the backlog, so nothing written in between is lost or repeated.
  let follower: LogFollower;
  try {
    follower = new LogFollower(file);
  } catch {
    return;
  }
  try {
    const backlog = Buffer.concat([readWhole(`${file}.1`), readWhole(file).subarray(0, follower.startPosition)]);
    await output.write(options.tailLines === undefined ? backlog : lastLines(backlog, options.tailLines));
    while (!signal.aborted && !output.full) {
      // Check for the end before reading, so the final read catches everything written before it.
      const ended = instanceEnded(dir, container, instance);
      await output.write(follower.read());
      if (ended) return;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, FOLLOW_POLL_MS);
        function done(): void {
          clearTimeout(timer);
          signal.removeEventListener('abort', done);
          resolve();
        }
        signal.addEventListener('abort', done, { once: true });
      });
    }
  } finally {
    follower.close();
  }
}
