import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { callDeadline, type EtcdAccess, type MemberGrant, temporaryRefusal, withEtcdClient } from '../cluster/etcd-membership.js';
import { type ManagedEtcd, ManagedEtcdError } from '../cluster/managed-etcd.js';
import type { Logger } from '../logging/logger.js';
import { writeFileAtomic } from '../security/files.js';

/**
 * The joining server's side of adding a managed etcd member: ask a server to add this member as a
 * learner (waiting, with back-off, while etcd refuses), start the member, then have etcd promote
 * it once it has caught up. Whatever happens in between, the cluster's quorum never depends on
 * this member: a learner does not vote.
 */

export function call(
  server: URL,
  ca: string,
  secret: string,
  method: string,
  route: string,
  body?: unknown,
): Promise<{ status: number; body: string; retryAfter: string | undefined }> {
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = https.request(
      {
        host: server.hostname.replace(/^\[|\]$/g, ''),
        port: server.port || 443,
        method,
        path: route,
        ca,
        timeout: 30_000,
        headers: {
          Authorization: `Bearer ${secret}`,
          ...(payload ? { 'Content-Type': 'application/json', 'Content-Length': String(payload.length) } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            body: Buffer.concat(chunks).toString('utf8'),
            retryAfter: typeof res.headers['retry-after'] === 'string' ? res.headers['retry-after'] : undefined,
          }),
        );
      },
    );
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    if (payload) req.write(payload);
    req.end();
  });
}

/** The message of a Kubernetes Status body, or the body itself. */
export function statusMessage(body: string): string {
  try {
    const parsed = JSON.parse(body) as { message?: unknown };
    if (typeof parsed.message === 'string') return parsed.message;
  } catch {
    // not JSON
  }
  return body.trim();
}

/**
 * Waiting with back-off for something another party must do first. The first wait is logged
 * (what is awaited and why); later waits for another reason only at debug level, so a server that
 * waits says so once instead of on every retry.
 */
export class RetryWait {
  retries = 0;
  private readonly started = Date.now();
  private logged = false;
  private lastReason = '';

  constructor(
    private readonly logger: Logger,
    private readonly what: string,
    private readonly backoff = { initialMs: 250, maxMs: 5000 },
  ) {}

  get waitedMs(): number {
    return Date.now() - this.started;
  }

  async retry(reason: string, retryAfterSeconds?: number): Promise<void> {
    if (!this.logged) {
      this.logged = true;
      this.logger.info({ reason }, `waiting for ${this.what}: ${reason} (retrying with back-off)`);
    } else if (reason !== this.lastReason) {
      this.logger.debug({ reason, retries: this.retries }, `still waiting for ${this.what}`);
    }
    this.lastReason = reason;
    const base = Math.min(this.backoff.maxMs, this.backoff.initialMs * 2 ** this.retries);
    // Jitter keeps servers started together from asking in lock step.
    const jittered = base * (0.75 + Math.random() * 0.5);
    const floor = Math.min(30_000, (retryAfterSeconds ?? 0) * 1000);
    this.retries++;
    await new Promise((resolve) => setTimeout(resolve, Math.max(floor, jittered)));
  }
}

/** A join in progress, kept in the data dir until the member is a voting member. */
export interface PendingJoin extends MemberGrant {
  /** The server that added the member (its origin): asked again if the learner was removed. */
  server: string;
}

function pendingFile(dataDir: string): string {
  return path.join(dataDir, 'server', 'etcd-join.json');
}

export function readPendingJoin(dataDir: string): PendingJoin | undefined {
  const file = pendingFile(dataDir);
  if (!fs.existsSync(file)) return undefined;
  return JSON.parse(fs.readFileSync(file, 'utf8')) as PendingJoin;
}

export function writePendingJoin(dataDir: string, pending: PendingJoin): void {
  writeFileAtomic(pendingFile(dataDir), `${JSON.stringify(pending)}\n`, 0o600);
}

export function clearPendingJoin(dataDir: string): void {
  fs.rmSync(pendingFile(dataDir), { force: true });
}

export interface JoinTarget {
  server: URL;
  caPem: string;
  secret: string;
}

/**
 * POST /drover/v1/etcd/members until the server adds this member. 503 (etcd refuses a
 * reconfiguration for now) and an unreachable server are waited out; any other answer is final.
 */
