import fs from 'node:fs';
import type { KubeObject } from '../../src/apiserver/objects.js';
import { HttpClient } from '../../src/client/http.js';
import { NODES, PODS, type WatchEventType } from '../../src/client/types.js';
import { Informer } from '../../src/client/informer.js';
import { createLogger } from '../../src/logging/logger.js';
import { cleanup, type ServerProcess, startServer } from './server.js';

/**
 * Controller tests without agents: a real `drover server` with hand-made Node objects, and a fake
 * kubelet in the test process that plays the agents of those nodes, so the scheduler and the
 * workload controllers run for real while pods stay plain API objects.
 */

interface PodStatus {
  phase?: string;
  conditions?: { type: string; status: string }[];
}

/** Running with a True Ready condition: what the fake kubelet makes of every pod it owns. */
export function isRunningAndReady(pod: KubeObject): boolean {
  const status = (pod.status ?? {}) as PodStatus;
  return status.phase === 'Running' && (status.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

export interface FakeKubeletOptions {
  /** Only pods bound to these nodes are played; the rest belong to nobody. */
  nodeNames: readonly string[];
  namespace: string;
}

/**
 * Plays the agents of hand-made nodes: pods bound to them become Running and Ready, and graceful
 * deletions finish with a grace-0 delete (preconditioned on the uid, so a recreated pod of the
 * same name is never touched). Tests can hold a pod in Terminating (`held`, `release`), keep new
 * pods unready (`holdReady`, `poke`), and read the order of what happened (`log`).
 */
export class FakeKubelet {
  /** Pod names whose graceful deletion is not finished until released. */
  readonly held = new Set<string>();
  /** Order of things seen, for ordering assertions: `added:`, `ready:`, `terminating:`, `gone:` + name. */
  readonly log: string[] = [];
  /** While set, new pods stay unready: a replacement cannot, say, hand a disruption budget back. */
  holdReady = false;
  private readonly nodeNames: readonly string[];
  private readonly namespace: string;
  private readonly informer: Informer;
  /** Pod uids with a write in flight: one at a time per pod, and a fresh look when it lands. */
  private readonly busy = new Set<string>();
  private readonly seenTerminating = new Set<string>();
  private readonly seenReady = new Set<string>();

  constructor(
    private readonly client: HttpClient,
    options: FakeKubeletOptions,
  ) {
    this.nodeNames = options.nodeNames;
    this.namespace = options.namespace;
    this.informer = new Informer(client, PODS, this.namespace, (type, pod) => this.onPod(type, pod), createLogger('silent'));
  }

  start(): Promise<void> {
    return this.informer.start();
  }

  stop(): void {
    this.informer.stop();
  }

  /** Let a held pod's graceful deletion finish. */
  release(name: string): void {
    this.held.delete(name);
    const pod = this.informer.get(this.namespace, name);
    if (pod) this.onPod('MODIFIED', pod);
  }

  /** Look at every pod again (after holdReady is cleared). */
  poke(): void {
    for (const pod of this.informer.items()) this.onPod('MODIFIED', pod);
  }

  private onPod(type: WatchEventType, pod: KubeObject): void {
    const name = pod.metadata.name!;
    const uid = pod.metadata.uid!;
    if (type === 'ADDED') this.log.push(`added:${name}`);
    if (type === 'DELETED') {
      this.log.push(`gone:${name}`);
      return;
    }
    // Logged from the watch, not after the write returns: the one stream orders it before any pod a
    // controller creates because of it (the write's reply can come after such a pod's ADDED).
    if (isRunningAndReady(pod) && !this.seenReady.has(uid)) {
      this.seenReady.add(uid);
      this.log.push(`ready:${name}`);
    }
    const node = (pod.spec as { nodeName?: string } | undefined)?.nodeName;
    if (!node || !this.nodeNames.includes(node) || this.busy.has(uid)) return;
    if (pod.metadata.deletionTimestamp) {
      if (!this.seenTerminating.has(uid)) {
        this.seenTerminating.add(uid);
        this.log.push(`terminating:${name}`);
      }
      if (this.held.has(name)) return;
      this.run(uid, () => this.client.delete(PODS, this.namespace, name, { gracePeriodSeconds: 0, preconditions: { uid } }));
    } else if (!isRunningAndReady(pod) && !this.holdReady) {
      this.run(uid, async () => {
        await this.client.patch(PODS, this.namespace, name, 'merge', { status: runningStatus(pod) }, 'status');
      });
    }
  }

  private run(uid: string, action: () => Promise<unknown>): void {
    this.busy.add(uid);
    void action()
      .catch(() => undefined)
      .finally(() => {
        this.busy.delete(uid);
        // Look again: the pod may have changed while the write was in flight.
        const current = this.informer.items().find((p) => p.metadata.uid === uid);
        if (current) {
          setTimeout(() => this.onPod('MODIFIED', this.informer.get(this.namespace, current.metadata.name!) ?? current), 20);
        }
      });
  }
}

/** The status an agent reports once every container of `pod` has started and is ready. */
function runningStatus(pod: KubeObject): Record<string, unknown> {
  const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
  const containers = ((pod.spec as { containers?: { name: string }[] } | undefined)?.containers ?? []).map((c) => ({
    name: c.name,
    ready: true,
    started: true,
    restartCount: 0,
    image: '',
    imageID: '',
    state: { running: { startedAt: now } },
  }));
  return {
    phase: 'Running',
    startTime: now,
    conditions: [
      { type: 'PodScheduled', status: 'True', lastTransitionTime: now },
      { type: 'Initialized', status: 'True', lastTransitionTime: now },
      { type: 'ContainersReady', status: 'True', lastTransitionTime: now },
      { type: 'Ready', status: 'True', lastTransitionTime: now },
    ],
    containerStatuses: containers,
  };
}

export interface HandMadeClusterOptions {
  nodeNames: readonly string[];
  /** The namespace the fake kubelet watches; 'default' unless told. */
  namespace?: string;
  /** With DROVER_TEST_LOGS set, stop() saves the server's output as `<logName>-server.log` there. */
  logName: string;
}

export interface HandMadeCluster {
  server: ServerProcess;
  /** Authenticated as the cluster admin. */
  client: HttpClient;
  kubelet: FakeKubelet;
  /** Stop the kubelet, the client and the server, then remove its data dir and `extraDirs`. */
  stop(...extraDirs: string[]): Promise<void>;
}

/**
 * A server (started with handMadeNodes, so the node lifecycle controller leaves the nodes alone)
 * with a Ready Node object for each name and a started fake kubelet playing them. If any step
 * fails, what was already started is stopped before the error is thrown.
 */
export async function startHandMadeCluster(options: HandMadeClusterOptions): Promise<HandMadeCluster> {
  const namespace = options.namespace ?? 'default';
  const server = await startServer({ handMadeNodes: true });
  const client = new HttpClient({ server: server.url, caPem: server.caPem, token: server.token });
  const kubelet = new FakeKubelet(client, { nodeNames: options.nodeNames, namespace });
  const stop = async (...extraDirs: string[]): Promise<void> => {
    kubelet.stop();
    client.close();
    const logDir = process.env.DROVER_TEST_LOGS;
    if (logDir) {
      fs.mkdirSync(logDir, { recursive: true });
      fs.writeFileSync(`${logDir}/${options.logName}-server.log`, server.output());
    }
    await server.stop();
    await cleanup(server.dataDir, ...extraDirs);
  };
  try {
    for (const name of options.nodeNames) {
      await client.create(NODES, undefined, {
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name, labels: { 'kubernetes.io/hostname': name, 'drover.io/state': 'Ready' } },
        status: { conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'ready' }] },
      });
    }
    await kubelet.start();
  } catch (error) {
    await stop();
    throw error;
  }
  return { server, client, kubelet, stop };
}
