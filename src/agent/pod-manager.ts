import { followingClient } from '../client/following.js';
import fs from 'node:fs';
import path from 'node:path';
import { getPath, type KubeObject } from '../apiserver/objects.js';
import { ApiError } from '../apiserver/errors.js';
import { type ApiClient, NODES, PODS } from '../client/types.js';
import { EventRecorder } from '../controllers/events.js';
import { Informer } from '../client/informer.js';
import type { Logger } from '../logging/logger.js';
import { writeFileAtomic } from '../security/files.js';
import { type ContainerWaiting, PodConfigurator } from './pod-config.js';
import { podStatusFrom } from './pod-status.js';
import { type NodeNetwork, withServiceEnv } from './network/node-network.js';
import { DEFAULT_GRACE_SECONDS, runSpecFor } from './pod-run-spec.js';
import { EphemeralContainers } from './ephemeral-containers.js';
import { type FencingPeer, monoNowMs, type PeerControlPlaneAnswer, writeFencingState } from './pods/fencing.js';
import {
  killPodProcesses,
  launchSupervisor,
  SpareSupervisor,
  listPodDirs,
  liveSupervisor,
  podDir,
  readRunState,
  releasePodRuntime,
  stopSupervisor,
  writeRunSpec,
} from './pods/launch.js';
import { probeEvents } from './pods/probe-spec.js';
import { readRunSpec, type ContainerRunSpec } from './pods/run-spec.js';
import { RunStateWatch } from './pods/state-watch.js';
import { ImageStore } from '../images/store.js';
import { type EnsureImage } from './pod-config.js';
import { ImagePuller, type ImagePullerOptions } from './image-pull.js';
import { EMPTY_REGISTRIES, type RegistriesConfig } from '../images/registry/registries.js';
import { podRuntimeClassName, PROCESS_HANDLER } from '../node-protocol/runtime-classes.js';
import { RUNC_STATE_DIR, splitRuncContainerId } from './pods/runtime/names.js';
import { runcDelete, runcList } from './pods/runtime/runc.js';
import { cleanupRuncPod } from './pods/runtime/runc-container.js';

/**
 * The agent's half of running pods: it watches the pods bound to its node, starts a supervisor
 * process for each (src/agent/pods), re-attaches to the ones already running after a restart,
 * stops those no longer bound here, finishes graceful deletions, and reports status. It also
 * keeps the fencing file that singleton supervisors judge the control plane by.
 */

export interface PodManagerOptions {
  nodeName: string;
  nodeIp: string;
  /** `<data-dir>/agent`. */
  agentDir: string;
  /** The node CA: supervisors check their peers' serving certificates against it. */
  nodeCaPem: string;
  fencingTimeoutMs: number;
  /** When a peer counts as cut off (config/timings.ts). */
  peerCutOffMs: number;
  /** The agent's current API client (it moves between servers). */
  client: () => ApiClient;
  logger: Logger;
  /** The runtime handlers this node has (Agent.runtimeHandlers.names); default runc and process. */
  runtimeHandlers?: () => readonly string[];
  /** Makes a runc container's image present (pulling per policy); default: the node's store only. */
  ensureImage?: EnsureImage;
  /** This node's registries.yaml (mirrors, credentials, TLS) for the pulls of the default ensureImage. */
  registries?: RegistriesConfig;
  /** Embedded-registry peers for the default ensureImage's pulls (src/agent/registry-peers/). */
  registryPeers?: ImagePullerOptions['peers'];
  /** The node's pod network; absent or undefined: pods use the node's network. */
  network?: () => NodeNetwork | undefined;
}

/** A start that ended because an input it needs (a token) is still coming: its arrival kicks a pass. */
const INPUTS_PENDING = 'inputs-pending' as const;
const RECONCILE_MS = 250;
const LAUNCH_RETRY_MS = 5000;

