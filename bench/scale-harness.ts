/**
 * What bench/scale.ts and bench/scale-overload.ts share: the simulated nodes' process
 * (bench/scale-nodes.ts) and how it is asked, each Node's state as the bench sees it (an Informer
 * on the Nodes, as the controllers have), and the last phase of both, where some nodes go silent
 * and the bench times how long the controller takes to call each of them Unavailable.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import type { KubeObject } from '../src/apiserver/objects.js';
import { HttpClient } from '../src/client/http.js';
import { Informer } from '../src/client/informer.js';
import { NODES as NODE_RESOURCE } from '../src/client/types.js';
import { createLogger } from '../src/logging/logger.js';
import { NODE_LEASE_NAMESPACE, STATE_LABEL } from '../src/node-protocol/names.js';
import { BENCH_DIR, type BenchApi, nodeName, processCpuSeconds, round, sleep, stopChild, track } from './common.js';
import { attributeVerdict, countCauses, type RenewalRecord } from './verdict-attribution.js';

/** The options both scale benches take for the simulated nodes and the silence phase (parseBenchArgs). */
export const SIMULATION_OPTIONS = {
  nodes: { default: 2000, min: 1 },
  'silent-percent': { default: 5, min: 0 },
  'warmup-s': { default: 10, min: 0 },
  'measure-s': { default: 15, min: 1 },
  'detect-ceiling-s': { default: 20, min: 1 },
  'renew-ms': { default: 1000, min: 100 },
};

/** What the simulator says of the renewals since its last report. */
export interface RenewalReport {
  sent: number;
  ok: number;
  tooMany: number;
  errors: number;
  firstError?: string;
  p50: number | null;
  p99: number | null;
  max: number | null;
}

export interface SimulatorOptions {
  url: string;
  caFile: string;
  tokenFile: string;
  /** How many nodes it plays (0: none, for a process that only lists). */
  count: number;
  renewMs: number;
  /** HTTPS connections the nodes share; 0: one per node, as real agents have. */
  connections: number;
  logFile: string;
  /** Certificates for the nodes and the lister (scale-nodes.ts); without, everything is the admin's. */
  credentialsFile?: string;
}

/** The simulated nodes' process: one command at a time, each answered by one JSON line. */
export class SimulatedNodes {
  private readonly answers: ((line: Record<string, unknown>) => void)[] = [];
  private constructor(readonly child: ChildProcess) {
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      const answer = JSON.parse(line) as Record<string, unknown>;
      this.answers.shift()?.(answer);
    });
  }

  static spawn(o: SimulatorOptions): SimulatedNodes {
    const log = fs.openSync(o.logFile, 'a');
    try {
      const argv = [o.url, o.caFile, o.tokenFile, String(o.count), String(o.renewMs), '0', String(o.connections), ...(o.credentialsFile ? [o.credentialsFile] : [])];
      const child = track(spawn(process.execPath, ['--import', 'tsx', path.join(BENCH_DIR, 'scale-nodes.ts'), ...argv], { stdio: ['pipe', 'pipe', log] }));
      return new SimulatedNodes(child);
    } finally {
      fs.closeSync(log);
    }
  }

  ask(command: string, timeoutMs = 600_000): Promise<Record<string, unknown>> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the simulated nodes did not answer ${command.split(' ')[0]} within ${timeoutMs} ms`)), timeoutMs);
      this.answers.push((answer) => {
        clearTimeout(timer);
        if (typeof answer.error === 'string') reject(new Error(`simulated nodes: ${answer.error}`));
        else resolve(answer);
      });
      this.child.stdin!.write(`${command}\n`);
    });
  }

  /** Asks it to stop, then makes sure its process is gone. */
  async stop(): Promise<void> {
    await this.ask('stop', 10_000).catch(() => undefined);
    await stopChild(this.child, 'SIGTERM', 5000);
  }
}

/**
 * Each node's state label with the time of every change, from an Informer on the Nodes (list, then
 * watch, re-listing when the watch ends) over the admin's HttpClient. It keeps only each Node's
 * name, resourceVersion and labels.
 */
export class NodeStates {
  readonly state = new Map<string, string>();
  readonly changes: { node: string; state: string; at: number }[] = [];
  private client: HttpClient | undefined;
  private informer: Informer | undefined;

  /** Resolves once the first list is in (or, if it failed, while the informer retries it). */
  async start(server: { url: string; adminToken: string; caPem: string }): Promise<void> {
    this.client = new HttpClient({ server: server.url, caPem: server.caPem, token: server.adminToken });
    const slim = (node: KubeObject): KubeObject => ({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: node.metadata.name, resourceVersion: node.metadata.resourceVersion, labels: node.metadata.labels ?? {} },
    });
    this.informer = new Informer(
      this.client,
      NODE_RESOURCE,
      undefined,
      (type, node) => {
        if (type !== 'DELETED') this.note(node.metadata.name ?? '', node.metadata.labels?.[STATE_LABEL] ?? '');
      },
      createLogger('silent'),
      {},
      slim,
    );
    await this.informer.start();
  }

  private note(node: string, state: string): void {
    if (this.state.get(node) === state) return;
    this.state.set(node, state);
    this.changes.push({ node, state, at: Date.now() });
  }

  count(state: string): number {
    let n = 0;
    for (const value of this.state.values()) if (value === state) n++;
    return n;
  }

  stop(): void {
    this.informer?.stop();
    this.client?.close();
  }
}

export async function until(what: string, ceilingMs: number, check: () => boolean): Promise<void> {
  const deadline = Date.now() + ceilingMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ceilingMs / 1000} s`);
    await sleep(100);
  }
}

