/**
 * The helper process of ./extra-acceptors.ts: it receives the API server's listening socket once
 * over IPC (as a raw handle, so it never listens or accepts itself) and sends it back `count`
 * times, each copy arriving in the server as a new descriptor of the same socket, then exits.
 * If the server goes away first, it exits at once.
 */
const count = Number(process.argv[2] ?? '0');
process.once('disconnect', () => process.exit(0));
process.once('message', (_message: unknown, handle: unknown) => {
  let sent = 0;
  const next = (error?: Error | null): void => {
    if (error) process.exit(1);
    if (sent >= count) {
      process.disconnect();
      return;
    }
    sent++;
    process.send!('listening socket', handle as never, {}, next);
  };
  next();
});
