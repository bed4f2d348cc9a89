import type { Etcd3, IMember } from 'etcd3';
import type { Logger } from '../logging/logger.js';
import { healthy } from './managed-etcd.js';

/**
 * Membership of the managed etcd cluster, as the server a joiner asks sees it. Etcd, not Drover,
 * decides who is a member; this module only asks, and turns etcd's refusals into answers a
 * joining server can act on.
 *
 * A joining server's member is added as a *learner*: it receives the log but does not vote, so
 * it does not count toward the quorum until it is promoted (by the joiner, once its member has
 * caught up). A join that fails halfway therefore never costs the cluster its quorum. etcd 3.4
 * accepts one learner at a time and refuses reconfigurations for a few seconds after a member
 * starts (its strict reconfiguration check): both are *temporary* refusals, answered with
 * MembershipBusy (HTTP 503 with Retry-After), and the joiner retries with back-off.
 *
 * A learner that has stood in the way of joins for longer than the learner timeout and whose
 * member does not run (never started, or no longer answering) is removed: its server died while
 * joining. One whose member runs is promoted instead, if etcd finds it in sync.
 */

/** How a server reaches the etcd members with the member API (TLS client credentials). */
export interface EtcdAccess {
  endpoints: string[];
  ca: string;
  cert: string;
  key: string;
}

/** etcd refused for now; the same request may succeed after `retryAfterSeconds`. */
export class MembershipBusy extends Error {
  override name = 'MembershipBusy';
  constructor(
    message: string,
    readonly retryAfterSeconds: number,
  ) {
    super(message);
  }
}

/** What a joining server needs to start its member. */
export interface MemberGrant {
  /** `--initial-cluster`: every member, this one included. */
  initialCluster: string;
  /** The member's ID (decimal, as etcd's JSON API spells uint64). */
  memberId: string;
  /** Whether the member must be promoted once it runs (false: it is already a voting member). */
  learner: boolean;
  /** Client URLs of the voting members, for the promotion. */
  endpoints: string[];
}

export const DEFAULT_LEARNER_TIMEOUT_MS = 120_000;

/** A fresh client per operation: the library stops calling a host that failed three times. */
export async function withEtcdClient<T>(access: EtcdAccess, run: (client: Etcd3) => Promise<T>): Promise<T> {
  const { Etcd3 } = await import('etcd3');
  const client = new Etcd3({
    hosts: access.endpoints,
    dialTimeout: 3000,
    credentials: {
      rootCertificate: Buffer.from(access.ca),
      certChain: Buffer.from(access.cert),
      privateKey: Buffer.from(access.key),
    },
  });
  try {
    return await run(client);
  } finally {
    client.close();
  }
}

/** A deadline for one member API call, so an unreachable endpoint cannot hold a request. */
export function callDeadline(ms = 5000): { deadline: Date } {
  return { deadline: new Date(Date.now() + ms) };
}

/**
 * etcd's temporary refusals of a reconfiguration, with how long to wait before asking again.
 * Anything else is a real error.
 */
export function temporaryRefusal(error: unknown): { reason: string; retryAfterSeconds: number } | undefined {
  const text = String(error instanceof Error ? error.message : error);
  if (/unhealthy cluster/i.test(text)) {
    return {
      reason: 'etcd refuses a reconfiguration until the member asked has been connected to every voting member for 5 s (unhealthy cluster)',
      retryAfterSeconds: 1,
    };
  }
  if (/not enough started members/i.test(text)) {
    return { reason: 'etcd refuses a reconfiguration while too few members are started (not enough started members)', retryAfterSeconds: 2 };
  }
  if (/too many learner members/i.test(text)) {
    return { reason: 'etcd takes one learner at a time, and another joining member is a learner', retryAfterSeconds: 1 };
  }
  if (/leader changed|no leader|timed out|request timed out|too many requests|deadline exceeded|unavailable|ECONNREFUSED/i.test(text)) {
    return { reason: `etcd cannot take a reconfiguration now: ${text}`, retryAfterSeconds: 2 };
  }
  return undefined;
}

function describe(member: IMember): string {
  return member.name ? `${member.name} (${member.peerURLs.join(',')})` : `at ${member.peerURLs.join(',')} (not started yet)`;
}

function initialClusterOf(members: IMember[], self: { id: string; name: string }): string {
  // An unstarted member has no name yet; etcd matches the list by peer URL, so any unique name does.
  return members.map((m) => `${m.ID === self.id ? self.name : m.name || `unstarted-${m.ID}`}=${m.peerURLs[0]}`).join(',');
}

function grantOf(members: IMember[], member: IMember, name: string): MemberGrant {
  return {
    initialCluster: initialClusterOf(members, { id: member.ID, name }),
    memberId: member.ID,
    learner: member.isLearner,
    endpoints: members.filter((m) => !m.isLearner && m.clientURLs.length).flatMap((m) => m.clientURLs),
  };
}

export interface EtcdMembership {
  /** Add `peerUrl` as a learner (or find it already added). Throws MembershipBusy for temporary refusals. */
  add(name: string, peerUrl: string): Promise<MemberGrant>;
  /** Client URLs of the voting members. */
  clientUrls(): Promise<string[]>;
  /** Remove every member named `<nodeName>-<8 hex>`; resolves with the names removed. */
  removeByNode(nodeName: string): Promise<string[]>;
}