/** CPU seconds of a process so far; NaN without one. */
export function cpu(pid: number | undefined): number {
  return pid === undefined ? NaN : processCpuSeconds(pid);
}

/**
 * Waits until every simulated node has had a renewal answered, then until every node is Ready; on
 * failure, says what the states and renewals were. Before its first renewal, a node's last word is
 * the Lease setup created seconds earlier (and that renewal may wait for a TLS handshake among
 * hundreds), so it may rightly turn suspect then: false verdicts count only from after this.
 */
export async function untilAllReady(nodes: SimulatedNodes, states: NodeStates, count: number): Promise<void> {
  const deadline = Date.now() + 60_000 + count * 20;
  for (;;) {
    const answer = await nodes.ask('renewed');
    if (answer.allAt !== null) break;
    if (Date.now() > deadline) throw new Error(`only ${String(answer.renewed)} of ${count} simulated nodes had a renewal answered`);
    await sleep(200);
  }
  await until(`all ${count} nodes Ready`, 60_000 + count * 20, () => states.count('Ready') === count).catch(async (error: unknown) => {
    const counts: Record<string, number> = {};
    for (const value of states.state.values()) counts[value || '(none)'] = (counts[value || '(none)'] ?? 0) + 1;
    const renewals = await nodes.ask('report');
    throw new Error(`${(error as Error).message}; states ${JSON.stringify(counts)}; renewals meanwhile ${JSON.stringify(renewals)}`);
  });
}

export interface SilenceRun<T> {
  nodes: SimulatedNodes;
  states: NodeStates;
  api: BenchApi;
  /** How many nodes there are, and how many go silent (spread over the index range). */
  count: number;
  silentCount: number;
  /** When every node was Ready after its first renewal: any other state on a node never silenced after that is a false verdict. */
  allReadyAt: number;
  detectCeilingS: number;
  /** What the load did while the bench waited for the verdicts; asked right after the wait. */
  during: () => Promise<T>;
}

/**
 * The last phase: `silentCount` nodes stop renewing (a host lost); waits up to the ceiling for
 * each to be called Unavailable. Answers `during()` and the detection figures: how many, how soon
 * (seconds from the silence), the false verdicts, and what the controller said about its own view
 * (docs/node-lifecycle.md, "When the control plane is slow").
 */
