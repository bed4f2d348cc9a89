import fs from 'node:fs';
import https from 'node:https';

/**
 * Split-brain safety for `atMostOne` pods. The agent records, after each lease renewal the API
 * server confirmed, when that renewal was sent (monotonic clock, shared by every process on the
 * host). A supervisor that sees no confirmed renewal for longer than the fencing timeout must
 * assume the control plane has declared the node lost and started the pod elsewhere, and kills
 * its workload, unless a majority of the cluster is cut off too (then nobody can have started a
 * replacement, and killing would only turn a control-plane outage into a workload outage).
 */

export interface FencingPeer {
  name: string;
  url: string;
}

export interface FencingState {
  nodeName: string;
  /** process.hrtime.bigint() of when the confirmed renewal request was SENT, in ms (CLOCK_MONOTONIC is shared by all processes on the host) */
  confirmedAtMonoMs: number;
  fencingTimeoutMs: number;
  peers: FencingPeer[];
  /** bearer token peers accept */
  peerToken: string;
  caFile: string;
  /** nodes in the cluster, this one included, as last seen by the agent */
  nodeCount: number;
  /**
   * A peer counts as cut off when its own last confirmed renewal is older than this (the agent
   * writes fencing-timeout minus one renew interval; the controller's matching rule is in
   * docs/failover.md). Absent: half the fencing timeout.
   */
  peerCutOffMs?: number;
}

/** What `GET /drover/v1/peer/control-plane` answers. */
export interface PeerControlPlaneAnswer {
  node: string;
  /** ms since that peer's own last confirmed renewal */
  confirmedAgeMs: number;
}

export const PEER_CONTROL_PLANE_PATH = '/drover/v1/peer/control-plane';
export const PEER_QUERY_TIMEOUT_MS = 400;
export function monoNowMs(): number {
  return Number(process.hrtime.bigint() / 1_000_000n);
}

function isFencingState(value: unknown): value is FencingState {
  if (typeof value !== 'object' || value === null) return false;
  const s = value as Record<string, unknown>;
  return (
    typeof s.nodeName === 'string' &&
    typeof s.confirmedAtMonoMs === 'number' &&
    Number.isFinite(s.confirmedAtMonoMs) &&
    typeof s.fencingTimeoutMs === 'number' &&
    s.fencingTimeoutMs > 0 &&
    Array.isArray(s.peers) &&
    s.peers.every((p: unknown) => typeof (p as FencingPeer)?.name === 'string' && typeof (p as FencingPeer)?.url === 'string') &&
    typeof s.peerToken === 'string' &&
    typeof s.caFile === 'string' &&
    typeof s.nodeCount === 'number' &&
    Number.isInteger(s.nodeCount) &&
    s.nodeCount >= 1 &&
    (s.peerCutOffMs === undefined || (typeof s.peerCutOffMs === 'number' && s.peerCutOffMs > 0))
  );
}

/** The fencing file (it holds the peer token: owner-only). */
export function writeFencingState(file: string, state: FencingState): void {
  // Replaced by rename, so a reader never sees half a file; not synced to disk: it is written
  // after every renewal, only processes on this boot read it (the monotonic clock starts again
  // at a reboot), and an fsync on a slow disk would hold up the agent's next renewal.
  const temp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(temp, `${JSON.stringify(state)}\n`, { mode: 0o600 });
  fs.renameSync(temp, file);
}

/** The fencing file's content, or undefined when it is missing, unreadable or malformed. */
export function readFencingState(file: string): FencingState | undefined {
  try {
    const parsed: unknown = JSON.parse(fs.readFileSync(file, 'utf8'));
    return isFencingState(parsed) ? parsed : undefined;
  } catch {
    return undefined;
  }
}

/** The age past which a peer counts as cut off (see FencingState.peerCutOffMs). */
export function peerCutOffMs(state: Pick<FencingState, 'fencingTimeoutMs' | 'peerCutOffMs'> | undefined, fencingTimeoutMs: number): number {
  return state?.peerCutOffMs ?? fencingTimeoutMs / 2;
}

export interface PeerCount {
  /** This node (its own renewal is overdue) plus the peers whose renewals are older than the cut-off. */
  cutOff: number;
  /** Peers on their way there: older than half the cut-off, not yet past it. */
  maybe: number;
}

/**
 * Nodes that say they are cut off from the control plane: this one (its own renewal is overdue
 * when this is asked) plus each peer that answered so. A peer that did not answer is no evidence
 * of an outage; each node counts once however often it appears.
 */
