/**
 * Cold start: time from spawning `drover server` to the first 200 from GET /readyz, with a fresh
 * data dir (CA, serving certificate, token, schema and built-in namespaces are created) and
 * with an existing one, against the floor of spawning `node -e ""` until it exits.
 *
 *   npm run build && node --import tsx bench/coldstart.ts [--runs 5]
 *
 * Writes bench/results/coldstart.json. Runs of the three kinds are interleaved so that noise on
 * the shared machine spreads over all of them; medians are reported. The server is given a port
 * picked beforehand, and /readyz is polled every 5 ms from the moment of the spawn (a new TLS
 * connection each time, certificate not verified since a fresh CA does not exist yet).
 *
 * Each run ends with SIGTERM, and the time from the signal to the exit is the shutdown figure
 * (test/e2e/api.test.ts only checks the exit code 0, which the 15 s watchdog would turn into 1): the
 * fresh-data-dir runs stop right after the first 200, their embedded agent still registering; the
 * existing-data-dir runs stop once the server's own node is Ready (a settled server, whose agent
 * records a planned stop and releases its lease on the way out).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { checkBuild, DROVER_BIN, freePort, machineInfo, median, printMachine, round, sleep, writeResult } from './common.js';

const { values: args } = parseArgs({ options: { runs: { type: 'string', default: '5' } } });
const RUNS = Number(args.runs);
const POLL_MS = 5;
const GOAL_MS = 1000;

function readyz(port: number): Promise<number> {
  return new Promise((resolve) => {
    const req = https.get(
      { host: '127.0.0.1', port, path: '/readyz', rejectUnauthorized: false, agent: false, timeout: 2000 },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', () => resolve(0));
    req.on('timeout', () => req.destroy());
  });
}

interface ServerStart {
  /** Spawn to first 200 from /readyz. */
  readyzMs: number;
  /** SIGTERM to exit. */
  stopMs: number;
  stopCode: number | null;
  /** Spawn to the "Drover server is ready" log line. */
  logLineMs: number;
  /** startupMs the server logs (from the start of startServer to listening). */
  serverReportedMs: number;
}

/** Whether the server's own node (the only one) is Ready, through the API with the admin token. */
function ownNodeReady(port: number, dataDir: string): Promise<boolean> {
  let token: string;
  try {
    token = fs.readFileSync(path.join(dataDir, 'server/cred/admin.token'), 'utf8').trim();
  } catch {
    return Promise.resolve(false);
  }
  return new Promise((resolve) => {
    const req = https.get(
      { host: '127.0.0.1', port, path: '/api/v1/nodes', rejectUnauthorized: false, agent: false, timeout: 2000, headers: { Authorization: `Bearer ${token}` } },
      (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => {
          try {
            const items = (JSON.parse(body) as { items: { metadata: { labels?: Record<string, string> } }[] }).items;
            resolve(items.some((n) => n.metadata.labels?.['drover.io/state'] === 'Ready'));
          } catch {
            resolve(false);
          }
        });
      },
    );
    req.on('error', () => resolve(false));
    req.on('timeout', () => req.destroy());
  });
}

async function timeServer(dataDir: string, settle = false): Promise<ServerStart> {
  const port = await freePort();
  const t0 = performance.now();
  const child = spawn(
    process.execPath,
    [DROVER_BIN, 'server', '--data-dir', dataDir, '--https-listen-port', String(port), '--bind-address', '127.0.0.1'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  let logLineMs = NaN;
  let serverReportedMs = NaN;
  child.stdout!.on('data', (chunk: Buffer) => {
    output += chunk.toString();
    if (Number.isNaN(logLineMs) && output.includes('Drover server is ready')) {
      logLineMs = performance.now() - t0;
      const line = output.split('\n').find((l) => l.includes('Drover server is ready'))!;
      serverReportedMs = (JSON.parse(line) as { startupMs: number }).startupMs;
    }
  });
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let exitedEarly = false;
  void exited.then(() => (exitedEarly = true));
  try {
    for (;;) {
      if (exitedEarly) throw new Error(`drover server exited before it was ready:\n${output}`);
      if ((await readyz(port)) === 200) break;
      if (performance.now() - t0 > 30_000) throw new Error(`not ready after 30 s:\n${output}`);
      await sleep(POLL_MS);
    }
    const readyzMs = performance.now() - t0;
    // The log line is written before /readyz can answer, but may be read a little later.
    for (let i = 0; i < 100 && Number.isNaN(logLineMs); i++) await sleep(10);
    if (settle) {
      for (let i = 0; !(await ownNodeReady(port, dataDir)); i++) {
        if (i > 600) throw new Error(`the server's own node was not Ready after 30 s:\n${output}`);
        await sleep(50);
      }
    }
    const stopStarted = performance.now();
    child.kill('SIGTERM');
    const stopCode = await exited;
    return { readyzMs, logLineMs, serverReportedMs, stopMs: performance.now() - stopStarted, stopCode };
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    // Past the server's own watchdog (shutdown-grace-period + 5 s = 15 s).
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    await exited;
    clearTimeout(timer);
  }
}

/** Spawn to exit of `node <args>`. */
async function timeNode(args: string[]): Promise<number> {
  const t0 = performance.now();
  const child = spawn(process.execPath, args, { stdio: 'ignore' });
  await new Promise<void>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`node ${args.join(' ')} exited with ${code}`))));
  });
  return performance.now() - t0;
}

