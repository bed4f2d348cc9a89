import { execFile } from 'node:child_process';
import fs from 'node:fs';

/**
 * Pseudo-terminals for containers (`tty: true`, `kubectl exec -t`, `kubectl debug -it`).
 *
 * runc makes the container's terminal itself (config.json `process.terminal: true`, or `runc exec
 * --tty`) and hands its master end over a unix socket with SCM_RIGHTS. Node cannot receive a file
 * descriptor, so nothing here takes the master: runc is run in the foreground, where it receives
 * the master on its own, copies it to and from its stdio, and on SIGWINCH copies the size of the
 * terminal on its stdin to the container's. All it needs is a terminal on its stdio, and that
 * is what util-linux `script` gives it (Debian's bsdutils, an Essential package): script runs a
 * command on a new pseudo-terminal and copies that terminal to its own stdio (pipes to the
 * supervisor or to the agent's stream session). So the chain is
 *   pipes <-> script <-> pty (runc's stdio, raw) <-> runc <-> the container's pty <-> its process,
 * two small processes owning the two ptys, no native code, no new dependency. Resizing sets the
 * size of the outer pty (`stty -F`, Node has no ioctl); the kernel sends runc SIGWINCH and runc
 * passes the size on, so the container's process sees SIGWINCH and `stty size` follows.
 *
 * The process runtime has no console to hand over: `kubectl exec -t` runs the command right on
 * script's terminal; a `tty: true` container's main process gets no terminal (its supervisor logs
 * why), since the process group of a command under script is not the supervisor's to kill.
 */

/** POSIX shell quoting, for script's `-c`. */
export function shellQuote(arg: string): string {
  return /^[A-Za-z0-9_./=:@%+-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}

/**
 * `file args…` run on a new pseudo-terminal by script: its output (the terminal's, one stream) on
 * script's stdout, script's stdin typed into it. -q no banner, -f flush at once, -e exit with the
 * command's status, /dev/null: no typescript file. script's stdin must stay open while the command
 * runs (at its EOF script types an end-of-file character into the terminal).
 */
export function onTerminal(file: string, args: readonly string[]): { file: string; args: string[] } {
  const command = [file, ...args].map(shellQuote).join(' ');
  return { file: 'script', args: ['-qfec', command, '/dev/null'] };
}

/** The terminal script made: the /dev/pts device its command (script's child) has as stdin, or undefined. */
export function terminalOf(scriptPid: number | undefined): string | undefined {
  if (!scriptPid || scriptPid <= 1) return undefined;
  let children: string[];
  try {
    children = fs.readFileSync(`/proc/${scriptPid}/task/${scriptPid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
  } catch {
    return undefined;
  }
  for (const child of children) {
    try {
      const tty = fs.readlinkSync(`/proc/${child}/fd/0`);
      if (/^\/dev\/pts\/\d+$/.test(tty)) return tty;
    } catch {
      // the child is gone or not ours to read: try the next
    }
  }
  return undefined;
}

/**
 * The size each terminal is being set to, by one `stty` at a time: stty sets the rows and the
 * columns with an ioctl each, so two at once (kubectl sends its size plus one, then its size, to
 * make the shell redraw) could interleave and leave the rows of one and the columns of the other.
 * Sizes that come while one is applied wait, and only the latest is applied next.
 */
const resizing = new Map<string, { next?: { columns: number; rows: number } }>();

function applySize(tty: string, columns: number, rows: number): void {
  const current = resizing.get(tty);
  if (current) {
    current.next = { columns, rows };
    return;
  }
  const entry: { next?: { columns: number; rows: number } } = {};
  resizing.set(tty, entry);
  execFile('stty', ['-F', tty, 'cols', String(columns), 'rows', String(rows)], () => {
    resizing.delete(tty);
    if (entry.next) applySize(tty, entry.next.columns, entry.next.rows);
  });
}

/** Sets the size of the terminal a script process made; false when it has none (yet). */
export function resizeTerminal(scriptPid: number | undefined, columns: number, rows: number): boolean {
  const tty = terminalOf(scriptPid);
  if (!tty) return false;
  applySize(tty, columns, rows);
  return true;
}
