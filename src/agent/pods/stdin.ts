import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { Writable } from 'node:stream';

/**
 * The stdin of a container with `stdin: true`, for `kubectl attach -i`. The supervisor spawns such
 * a container with a pipe on its stdin (runc passes it through to the container's process) and
 * listens on a unix socket `<pod dir>/stdin/<container>`, root only; the agent's attach session
 * connects to it and writes what the client types. Bytes go to the running instance; while none
 * runs they are dropped. The client closing its stdin half-closes the connection.
 *
 * `stdinOnce` as Kubernetes defines it: stdin is open from the instance's start, empty until the
 * first attach session, which may write until it ends (closes stdin or goes away); then the
 * instance's stdin is closed and stays closed until the container restarts. Without it stdin
 * stays open across sessions.
 */

export const STDIN_DIR = 'stdin';

export class StdinError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'StdinError';
  }
}

/**
 * A path to `name` in `dir` short enough for a unix socket address (108 bytes), whatever the
 * length of `dir`: through `/proc/self/fd/<n>` of a handle on the directory. `close` releases the
 * handle once the socket is bound or connected.
 */
function shortPath(dir: string, name: string): { path: string; close: () => void } {
  const full = path.join(dir, name);
  if (Buffer.byteLength(full) < 100) return { path: full, close: () => undefined };
  const fd = fs.openSync(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  return { path: `/proc/self/fd/${fd}/${name}`, close: () => fs.closeSync(fd) };
}

export function stdinSocketDir(podDir: string): string {
  return path.join(podDir, STDIN_DIR);
}

/** The supervisor's end: one per container with `stdin: true`, for the life of the supervisor. */
export class ContainerStdin {
  private server: net.Server | undefined;
  private target: Writable | undefined;
  /** stdinOnce: the first session of this instance has begun. */
  private claimed = false;

  constructor(
    private readonly podDir: string,
    private readonly container: string,
    private readonly once: boolean,
    private readonly warn: (message: string, details: Record<string, unknown>) => void,
  ) {}

  /** Listens on the container's socket (a stale one from an earlier supervisor is replaced). */
  listen(): void {
    const dir = stdinSocketDir(this.podDir);
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    // Whoever can connect writes to the container's stdin: the directory is the supervisor's
    // user's (root's) alone, also when an earlier run or a umask left it wider.
    fs.chmodSync(dir, 0o700);
    fs.rmSync(path.join(dir, this.container), { force: true });
    const server = net.createServer((connection) => this.serve(connection));
    server.on('error', (error) => this.warn('the stdin socket failed; attach -i is unavailable', { err: error, container: this.container }));
    const address = shortPath(dir, this.container);
    try {
      server.listen(address.path, () => address.close());
    } catch (error) {
      address.close();
      throw error;
    }
    this.server = server;
  }

  /** A new instance of the container started with `stdin` as its stdin pipe. */
  instanceStarted(stdin: Writable | null | undefined): void {
    this.target = stdin ?? undefined;
    this.claimed = false;
    stdin?.on('error', () => undefined);
  }

  instanceEnded(): void {
    this.target = undefined;
  }

  close(): void {
    this.server?.close();
    this.server = undefined;
    this.target = undefined;
  }

  private serve(connection: net.Socket): void {
    connection.on('error', () => undefined);
    const target = this.target;
    if (this.once) {
      if (this.claimed || !target) {
        // This instance's stdin is closed (or no instance runs): nothing the session sends arrives.
        connection.resume();
        return;
      }
      this.claimed = true;
    }
    connection.on('data', (chunk: Buffer) => {
      const current = this.target;
      if (!current || current !== (this.once ? target : current) || !current.writable) return;
      if (!current.write(chunk)) {
        connection.pause();
        current.once('drain', () => connection.resume());
      }
    });
    // The session's end closes stdin only under stdinOnce, and only the instance it wrote to.
    connection.once('close', () => {
      if (this.once && this.target === target) target?.end();
    });
  }
}

/** The agent's end: a connection to the container's stdin, or StdinError why not. */
export function connectContainerStdin(podDir: string, container: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    let address: { path: string; close: () => void };
    try {
      address = shortPath(stdinSocketDir(podDir), container);
    } catch (error) {
      reject(new StdinError(`the stdin of container ${container} is not open: ${(error as Error).message}`));
      return;
    }
    const socket = net.connect(address.path);
    socket.once('connect', () => {
      address.close();
      resolve(socket);
    });
    socket.once('error', (error) => {
      address.close();
      reject(new StdinError(`the stdin of container ${container} is not open: ${error.message}`));
    });
  });
}
