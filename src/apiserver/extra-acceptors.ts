import { type ChildProcess, fork } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Logger } from '../logging/logger.js';

/**
 * Extra accept handles for a listening server, so that a busy event loop still takes new
 * connections at a useful rate.
 *
 * Node 20's libuv accepts one connection per listening handle per turn of the event loop
 * (libuv/libuv#3696). When an overloaded server's turns take 30 ms, that is about 30 new
 * connections a second; a client that needs a new connection (kubectl, a lister after a timeout,
 * an agent whose connection broke) then waits in the kernel's queue, where no 429 can reach it,
 * and times out. Each extra handle is another descriptor of the same listening socket in the same
 * event loop: one more accept per turn. Node 20 can neither duplicate a descriptor nor listen with
 * `reusePort` (Node 22.12), so a helper process that lives a fraction of a second
 * (./accept-helper.ts) hands the socket back `count` times over IPC, each time as a new
 * descriptor. What an extra handle accepts is given to the server as its own connection (its
 * 'connection' event, which runs TLS and HTTP as for any other). On a runtime with `reusePort`
 * this whole module gives way to listening `count + 1` times.
 */

/** Extra handles: with the server's own, eight accepts per turn of the event loop. */
export const EXTRA_ACCEPT_HANDLES = 7;

/** The helper hands the socket back within this, or the server goes on with its own handle only. */
const HELPER_DEADLINE_MS = 10_000;

export class ExtraAcceptors {
  private readonly handles: net.Server[] = [];
  private helper: ChildProcess | undefined;
  private closed = false;
  /** Settles once the helper is done (or failed): for tests and for close(). */
  readonly ready: Promise<number>;

  constructor(server: net.Server, count: number, backlog: number, logger: Logger) {
    this.ready = this.start(server, count, backlog, logger).catch((error: unknown) => {
      logger.warn({ error: error instanceof Error ? error.message : String(error) }, 'could not add extra accept handles; accepting one connection per turn of the event loop');
      return this.handles.length;
    });
  }

  private async start(server: net.Server, count: number, backlog: number, logger: Logger): Promise<number> {
    // The listening socket's handle: what Node's own cluster module sends between processes.
    const listening = (server as unknown as { _handle?: unknown })._handle;
    if (!listening || count <= 0) return 0;
    // dist/ runs the helper as JavaScript; the sources (tests, benches under tsx) as TypeScript.
    const self = fileURLToPath(import.meta.url);
    const helperFile = path.join(path.dirname(self), `accept-helper${path.extname(self)}`);
    const helper = fork(helperFile, [String(count)], {
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      // It needs nothing of the server's environment (which may carry credentials): none is passed.
      env: {},
      execArgv: path.extname(self) === '.js' ? [] : process.execArgv,
    });
    this.helper = helper;
    await new Promise<void>((resolve, reject) => {
      const deadline = setTimeout(() => {
        helper.kill('SIGKILL');
        reject(new Error(`the helper did not hand the socket back within ${HELPER_DEADLINE_MS / 1000} s`));
      }, HELPER_DEADLINE_MS);
      deadline.unref();
      helper.on('message', (_message, copy) => {
        if (!copy) return;
        const acceptor = net.createServer((socket) => server.emit('connection', socket));
        acceptor.on('error', (error) => logger.warn({ error: error.message }, 'an extra accept handle failed'));
        this.handles.push(acceptor);
        // Closed meanwhile: the copy must not keep the port open.
        if (this.closed) acceptor.close();
        else acceptor.listen(copy as net.Server, backlog);
      });
      helper.once('error', (error) => {
        clearTimeout(deadline);
        reject(error);
      });
      helper.once('exit', (code, signal) => {
        clearTimeout(deadline);
        this.helper = undefined;
        if (this.handles.length === count) resolve();
        else reject(new Error(`the helper ended (${signal ?? `exit code ${code}`}) after handing back ${this.handles.length} of ${count}`));
      });
      helper.send('listening socket', listening as net.Server);
    });
    logger.debug({ handles: count + 1 }, 'accepting on extra handles of the API socket');
    return this.handles.length;
  }

  /** Close every extra handle (the server closes its own); the helper, if still running, is stopped. */
  close(): void {
    this.closed = true;
    this.helper?.kill('SIGKILL');
    for (const handle of this.handles) if (handle.listening) handle.close();
  }
}
