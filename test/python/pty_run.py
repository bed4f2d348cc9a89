"""Runs a command on a new pseudo-terminal of a given size, types lines into it, and prints what
the terminal showed (as a Python bytes literal) and the command's exit code as JSON.

  pty_run.py ROWS COLS LINE [LINE...] -- COMMAND [ARGS...]

Each LINE is typed (with a carriage return) once the terminal has been quiet for a moment or
after a generous ceiling. Two LINEs are directions instead: `@resize ROWS COLS` sets the
terminal's size (the command gets SIGWINCH, as from a resized window) and `@end` sends the command
SIGTERM (a session that would not end on its own, e.g. `kubectl attach`). Used by the e2e tests
for `kubectl exec -it`, `attach -it` and `debug -it`."""
import fcntl
import json
import os
import pty
import select
import signal
import struct
import sys
import termios
import time

sep = sys.argv.index('--')
rows, cols = int(sys.argv[1]), int(sys.argv[2])
lines = sys.argv[3:sep]
command = sys.argv[sep + 1:]

pid, fd = pty.fork()
if pid == 0:
    os.execvp(command[0], command)
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack('HHHH', rows, cols, 0, 0))
out = b''


def read_for(wait, ceiling=20.0):
    """Reads until the terminal has been quiet for `wait` seconds (or the ceiling passed)."""
    global out
    start = time.time()
    last = time.time()
    while time.time() - start < ceiling:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                data = os.read(fd, 4096)
            except OSError:
                return False
            if not data:
                return False
            out += data
            last = time.time()
        elif time.time() - last >= wait and out:
            return True
    return True


read_for(1.0)
for line in lines:
    if line.startswith('@resize '):
        _, r, c = line.split()
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack('HHHH', int(r), int(c), 0, 0))
    elif line == '@end':
        os.kill(pid, signal.SIGTERM)
    else:
        os.write(fd, line.encode() + b'\r')
    if not read_for(1.0):
        break
read_for(1.0, 10.0)
_, status = os.waitpid(pid, 0)
print(json.dumps({'output': out.decode('utf-8', 'replace'), 'exitCode': os.waitstatus_to_exitcode(status)}))