export class PodManager {
  readonly podsDir: string;
  readonly fencingFile: string;
  /** runc's state directory, `<data-dir>/agent/runc`. */
  readonly runcRoot: string;
  readonly images: ImageStore;
  /** A supervisor started ahead of the next pod (Node's start is most of a pod's start). */
  private readonly spare: SpareSupervisor;
  /** Pulls runc pods' images into `images` (pull policy, pull secrets, back-off). */
  private readonly puller: ImagePuller;
  private readonly caFile: string;
  private readonly client: ApiClient;
  private readonly pods: Informer;
  private readonly nodes: Informer;
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private reconciling = false;
  /** A kick came while a pass ran: run another right after it. */
  private rerun = false;
  /** Supervisors' state.json writes kick a pass (a started container is reported at once). */
  private readonly stateWatch = new RunStateWatch(() => this.kick());
  /** Pods being stopped or started right now (uid → what), so a pass does not do it twice. */
  private readonly inFlight = new Map<string, Promise<unknown>>();
  /** When a pod's supervisor last failed to start: it is tried again only after LAUNCH_RETRY_MS. */
  private readonly launchFailedAt = new Map<string, number>();
  /** A starting pod's ContainerCreating report still in flight: a later start attempt waits for it, never writes beside it. */
  private readonly creatingReports = new Map<string, Promise<void>>();
  /** How many times a pass was asked for (track() tells whether anything happened during a start). */
  private kicks = 0;
  /** Events already recorded per pod uid (see recordTransitions). */
  private readonly announced = new Map<string, Set<string>>();
  private readonly events: EventRecorder;
  /** ConfigMaps, Secrets and volumes: what a pod needs before it starts, and its volumes' updates. */
  private readonly config: PodConfigurator;
  /** `kubectl debug`: ephemeral containers handed to running pods' supervisors. */
  private readonly ephemeral: EphemeralContainers;
  /** Last status written per pod uid, so unchanged status is not written again. */
  private readonly reported = new Map<string, string>();
  /** Monotonic ms when the last renewal the server confirmed was sent; 0 before the first. */
  private confirmedAtMonoMs = 0;
  /** Set while the node drains: nothing new is started. */
  private draining = false;
  private readonly logger: Logger;

  constructor(private readonly options: PodManagerOptions) {
    this.podsDir = path.join(options.agentDir, 'pods');
    this.fencingFile = path.join(options.agentDir, 'fencing.json');
    this.caFile = path.join(options.agentDir, 'node-ca.crt');
    this.runcRoot = path.join(options.agentDir, RUNC_STATE_DIR);
    this.logger = options.logger.child({ component: 'pods' });
    this.images = new ImageStore(path.join(options.agentDir, 'image-store'), { logger: this.logger });
    this.spare = new SpareSupervisor(path.join(options.agentDir, 'spare-supervisor'), (message, details) => this.logger.warn(details, message));
    fs.mkdirSync(this.podsDir, { recursive: true, mode: 0o700 });
    writeFileAtomic(this.caFile, options.nodeCaPem, 0o644);
    this.client = followingClient(options.client);
    this.events = new EventRecorder(this.client, 'drover-agent', options.nodeName, this.logger);
    const kick = (): void => this.kick();
    this.config = new PodConfigurator({
      client: this.client,
      nodeIp: options.nodeIp,
      events: this.events,
      logger: this.logger,
      kick,
      images: this.images,
      ensureImage: options.ensureImage ?? ((pod, container) => this.puller.ensureImage(pod, container)),
      ...(options.runtimeHandlers ? { runtimeHandlers: options.runtimeHandlers } : {}),
    });
    this.ephemeral = new EphemeralContainers({ config: this.config, events: this.events, logger: this.logger });
    this.puller = new ImagePuller({
      store: this.images,
      registries: options.registries ?? EMPTY_REGISTRIES,
      ...(options.registryPeers ? { peers: options.registryPeers } : {}),
      lookupSecret: (namespace, name) => this.config.cache.lookup({ kind: 'Secret', namespace, name }),
      events: this.events,
      logger: this.logger,
    });
    this.pods = new Informer(this.client, PODS, undefined, kick, this.logger, { fieldSelector: `spec.nodeName=${options.nodeName}` });
    this.nodes = new Informer(this.client, NODES, undefined, () => undefined, this.logger);
  }