export async function requestMembership(
  target: JoinTarget,
  name: string,
  peerUrl: string,
  logger: Logger,
): Promise<{ grant: MemberGrant; refusals: number; retries: number; waitedMs: number }> {
  // Capped at 2 s: joiners queue for etcd's single learner place, and a longer nap than that
  // mostly leaves the place empty after the learner before it is promoted.
  const wait = new RetryWait(logger, `${target.server.origin} to add this server as an etcd member`, { initialMs: 250, maxMs: 2000 });
  let refusals = 0;
  for (;;) {
    let answer: Awaited<ReturnType<typeof call>>;
    try {
      answer = await call(target.server, target.caPem, target.secret, 'POST', '/drover/v1/etcd/members', { name, peerURL: peerUrl });
    } catch (error) {
      await wait.retry(`${target.server.origin} does not answer (${error instanceof Error ? error.message : String(error)})`);
      continue;
    }
    if (answer.status === 200) {
      return { grant: JSON.parse(answer.body) as MemberGrant, refusals, retries: wait.retries, waitedMs: wait.waitedMs };
    }
    if (answer.status === 503 || answer.status === 429) {
      refusals++;
      const seconds = Number(answer.retryAfter);
      await wait.retry(statusMessage(answer.body), Number.isFinite(seconds) && seconds >= 0 ? seconds : undefined);
      continue;
    }
    // Not a configuration problem: the cluster could not take a member (exit 1, try again).
    throw new Error(`${target.server.origin} could not add this server as an etcd member (HTTP ${answer.status}): ${statusMessage(answer.body)}`);
  }
}

/** Whether the cluster (asked through `access`) no longer lists the member. Undefined: cannot tell. */
export async function memberGone(access: EtcdAccess, memberId: string): Promise<boolean | undefined> {
  try {
    const { members } = await withEtcdClient(access, (client) => client.cluster.memberList({}, callDeadline()));
    return !members.some((m) => m.ID === memberId);
  } catch {
    return undefined;
  }
}

/**
 * Have etcd promote this server's learner once it is in sync with the leader. Resolves
 * `removed` when the learner was removed meanwhile (the caller joins again).
 */
export async function awaitPromotion(etcd: ManagedEtcd, pending: PendingJoin, logger: Logger): Promise<'promoted' | 'removed'> {
  const access: EtcdAccess = { endpoints: pending.endpoints, ...etcd.clientTls };
  const wait = new RetryWait(logger, 'etcd to promote this server’s member from learner to voting member', { initialMs: 250, maxMs: 2000 });
  for (;;) {
    if (etcd.hasExited()) {
      if (await memberGone(access, pending.memberId)) return 'removed';
      throw new ManagedEtcdError('the etcd member exited while it was a learner; see server/etcd.log');
    }
    try {
      await withEtcdClient(access, (client) => client.cluster.memberPromote({ ID: pending.memberId }, callDeadline()));
      break;
    } catch (error) {
      const text = error instanceof Error ? error.message : String(error);
      if (/in sync with leader/i.test(text)) {
        await wait.retry('its member is still catching up with the leader (etcd promotes only a learner in sync with it)', 0);
      } else if (/can only promote a learner member/i.test(text)) {
        break; // already a voting member (promoted by another server, or an earlier attempt went through)
      } else if (/member not found/i.test(text)) {
        return 'removed';
      } else {
        const refusal = temporaryRefusal(error);
        await wait.retry(refusal?.reason ?? text, refusal?.retryAfterSeconds);
      }
    }
  }
  // The local member knows it votes once it has applied the change; only then does it serve clients.
  const local: EtcdAccess = { endpoints: [etcd.endpoint], ...etcd.clientTls };
  const deadline = Date.now() + 30_000;
  for (;;) {
    const status = await withEtcdClient(local, (client) => client.maintenance.status(callDeadline(2000))).catch(() => undefined);
    if (status && !status.isLearner) break;
    if (etcd.hasExited()) throw new ManagedEtcdError('the etcd member exited right after its promotion; see server/etcd.log');
    if (Date.now() > deadline) throw new ManagedEtcdError('the etcd member still reports itself a learner 30 s after its promotion; see server/etcd.log');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  logger.info({ retries: wait.retries, waitedMs: wait.waitedMs }, 'promoted to a voting etcd member');
  return 'promoted';
}