export function countPeers(answers: readonly (PeerControlPlaneAnswer | undefined)[], cutOffMs: number): PeerCount {
  const cut = new Set<string>();
  const maybe = new Set<string>();
  for (const answer of answers) {
    if (!answer || !Number.isFinite(answer.confirmedAgeMs)) continue;
    if (answer.confirmedAgeMs > cutOffMs) cut.add(answer.node);
    else if (answer.confirmedAgeMs > cutOffMs / 2) maybe.add(answer.node);
  }
  return { cutOff: 1 + cut.size, maybe: maybe.size };
}

export type OutageVerdict = 'outage' | 'undecided' | 'partition';

/**
 * Is the missing renewal a control-plane outage (a majority of the cluster cut off, so no other
 * node can have been given this pod) rather than this node being isolated? Outage when more than
 * half of the nodes are cut off. Undecided when they would be, counting the peers on their way
 * there (in a real outage the peers' last renewals are spread over one renew interval, so some
 * cross the cut-off a moment later than this node): the caller asks again shortly, but only within
 * `undecidedUntilMs` of its own silence. Otherwise it is this node that is cut off.
 */
export function judgeOutage(
  selfAgeMs: number,
  answers: readonly (PeerControlPlaneAnswer | undefined)[],
  nodeCount: number,
  cutOffMs: number,
  undecidedUntilMs: number,
): OutageVerdict {
  const { cutOff, maybe } = countPeers(answers, cutOffMs);
  if (cutOff * 2 > nodeCount) return 'outage';
  if ((cutOff + maybe) * 2 > nodeCount && selfAgeMs < undecidedUntilMs) return 'undecided';
  return 'partition';
}

/** The plain majority rule, for callers without an undecided phase. */
export function isControlPlaneOutage(
  selfAgeMs: number,
  answers: readonly (PeerControlPlaneAnswer | undefined)[],
  nodeCount: number,
  fencingTimeoutMs: number,
  cutOffMs = fencingTimeoutMs / 2,
): boolean {
  if (!(selfAgeMs > fencingTimeoutMs / 2)) return false;
  return countPeers(answers, cutOffMs).cutOff * 2 > nodeCount;
}

function parseAnswer(body: string, expectedNode: string): PeerControlPlaneAnswer | undefined {
  try {
    const value = JSON.parse(body) as Partial<PeerControlPlaneAnswer>;
    if (typeof value.node !== 'string' || value.node !== expectedNode) return undefined;
    if (typeof value.confirmedAgeMs !== 'number' || !Number.isFinite(value.confirmedAgeMs) || value.confirmedAgeMs < 0) return undefined;
    return { node: value.node, confirmedAgeMs: value.confirmedAgeMs };
  } catch {
    return undefined;
  }
}

function askPeer(
  peer: FencingPeer,
  token: string,
  ca: string,
  timeoutMs: number,
  agent: https.Agent | false,
): Promise<PeerControlPlaneAnswer | undefined> {
  return new Promise((resolve) => {
    let settled = false;
    const finish = (answer: PeerControlPlaneAnswer | undefined): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(answer);
    };
    let url: URL;
    try {
      url = new URL(PEER_CONTROL_PLANE_PATH, peer.url.endsWith('/') ? peer.url : `${peer.url}/`);
    } catch {
      finish(undefined);
      return;
    }
    const timer = setTimeout(() => {
      request.destroy(new Error(`peer ${peer.name} did not answer within ${timeoutMs} ms`));
      finish(undefined);
    }, timeoutMs);
    const request = https.request(
      url,
      { method: 'GET', ca, headers: { authorization: `Bearer ${token}`, accept: 'application/json' }, agent },
      (response) => {
        const chunks: Buffer[] = [];
        let size = 0;
        response.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > 64 * 1024) request.destroy(new Error('answer too large'));
          else chunks.push(chunk);
        });
        response.on('end', () => {
          finish(response.statusCode === 200 ? parseAnswer(Buffer.concat(chunks).toString('utf8'), peer.name) : undefined);
        });
        response.on('error', () => finish(undefined));
      },
    );
    request.on('error', () => finish(undefined));
    request.end();
  });
}

/**
 * Every peer asked at once; undefined where a peer did not give a valid answer in time. With a
 * keep-alive `agent`, a question can travel on a connection an earlier round opened: under CPU
 * load a fresh TLS handshake costs several times the question itself (docs/failover.md).
 */
export async function queryPeers(
  state: FencingState,
  timeoutMs = PEER_QUERY_TIMEOUT_MS,
  agent: https.Agent | false = false,
): Promise<(PeerControlPlaneAnswer | undefined)[]> {
  if (state.peers.length === 0) return [];
  let ca: string;
  try {
    ca = fs.readFileSync(state.caFile, 'utf8');
  } catch {
    // Without the CA no answer can be trusted: no evidence of an outage.
    return state.peers.map(() => undefined);
  }
  return Promise.all(state.peers.map((peer) => askPeer(peer, state.peerToken, ca, timeoutMs, agent)));
}