  async start(): Promise<void> {
    this.running = true;
    const adopted = listPodDirs(this.podsDir).filter((dir) => liveSupervisor(dir) !== undefined);
    if (adopted.length) this.logger.info({ pods: adopted.length }, 're-attached to pods still running from before this agent started');
    void this.reapRuncLeftovers().catch((error: unknown) => this.logger.warn({ err: error }, 'cannot reap leftover runc containers'));
    await Promise.all([this.pods.start(), this.nodes.start()]);
    this.spare.start();
    this.schedule();
  }

  stop(): void {
    this.running = false;
    clearTimeout(this.timer);
    this.spare.close();
    this.stateWatch.close();
    this.pods.stop();
    this.nodes.stop();
    this.config.stop();
    this.puller.close();
  }

  /**
   * runc containers whose pod dir is gone (the agent crashed between removing a pod's containers
   * and its dir, or a dir was removed by hand): killed and deleted, with their cgroups.
   */
  private async reapRuncLeftovers(): Promise<void> {
    if (!fs.existsSync(this.runcRoot)) return;
    const byPod = new Map<string, string[]>();
    for (const state of await runcList(this.runcRoot)) {
      const split = splitRuncContainerId(state.id);
      if (!split || fs.existsSync(path.join(this.podsDir, split.podUid, 'pod.json'))) continue;
      byPod.set(split.podUid, [...(byPod.get(split.podUid) ?? []), split.container]);
    }
    for (const [uid, names] of byPod) {
      this.logger.warn({ uid, containers: names }, 'removing runc containers of a pod that is gone');
      await cleanupRuncPod(path.join(this.podsDir, uid), { uid, runcRoot: this.runcRoot, containers: names.map((name) => ({ name })) as ContainerRunSpec[] }).catch(
        async (error: unknown) => {
          this.logger.warn({ err: error, uid }, 'cannot clean up a leftover pod; deleting its containers');
          for (const name of names) await runcDelete(this.runcRoot, `${uid}_${name}`).catch(() => undefined);
        },
      );
    }
  }

  /** Called by the agent after each renewal the server confirmed, with when it was sent. */
  renewalConfirmed(sentAtMonoMs: number): void {
    this.confirmedAtMonoMs = Math.max(this.confirmedAtMonoMs, sentAtMonoMs);
    try {
      writeFencingState(this.fencingFile, {
        nodeName: this.options.nodeName,
        confirmedAtMonoMs: this.confirmedAtMonoMs,
        fencingTimeoutMs: this.options.fencingTimeoutMs,
        peers: this.peers(),
        peerToken: '',
        caFile: this.caFile,
        nodeCount: Math.max(1, this.nodes.items().length),
        peerCutOffMs: this.options.peerCutOffMs,
      });
    } catch (error) {
      this.logger.warn({ err: error }, 'could not write the fencing file; singletons here will fence if this persists');
    }
  }

  /** What this node tells a peer that asks whether it reaches the control plane. */
  peerAnswer(): PeerControlPlaneAnswer {
    const age = this.confirmedAtMonoMs ? monoNowMs() - this.confirmedAtMonoMs : Number.MAX_SAFE_INTEGER;
    return { node: this.options.nodeName, confirmedAgeMs: age };
  }

  private peers(): FencingPeer[] {
    const peers: FencingPeer[] = [];
    for (const node of this.nodes.items()) {
      if (node.metadata.name === this.options.nodeName) continue;
      const addresses = (getPath(node, ['status', 'addresses']) as { type?: string; address?: string }[] | undefined) ?? [];
      const ip = addresses.find((a) => a.type === 'InternalIP')?.address;
      const port = getPath(node, ['status', 'daemonEndpoints', 'kubeletEndpoint', 'Port']);
      if (!ip || typeof port !== 'number' || !port) continue;
      const host = ip.includes(':') ? `[${ip}]` : ip;
      peers.push({ name: node.metadata.name!, url: `https://${host}:${port}` });
    }
    return peers;
  }

