/**
 * Watch delay through the API, for bench/etcd.ts part 2: how long after a write has been answered
 * its event reaches a watcher. A probe node (beside the loaded ones) is patched every
 * `PROBE_INTERVAL_MS` while a load runs; one watch on that node, open for the whole part, notes
 * when each resourceVersion arrives. A server whose watch falls behind its writes serves its watch
 * cache, its controllers and every watcher late, whatever its throughput.
 */
import https from 'node:https';

import { heartbeatPatch, nodeObject, type PatchTarget, send } from './common.js';

const PROBE_INTERVAL_MS = 50;
/** How long a probe write's event may take before it counts as missing. */
const ARRIVAL_TIMEOUT_MS = 10_000;

export class WatchProbe {
  /** resourceVersion → when its event arrived (performance.now()). */
  private readonly arrivals = new Map<string, number>();
  private readonly waiters = new Map<string, () => void>();
  private request: ReturnType<typeof https.request> | undefined;
  private beat = 0;
  private failure: string | undefined;

  private constructor(
    private readonly target: PatchTarget,
    readonly name: string,
  ) {}

  /** Creates the probe node (index `index`, past the loaded ones) and starts watching it. */
  static async start(target: PatchTarget, index: number): Promise<WatchProbe> {
    const created = await send(target, 'POST', '/api/v1/nodes', JSON.stringify(nodeObject(index)));
    if (created.status !== 201) throw new Error(`creating the probe node: ${created.status} ${created.text}`);
    const obj = JSON.parse(created.text) as { metadata: { name: string; resourceVersion: string } };
    const probe = new WatchProbe(target, obj.metadata.name);
    await probe.watch(obj.metadata.resourceVersion);
    return probe;
  }

  private watch(fromVersion: string): Promise<void> {
    const query = `watch=true&resourceVersion=${fromVersion}&fieldSelector=${encodeURIComponent(`metadata.name=${this.name}`)}`;
    return new Promise((resolve, reject) => {
      const req = https.request(
        {
          host: '127.0.0.1',
          port: this.target.port,
          method: 'GET',
          path: `/api/v1/nodes?${query}`,
          agent: false, // its own connection: the load's pool stays the load's
          ca: this.target.ca,
          headers: { Accept: 'application/json', Authorization: `Bearer ${this.target.token}` },
        },
        (res) => {
          if (res.statusCode !== 200) {
            reject(new Error(`probe watch: HTTP ${res.statusCode}`));
            res.resume();
            return;
          }
          resolve();
          let buffered = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            const now = performance.now();
            buffered += chunk;
            for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
              const line = buffered.slice(0, nl);
              buffered = buffered.slice(nl + 1);
              if (!line.trim()) continue;
              const event = JSON.parse(line) as { type: string; object: { metadata?: { resourceVersion?: string } } };
              const version = event.object.metadata?.resourceVersion;
              if (event.type !== 'MODIFIED' || !version) continue;
              this.arrivals.set(version, now);
              this.waiters.get(version)?.();
            }
          });
          res.on('end', () => (this.failure ??= 'the probe watch ended'));
        },
      );
      req.on('error', (error) => {
        this.failure ??= `probe watch: ${String(error)}`;
        reject(error);
      });
      req.end();
      this.request = req;
    });
  }

  /**
   * Patches the probe node every PROBE_INTERVAL_MS for `ms`, then waits for the events: the delay
   * of each, in ms, from its write's answer to its event (0 when the event came first).
   */
  async run(ms: number): Promise<{ delays: number[]; missing: number }> {
    const answered: { version: string; at: number }[] = [];
    const end = performance.now() + ms;
    while (performance.now() < end) {
      const next = performance.now() + PROBE_INTERVAL_MS;
      const res = await send(this.target, 'PATCH', `/api/v1/nodes/${this.name}/status`, heartbeatPatch(++this.beat), 'application/strategic-merge-patch+json');
      const at = performance.now();
      if (res.status === 200) {
        const version = (JSON.parse(res.text) as { metadata: { resourceVersion: string } }).metadata.resourceVersion;
        answered.push({ version, at });
      }
      const wait = next - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    const delays: number[] = [];
    let missing = 0;
    for (const { version, at } of answered) {
      if (!this.arrivals.has(version) && !this.failure) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.max(0, at + ARRIVAL_TIMEOUT_MS - performance.now()));
          this.waiters.set(version, () => {
            clearTimeout(timer);
            resolve();
          });
        });
        this.waiters.delete(version);
      }
      const arrived = this.arrivals.get(version);
      if (arrived === undefined) missing++;
      else delays.push(Math.max(0, arrived - at));
      this.arrivals.delete(version);
    }
    return { delays, missing };
  }

  stop(): void {
    this.request?.destroy();
  }
}