export async function silenceAndDetect<T>(run: SilenceRun<T>): Promise<{ during: T; detection: Record<string, unknown> }> {
  const { nodes, states, silentCount } = run;
  const silent = Array.from({ length: silentCount }, (_, k) => Math.floor((k * run.count) / silentCount));
  const silentNames = new Set(silent.map(nodeName));
  const silencedAt = Number((await nodes.ask(`silence ${silent.join(',')}`)).at);
  const detected = (): number => [...silentNames].filter((name) => states.state.get(name) === 'Unavailable').length;
  await until('every silent node Unavailable', run.detectCeilingS * 1000, () => detected() === silentCount).catch(() => undefined);
  const during = await run.during();
  const detectionS = [...silentNames]
    .map((name) => states.changes.find((c) => c.node === name && c.state === 'Unavailable' && c.at >= silencedAt))
    .filter((c) => c !== undefined)
    .map((c) => (c.at - silencedAt) / 1000)
    .sort((a, b) => a - b);
  const disruptions = (await run.api.json<{ items: { message?: string }[] }>('GET', `/api/v1/namespaces/${NODE_LEASE_NAMESPACE}/events`).catch(() => ({ items: [] }))).items
    .filter((e) => /ControlPlaneDisruption/.test(JSON.stringify(e)))
    .map((e) => e.message ?? '');
  const falseVerdicts = states.changes.filter((c) => c.at >= run.allReadyAt && !silentNames.has(c.node) && c.state !== 'Ready');
  const causes = await falseVerdictCauses(nodes, falseVerdicts, silencedAt);
  return {
    during,
    detection: {
      silenced: silentCount,
      detected: detectionS.length,
      detectionP50S: detectionS.length ? round(detectionS[Math.floor(detectionS.length / 2)]!, 2) : null,
      detectionMaxS: detectionS.length ? round(detectionS[detectionS.length - 1]!, 2) : null,
      falseVerdicts: falseVerdicts.length,
      ...(falseVerdicts.length ? { firstFalseVerdicts: falseVerdicts.slice(0, 5) } : {}),
      ...causes,
      controlPlaneDisruptions: disruptions.slice(0, 3),
    },
  };
}

/** The controller's suspect threshold at the server's default grace (4 s): what a silence on the wire must exceed. */
const SUSPECT_AFTER_MS = 2000;

/**
 * Why each false verdict came (bench/verdict-attribution.ts): the simulated node's own record of
 * its renewals before it says whether it was silent on the wire, and by whose delay.
 */
async function falseVerdictCauses(nodes: SimulatedNodes, falseVerdicts: readonly { node: string; at: number }[], silencedAt: number): Promise<Record<string, unknown>> {
  if (!falseVerdicts.length) return {};
  const indexOf = (name: string): number => Number(name.slice(name.lastIndexOf('-') + 1));
  const indices = [...new Set(falseVerdicts.map((c) => indexOf(c.node)))];
  const { history } = (await nodes.ask(`history ${indices.join(',')}`)) as unknown as { history: Record<string, RenewalRecord[]> };
  const attributions = falseVerdicts.map((c) => ({ node: c.node, sinceSilenceMs: c.at - silencedAt, ...attributeVerdict(c.at, history[String(indexOf(c.node))] ?? [], SUSPECT_AFTER_MS) }));
  return {
    falseVerdictCauses: countCauses(attributions),
    falseVerdictsAfterAConnectionWait: attributions.filter((a) => a.waitedForConnection).length,
    firstAttributions: attributions.slice(0, 5),
  };
}

/** The detection figures of a result, as one line of the printed summary. */
export function describeDetection(r: Record<string, unknown>, detectCeilingS: number): string {
  const detection =
    r.detected === r.silenced
      ? `${String(r.detected)}/${String(r.silenced)} detected, p50 ${String(r.detectionP50S)} s, max ${String(r.detectionMaxS)} s`
      : `only ${String(r.detected)}/${String(r.silenced)} detected within ${detectCeilingS} s`;
  const causes = r.falseVerdictCauses as Record<string, number> | undefined;
  const why = causes ? ` (${Object.entries(causes).map(([cause, n]) => `${cause} ${n}`).join(', ')})` : '';
  return `    ${detection}; false verdicts ${String(r.falseVerdicts)}${why}`;
}