  /** The pod directory serving `namespace/name`, for logs. */
  findPodDir(namespace: string, name: string): string | undefined {
    const pod = this.pods.get(namespace, name);
    if (pod?.metadata.uid) {
      const dir = podDir(this.podsDir, pod.metadata.uid);
      if (fs.existsSync(dir)) return dir;
    }
    for (const dir of listPodDirs(this.podsDir)) {
      try {
        const spec = readRunSpec(dir);
        if (spec.namespace === namespace && spec.name === name) return dir;
      } catch {
        // not a pod dir we can read
      }
    }
    return undefined;
  }

  /** Pods bound here that are not finished, as the informer last saw them. */
  boundPods(): KubeObject[] {
    return this.pods.items();
  }

  private kick(): void {
    this.kicks++;
    if (!this.running) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.pass(), 0);
  }

  private schedule(): void {
    if (!this.running) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.pass(), RECONCILE_MS);
  }

  private pass(): void {
    void this.reconcile()
      .catch((error: unknown) => this.logger.warn({ err: error }, 'pod reconcile pass failed'))
      // A pass that found another running leaves the rerun to that one (no spinning meanwhile).
      .finally(() => (this.rerun && !this.reconciling ? this.kick() : this.schedule()));
  }

  /** One pass: start, stop and report. Exposed for the drain and for tests. */
  async reconcile(): Promise<void> {
    if (this.reconciling) this.rerun = true;
    if (this.reconciling || !this.pods.hasSynced) return;
    this.reconciling = true;
    this.rerun = false;
    try {
      const wanted = new Map<string, KubeObject>();
      for (const pod of this.pods.items()) wanted.set(pod.metadata.uid!, pod);
      this.config.track([...wanted.values()].filter((pod) => !pod.metadata.deletionTimestamp));
      this.stateWatch.keep([...wanted.values()].filter((pod) => !pod.metadata.deletionTimestamp).map((pod) => podDir(this.podsDir, pod.metadata.uid!)));
      for (const [uid, pod] of wanted) {
        if (this.inFlight.has(uid)) continue;
        const dir = podDir(this.podsDir, uid);
        if (pod.metadata.deletionTimestamp) {
          this.track(uid, this.finishDeletion(pod, dir));
          continue;
        }
        if (!fs.existsSync(path.join(dir, 'pod.json'))) {
          const phase = getPath(pod, ['status', 'phase']);
          if (this.draining || phase === 'Succeeded' || phase === 'Failed') continue;
          if (Date.now() - (this.launchFailedAt.get(uid) ?? 0) < LAUNCH_RETRY_MS) continue;
          this.track(uid, this.startPod(pod, dir));
          continue;
        }
        const state = readRunState(dir);
        if (state && !state.finished && liveSupervisor(dir) === undefined) {
          // The supervisor died (killed, or the host rebooted): reap what it left and start over.
          this.logger.warn({ pod: `${pod.metadata.namespace}/${pod.metadata.name}` }, 'pod supervisor is gone; restarting the pod');
          killPodProcesses(dir);
          fs.rmSync(path.join(dir, 'state.json'), { force: true });
          if (!this.draining) this.track(uid, this.startPod(pod, dir));
          continue;
        }
        if (state && !state.finished) {
          if (!this.config.knowsRuntime(uid)) {
            try {
              this.config.rememberRuntime(uid, readRunSpec(dir).runtime ?? PROCESS_HANDLER);
            } catch {
              // no readable run spec: nothing to refresh
            }
          }
          this.config.refresh(pod, dir);
          if (this.ephemeral.pending(pod, dir)) this.track(uid, this.ephemeral.sync(pod, dir));
        }
        await this.report(pod, state);
      }
      // Local pods the API no longer binds here (deleted, force-deleted after a failover).
      for (const dir of listPodDirs(this.podsDir)) {
        const uid = path.basename(dir);
        if (wanted.has(uid) || this.inFlight.has(uid)) continue;
        this.track(uid, this.removeLocal(dir));
      }
    } finally {
      this.reconciling = false;
    }
  }

  /**
   * Run `work` for the pod, one at a time per pod, and make a pass when it ends. Not when a start
   * ended waiting for an input (a token) and nothing kicked meanwhile: the input's arrival kicks,
   * and a pass now would only find it still missing, again and again until it comes.
   */
  private track(uid: string, work: Promise<void | typeof INPUTS_PENDING>): void {
    const kicksBefore = this.kicks;
    this.inFlight.set(uid, work);
    void work
      .then(
        (outcome) => outcome === INPUTS_PENDING && this.kicks === kicksBefore,
        (error: unknown) => {
          this.logger.warn({ err: error, uid }, 'pod action failed; will retry');
          return false;
        },
      )
      .then((quiet) => {
        this.inFlight.delete(uid);
        if (!quiet) this.kick();
      });
  }

  private async startPod(pod: KubeObject, dir: string): Promise<void | typeof INPUTS_PENDING> {
    const name = `${pod.metadata.namespace}/${pod.metadata.name}`;
    // Images may take a while (unpacking): say ContainerCreating meanwhile. Written while the pod
    // is prepared, and done before its supervisor starts, so it never overtakes a later status.
    const uid = pod.metadata.uid!;
    let creating = this.creatingReports.get(uid);
    if (!creating && podRuntimeClassName(pod) !== PROCESS_HANDLER && !getPath(pod, ['status', 'containerStatuses'])) {
      const report = this.report(pod, undefined);
      creating = report;
      this.creatingReports.set(uid, report);
      void report.catch(() => undefined).finally(() => this.creatingReports.get(uid) === report && this.creatingReports.delete(uid));
    }
    creating?.catch(() => undefined);
    // A runc pod's network is attached while its volumes, token and image are prepared: both
    // only need the pod, and neither waits for the other.
    const early = await this.config.resolveRuntime(pod);
    const network = early.ok && early.runtime === 'runc' ? this.options.network?.() : undefined;
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    const wiring = network?.prepare(pod, dir);
    // Both are awaited below; a rejection must not go unobserved while prepare() runs.
    wiring?.catch(() => undefined);
    const prepared = await this.config.prepare(pod, dir);
    if (prepared.kind === 'waiting') {
      // Not created yet: the next pass tries again. An attached network stays, found again then
      // (or released if the pod goes). With nothing to say but "inputs still coming" (a token
      // being fetched), the ContainerCreating report in flight says it, and this attempt ends at
      // once: the pass that the input's arrival starts must not wait for the report.
      if (creating && Object.keys(prepared.waiting).length === 0) return INPUTS_PENDING;
      await creating;
      await wiring?.catch(() => undefined);
      await this.report(pod, undefined, prepared.waiting);
      return;
    }
    await creating;
    const spec = runSpecFor(
      pod,
      this.fencingFile,
      prepared.env,
      prepared.runtime === 'runc' ? { runcRoot: this.runcRoot, containers: prepared.containers ?? new Map() } : undefined,
    );
    if (wiring && prepared.runtime === 'runc') {
      const wired = await wiring;
      if (wired.kind === 'waiting') {
        await this.report(pod, undefined, Object.fromEntries(spec.containers.map((c) => [c.name, { reason: 'ContainerCreating', message: wired.message }])));
        return;
      }
      if (wired.kind === 'attached') {
        spec.podNetwork = wired.spec;
        withServiceEnv(spec, network!.serviceEnv(pod), prepared.env);
      }
    }
    writeRunSpec(dir, spec);
    let pid: number;
    try {
      pid = await launchSupervisor(dir, undefined, this.spare);
    } catch (error) {
      // Leave no pod.json behind: without it the next pass starts the pod again (after the
      // in-flight marker is gone), instead of waiting forever for a state that never comes.
      fs.rmSync(path.join(dir, 'pod.json'), { force: true });
      this.launchFailedAt.set(spec.uid, Date.now());
      throw error;
    }
    this.logger.info({ pod: name, uid: spec.uid, supervisor: pid, atMostOne: spec.atMostOne }, 'started pod');
    await this.report(pod, readRunState(dir));
  }

  private async finishDeletion(pod: KubeObject, dir: string): Promise<void> {
    const name = `${pod.metadata.namespace}/${pod.metadata.name}`;
    const grace = Number(pod.metadata.deletionGracePeriodSeconds ?? getPath(pod, ['spec', 'terminationGracePeriodSeconds']) ?? DEFAULT_GRACE_SECONDS);
    if (fs.existsSync(dir)) {
      void this.events.record(
        { kind: 'Pod', name: pod.metadata.name!, namespace: pod.metadata.namespace ?? 'default', uid: pod.metadata.uid! },
        'Normal',
        'Killing',
        `Stopping pod ${name} (grace period ${grace}s)`,
      );
      await stopSupervisor(dir, grace * 1000);
      const state = readRunState(dir);
      if (state) await this.report(pod, state).catch(() => undefined);
    }
    // As kubelet: the object goes once what the pod held on the node is reclaimed (containers,
    // mounts, cgroups). What cannot be reclaimed now is retried when the dir is found unbound.
    let released = true;
    try {
      await this.options.network?.()?.release(pod.metadata.uid!, dir);
      await releasePodRuntime(dir);
    } catch (error) {
      released = false;
      this.logger.warn({ err: error, pod: name }, 'cannot release everything the pod held on the node; will retry');
    }
    try {
      await this.client.delete(PODS, pod.metadata.namespace, pod.metadata.name!, {
        gracePeriodSeconds: 0,
        preconditions: { uid: pod.metadata.uid! },
      });
    } catch (error) {
      if (!(error instanceof ApiError && (error.code === 404 || error.code === 409))) throw error;
    }
    if (released) fs.rmSync(dir, { recursive: true, force: true });
    this.reported.delete(pod.metadata.uid!);
    this.announced.delete(pod.metadata.uid!);
    this.launchFailedAt.delete(pod.metadata.uid!);
    this.config.forget(pod.metadata.uid!);
    this.ephemeral.forget(pod.metadata.uid!);
    this.puller.forget(pod.metadata.uid!);
    this.logger.info({ pod: name, graceSeconds: grace }, 'pod stopped and deleted');
  }

  private async removeLocal(dir: string): Promise<void> {
    let grace = DEFAULT_GRACE_SECONDS;
    let name = path.basename(dir);
    try {
      const spec = readRunSpec(dir);
      grace = spec.terminationGracePeriodSeconds;
      name = `${spec.namespace}/${spec.name}`;
    } catch {
      // unreadable spec: stop with the default grace
    }
    await stopSupervisor(dir, grace * 1000);
    await this.options.network?.()?.release(path.basename(dir), dir);
    await releasePodRuntime(dir);
    fs.rmSync(dir, { recursive: true, force: true });
    this.reported.delete(path.basename(dir));
    this.announced.delete(path.basename(dir));
    this.puller.forget(path.basename(dir));
    this.logger.info({ pod: name }, 'stopped a pod that is no longer bound to this node');
  }

  private async report(pod: KubeObject, state: ReturnType<typeof readRunState>, waiting?: Record<string, ContainerWaiting>): Promise<void> {
    const ephemeralWaiting = this.ephemeral.waitingFor(pod.metadata.uid!);
    const status = podStatusFrom({
      pod,
      state,
      nodeIp: this.options.nodeIp,
      podIp: this.options.network?.()?.podIp(pod.metadata.uid!),
      now: new Date().toISOString(),
      ...(waiting ? { waiting } : {}),
      ...(ephemeralWaiting ? { ephemeralWaiting } : {}),
    });
    const text = JSON.stringify(status);
    const uid = pod.metadata.uid!;
    // Before the comparison: a probe failing again changes no status, yet its event is due.
    this.recordTransitions(pod, state);
    if (this.reported.get(uid) === text) return;
    try {
      // The uid makes it a precondition: a pod recreated under the same name (a singleton's
      // replacement) must never receive this incarnation's status.
      await this.client.patch(PODS, pod.metadata.namespace, pod.metadata.name!, 'merge', { metadata: { uid }, status }, 'status');
      this.reported.set(uid, text);
    } catch (error) {
      if (error instanceof ApiError && (error.code === 404 || error.code === 409 || error.code === 422)) return;
      throw error;
    }
  }

  /**
   * Events about what happened to a pod's containers, as kubelet words them, so `kubectl describe
   * pod` tells the story: started (with the process id), back-off, fenced. Each is recorded once.
   */
  private recordTransitions(pod: KubeObject, state: ReturnType<typeof readRunState>): void {
    if (!state) return;
    const uid = pod.metadata.uid!;
    const seen = this.announced.get(uid) ?? new Set<string>();
    this.announced.set(uid, seen);
    const involved = { kind: 'Pod', name: pod.metadata.name!, namespace: pod.metadata.namespace ?? 'default', uid };
    const once = (key: string, type: 'Normal' | 'Warning', reason: string, message: string): void => {
      if (seen.has(key)) return;
      seen.add(key);
      void this.events.record(involved, type, reason, message);
    };
    for (const c of state.containers) {
      // A short-lived container may be running for less than one status pass: its start is also
      // seen in its terminated state, or in the last state during the back-off that follows.
      for (const seen of [c.state, c.lastState]) {
        if (!seen) continue;
        if ('running' in seen) {
          once(`started/${c.name}/${seen.running.startedAt}`, 'Normal', 'Started', `Started container ${c.name} (process ${seen.running.pid})`);
        } else if ('terminated' in seen) {
          once(`started/${c.name}/${seen.terminated.startedAt}`, 'Normal', 'Started', `Started container ${c.name}`);
        }
      }
      if ('waiting' in c.state && c.state.waiting.reason === 'CrashLoopBackOff') {
        once(`backoff/${c.name}/${c.restartCount}`, 'Warning', 'BackOff', `Back-off restarting failed container ${c.name} in pod ${involved.name}`);
      }
      for (const event of probeEvents(c)) once(event.key, event.type, event.reason, event.message);
      if ('waiting' in c.state && c.state.waiting.reason === 'CreateContainerError') {
        once(`failed/${c.name}/${c.restartCount}`, 'Warning', 'Failed', `Error: ${c.state.waiting.message ?? 'cannot start the container'}`);
      }
    }
    if (state.finishReason === 'Fenced') {
      once('fenced', 'Warning', 'Fenced', `Stopped on node ${this.options.nodeName}: ${state.fenced?.message ?? 'no confirmed lease renewal within fencing-timeout'}`);
    }
  }

  /** Stop every local pod (a planned shutdown); resolves when all have stopped or the limit passed. */
  async stopAll(limitMs: number): Promise<void> {
    this.draining = true;
    const dirs = listPodDirs(this.podsDir).filter((dir) => liveSupervisor(dir) !== undefined);
    const stops = dirs.map(async (dir) => {
      let grace = DEFAULT_GRACE_SECONDS;
      try {
        grace = readRunSpec(dir).terminationGracePeriodSeconds;
      } catch {
        // default grace
      }
      await stopSupervisor(dir, Math.min(grace * 1000, limitMs));
    });
    await Promise.race([Promise.all(stops), new Promise((resolve) => setTimeout(resolve, limitMs + 2500).unref())]);
  }

  /** No new pods start from here on (the node is draining). */
  beginDrain(): void {
    this.draining = true;
  }

  /** Wait until every pod bound here (but those `staying`) is gone from the API, or the deadline. */
  async waitUntilEmpty(deadline: number, staying: (pod: KubeObject) => boolean = () => false): Promise<boolean> {
    while (Date.now() < deadline) {
      if (this.pods.items().every(staying) && this.inFlight.size === 0) return true;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return false;
  }
}