async function main(): Promise<void> {
  checkBuild();
  const machine = machineInfo();
  printMachine(machine);
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'drover-bench-coldstart-'));
  const existing = path.join(root, 'existing');
  try {
    // Prepare the existing data dir (and warm the OS file cache for node and dist/).
    await timeServer(existing);
    await timeNode(['-e', '']);

    const floor: number[] = [];
    const cli: number[] = [];
    const fresh: ServerStart[] = [];
    const again: ServerStart[] = [];
    for (let i = 0; i < RUNS; i++) {
      floor.push(await timeNode(['-e', '']));
      cli.push(await timeNode([DROVER_BIN, '--version']));
      fresh.push(await timeServer(path.join(root, `fresh-${i}`)));
      again.push(await timeServer(existing, true));
      console.log(
        `  run ${i + 1}: node -e "" ${floor[i]!.toFixed(0)} ms, drover --version ${cli[i]!.toFixed(0)} ms, ` +
          `fresh ${fresh[i]!.readyzMs.toFixed(0)} ms, existing ${again[i]!.readyzMs.toFixed(0)} ms; ` +
          `SIGTERM to exit ${fresh[i]!.stopMs.toFixed(0)} ms right after start (exit ${fresh[i]!.stopCode}), ` +
          `${again[i]!.stopMs.toFixed(0)} ms settled (exit ${again[i]!.stopCode})`,
      );
    }

    const floorMs = median(floor);
    const summarize = (runs: ServerStart[]) => {
      const readyzMs = median(runs.map((r) => r.readyzMs));
      return {
        readyzMs: round(readyzMs, 1),
        logLineMs: round(median(runs.map((r) => r.logLineMs)), 1),
        serverReportedMs: round(median(runs.map((r) => r.serverReportedMs)), 1),
        xProcessFloor: round(readyzMs / floorMs, 2),
        aboveFloorMs: round(readyzMs - floorMs, 1),
        runsReadyzMs: runs.map((r) => round(r.readyzMs, 1)),
        stopMs: round(median(runs.map((r) => r.stopMs)), 1),
        stopMaxMs: round(Math.max(...runs.map((r) => r.stopMs)), 1),
        runsStopMs: runs.map((r) => round(r.stopMs, 1)),
        stopExitCodes: runs.map((r) => r.stopCode),
      };
    };
    const freshSummary = summarize(fresh);
    const existingSummary = summarize(again);
    console.log('');
    console.log(`process floor, node -e "":       ${floorMs.toFixed(0).padStart(5)} ms (median of ${RUNS})`);
    console.log(`drover --version (module load):  ${median(cli).toFixed(0).padStart(5)} ms  ${(median(cli) / floorMs).toFixed(2)} x floor`);
    for (const [name, s] of [
      ['fresh data dir', freshSummary],
      ['existing data dir', existingSummary],
    ] as const) {
      console.log(
        `server, ${name.padEnd(18)}   ${s.readyzMs.toFixed(0).padStart(5)} ms to first 200 /readyz  ` +
          `${s.xProcessFloor.toFixed(2)} x floor (+${s.aboveFloorMs.toFixed(0)} ms); ready log line at ${s.logLineMs.toFixed(0)} ms, ` +
          `server-reported startup ${s.serverReportedMs.toFixed(0)} ms`,
      );
    }
    for (const [name, s] of [
      ['right after start (fresh)', freshSummary],
      ['settled, own node Ready (existing)', existingSummary],
    ] as const) {
      console.log(
        `SIGTERM to exit, ${name.padEnd(35)} ${s.stopMs.toFixed(0).padStart(5)} ms median, max ${s.stopMaxMs.toFixed(0)} ms; exit codes ${s.stopExitCodes.join(' ')}`,
      );
    }
    const met = freshSummary.readyzMs < GOAL_MS && existingSummary.readyzMs < GOAL_MS;
    console.log(`goal (< ${GOAL_MS} ms to ready): ${met ? 'met' : 'NOT met'} on this run`);

    const file = writeResult('coldstart', {
      benchmark: 'coldstart',
      machine,
      settings: { runs: RUNS, pollMs: POLL_MS },
      processFloorMs: round(floorMs, 1),
      processFloorRunsMs: floor.map((x) => round(x, 1)),
      cliVersionMs: round(median(cli), 1),
      cliVersionXFloor: round(median(cli) / floorMs, 2),
      fresh: freshSummary,
      existing: existingSummary,
      goal: { readyMs: GOAL_MS, met },
    });
    console.log(`\nwrote ${path.relative(process.cwd(), file)}`);
  } finally {
    fs.rmSync(root, { recursive: true, force: true });
  }
}

await main();