export function etcdMembership(
  access: EtcdAccess,
  options: { logger: Logger; learnerTimeoutMs?: number; now?: () => number },
): EtcdMembership {
  const learnerTimeoutMs = options.learnerTimeoutMs ?? DEFAULT_LEARNER_TIMEOUT_MS;
  const now = options.now ?? (() => performance.now());
  /**
   * When each learner first stood in the way of a join here. The clock starts then, not when it
   * was added (etcd records no time of addition): its own server gets the whole timeout to finish
   * from the moment another server needs the place.
   */
  const blockingSince = new Map<string, number>();

  /** The learner in the way: removed (its member does not run) or promoted (it runs) after the timeout. */
  const settle = async (client: Etcd3, learner: IMember): Promise<{ cleared: boolean; reason: string; retryAfterSeconds: number }> => {
    let since = blockingSince.get(learner.ID);
    if (since === undefined) blockingSince.set(learner.ID, (since = now()));
    const blockedMs = now() - since;
    const leftS = Math.max(1, Math.ceil((learnerTimeoutMs - blockedMs) / 1000));
    if (blockedMs < learnerTimeoutMs) {
      return {
        cleared: false,
        reason: `etcd takes one learner at a time: waiting for the learner ${describe(learner)} to be promoted (if its member does not run ${leftS} s from now, it is removed)`,
        retryAfterSeconds: 1,
      };
    }
    const running =
      learner.clientURLs.length > 0 &&
      (await Promise.all(learner.clientURLs.map((u) => healthy(u, access)))).some(Boolean);
    if (!running) {
      await client.cluster.memberRemove({ ID: learner.ID }, callDeadline());
      blockingSince.delete(learner.ID);
      options.logger.warn(
        { member: learner.name || undefined, peerURLs: learner.peerURLs, blockedSeconds: Math.round(blockedMs / 1000) },
        'removed an etcd learner that was not promoted in time and whose member does not run (its server died while joining)',
      );
      return { cleared: true, reason: '', retryAfterSeconds: 0 };
    }
    try {
      await client.cluster.memberPromote({ ID: learner.ID }, callDeadline());
      blockingSince.delete(learner.ID);
      options.logger.warn({ member: learner.name, blockedSeconds: Math.round(blockedMs / 1000) }, 'promoted an etcd learner its own server had not promoted in time');
      return { cleared: true, reason: '', retryAfterSeconds: 0 };
    } catch (error) {
      return {
        cleared: false,
        reason: `etcd takes one learner at a time: the learner ${describe(learner)} runs but is not promoted yet (${String(error instanceof Error ? error.message : error)})`,
        retryAfterSeconds: 2,
      };
    }
  };

  const addOnce = async (client: Etcd3, name: string, peerUrl: string): Promise<MemberGrant> => {
    const { members } = await client.cluster.memberList({}, callDeadline());
    for (const id of blockingSince.keys()) if (!members.some((m) => m.ID === id && m.isLearner)) blockingSince.delete(id);
    const existing = members.find((m) => m.peerURLs.includes(peerUrl));
    // A joiner asking again (its answer was lost, or it restarted before starting its member).
    if (existing) return grantOf(members, existing, name);
    const learner = members.find((m) => m.isLearner);
    if (learner) {
      const settled = await settle(client, learner);
      if (!settled.cleared) throw new MembershipBusy(settled.reason, settled.retryAfterSeconds);
    }
    try {
      const added = await client.cluster.memberAdd({ peerURLs: [peerUrl], isLearner: true }, callDeadline());
      options.logger.info({ member: name, peerURL: peerUrl, id: added.member.ID }, 'added an etcd learner for a joining server');
      return grantOf(added.members, added.member, name);
    } catch (error) {
      const refusal = temporaryRefusal(error);
      if (refusal) throw new MembershipBusy(refusal.reason, refusal.retryAfterSeconds);
      throw error;
    }
  };

  return {
    // Voting members only: a learner serves no client requests.
    clientUrls: () =>
      withEtcdClient(access, async (client) =>
        (await client.cluster.memberList({}, callDeadline())).members.filter((m) => !m.isLearner).flatMap((m) => m.clientURLs),
      ),
    add: (name, peerUrl) =>
      withEtcdClient(access, async (client) => {
        try {
          return await addOnce(client, name, peerUrl);
        } catch (error) {
          if (error instanceof MembershipBusy) throw error;
          const refusal = temporaryRefusal(error);
          if (refusal) throw new MembershipBusy(refusal.reason, refusal.retryAfterSeconds);
          throw error;
        }
      }),
    // Member names are `<node name>-<8 hex of the server id>`.
    removeByNode: (nodeName) =>
      withEtcdClient(access, async (client) => {
        const { members } = await client.cluster.memberList({});
        const doomed = members.filter(
          (m) => m.name.startsWith(`${nodeName}-`) && /^[0-9a-f]{8}$/.test(m.name.slice(nodeName.length + 1)),
        );
        for (const member of doomed) await client.cluster.memberRemove({ ID: member.ID });
        return doomed.map((m) => m.name);
      }),
  };
}
