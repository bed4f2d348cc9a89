import { randomBytes, scrypt as scryptCallback, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { promisify } from 'node:util';
import { type Authenticator, presentedToken, tokenDigest, type UserInfo } from '../apiserver/auth.js';
import { errors } from '../apiserver/errors.js';
import { ConflictError, type Datastore, KeyExistsError, KeyNotFoundError, type Watch } from '../datastore/types.js';
import { generateSecret } from '../security/tokens.js';

/**
 * Node identity. Each agent proves itself with a password it generated on first start; the server
 * keeps only a scrypt hash of it, bound to the node name. The binding outlives the Node object: a
 * different host (another password) claiming a name that has a record is refused, with or without
 * a Node, until an admin removes the record (`drover node forget NAME`, {@link forget}). On every
 * successful registration the node gets a fresh bearer credential (`system:node:<name>`); only its
 * SHA-256 is stored, and every server keeps an in-memory index of them fed by a datastore watch, so
 * a replaced, revoked or forgotten credential stops working on every server.
 *
 * The record also follows the Node object that its credential serves (`nodeUid`, kept by
 * NodeRecordReconciler on the controller leader): when that Node is deleted the credential is
 * revoked (the password binding stays, so only the real host can register the name again).
 */

const scrypt = promisify(scryptCallback) as (password: string, salt: Buffer, keylen: number) => Promise<Buffer>;

const RECORD_PREFIX = '/drover/nodes/';
export const NODES_GROUP = 'system:nodes';
export const NODE_USER_PREFIX = 'system:node:';

export interface NodeRecord {
  nodeName: string;
  nodeId: string;
  passwordSalt: string;
  passwordHash: string;
  /** SHA-256 of the current credential; empty once revoked (its Node was deleted). */
  tokenHash: string;
  /** The last successful registration. */
  registeredAt: string;
  /** The UID of the Node object this credential serves, once one exists. */
  nodeUid?: string;
  /** When a Node object was first seen for this record: a record never active is garbage-collected. */
  activeAt?: string;
  /** When the credential was revoked, and why. */
  revokedAt?: string;
  revokedBecause?: string;
  /** The IPs its serving certificate names, and its agent port: where API servers may reach it. */
  addresses?: string[];
  agentPort?: number;
}

export interface RegistrationRequest {
  nodeName: string;
  nodeId: string;
  password: string;
  addresses?: string[];
  agentPort?: number;
}

/** Where API servers may connect to a node's agent: what it registered, not what it publishes. */
export interface AgentEndpoint {
  addresses: string[];
  port: number;
}

/** The credential's digest as stored in its record: the same digest every token authenticator looks up. */
const sha256 = tokenDigest;

async function hashPassword(password: string, salt: Buffer): Promise<string> {
  return (await scrypt(password, salt, 32)).toString('hex');
}

function parseRecord(value: Buffer): NodeRecord {
  return JSON.parse(value.toString('utf8')) as NodeRecord;
}

/**
 * A change to a record outside registration: the new record, or undefined to leave it. `revision`
 * is the datastore revision of the record's last write (Node resourceVersions count in the same
 * sequence).
 */
export type RecordChange = (record: NodeRecord, revision: number) => NodeRecord | undefined;

/** How soon a failed reload of the records after a broken watch is tried again. */
const RELOAD_RETRY_MS = 1000;

export class NodeRegistry implements Authenticator {
  private readonly byTokenHash = new Map<string, string>();
  private readonly tokenHashByNode = new Map<string, string>();
  private readonly endpointByNode = new Map<string, AgentEndpoint>();
  /** Every record, as the watch last showed it (the reconciler reads it to skip no-op writes). */
  private readonly records = new Map<string, NodeRecord>();
  private watch: Watch | undefined;
  private stopped = false;
  private reloadTimer: NodeJS.Timeout | undefined;

  constructor(private readonly datastore: Datastore) {}

  /** Load every node credential and follow changes (other servers register nodes too). */
  async start(): Promise<void> {
    this.watch?.cancel();
    const { items, revision } = await this.datastore.list(RECORD_PREFIX);
    // From scratch: after a broken watch, a record deleted meanwhile must not stay indexed.
    this.byTokenHash.clear();
    this.tokenHashByNode.clear();
    this.endpointByNode.clear();
    this.records.clear();
    for (const kv of items) this.index(parseRecord(kv.value));
    this.watch = this.datastore.watch(RECORD_PREFIX, revision + 1, {
      onEvents: (events) => {
        for (const event of events) {
          const record = parseRecord(event.kv.value);
          if (event.type === 'delete') this.unindex(record.nodeName);
          else this.index(record);
        }
      },
      onError: () => {
        // Fall back to a fresh load; credentials must not go stale silently.
        this.reload();
      },
    });
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.reloadTimer);
    this.watch?.cancel();
  }

  /**
   * Load again after a broken watch. A datastore that cannot answer (unreachable, or closing as
   * the server stops) is tried again a second later, never left as an unhandled failure that would
   * take the server down; stop() ends the retries.
   */
  private reload(): void {
    if (this.stopped) return;
    this.start().catch(() => {
      if (this.stopped) return;
      this.reloadTimer = setTimeout(() => this.reload(), RELOAD_RETRY_MS);
      this.reloadTimer.unref();
    });
  }

  private index(record: NodeRecord): void {
    this.unindex(record.nodeName);
    this.records.set(record.nodeName, record);
    if (record.tokenHash) {
      this.byTokenHash.set(record.tokenHash, record.nodeName);
      this.tokenHashByNode.set(record.nodeName, record.tokenHash);
    }
    if (record.agentPort) this.endpointByNode.set(record.nodeName, { addresses: record.addresses ?? [], port: record.agentPort });
  }

  /** The agent endpoint a node registered, if it registered one. */
  agentEndpoint(nodeName: string): AgentEndpoint | undefined {
    return this.endpointByNode.get(nodeName);
  }

  private unindex(nodeName: string): void {
    const old = this.tokenHashByNode.get(nodeName);
    if (old) this.byTokenHash.delete(old);
    this.tokenHashByNode.delete(nodeName);
    this.endpointByNode.delete(nodeName);
    this.records.delete(nodeName);
  }

  /** Whether a name has a record (as this server's watch shows it): a new name costs more. */
  isKnown(nodeName: string): boolean {
    return this.records.has(nodeName);
  }

  /** The record of a name, as this server's watch last showed it. */
  cached(nodeName: string): NodeRecord | undefined {
    return this.records.get(nodeName);
  }

  /** Every record, read from the datastore (the reconciler's periodic sweep). */
  async list(): Promise<NodeRecord[]> {
    return (await this.datastore.list(RECORD_PREFIX)).items.map((kv) => parseRecord(kv.value));
  }

  /**
   * Change a record with compare-and-swap, retrying on concurrent writes: `change` returns the new
   * record, or undefined to leave it as it is. False when there was no record or nothing changed.
   */
  async update(nodeName: string, change: RecordChange): Promise<boolean> {
    const key = `${RECORD_PREFIX}${nodeName}`;
    for (let attempt = 0; attempt < 5; attempt++) {
      const existing = await this.datastore.get(key);
      if (!existing) return false;
      const next = change(parseRecord(existing.value), existing.modRevision);
      if (!next) return false;
      try {
        await this.datastore.update(key, Buffer.from(JSON.stringify(next)), existing.modRevision);
        this.index(next);
        return true;
      } catch (error) {
        if (error instanceof ConflictError || error instanceof KeyNotFoundError) continue;
        throw error;
      }
    }
    return false;
  }

  /** Delete a record only if `still` holds for it as it is now (garbage collection). */
  async removeIf(nodeName: string, still: (record: NodeRecord) => boolean): Promise<boolean> {
    const key = `${RECORD_PREFIX}${nodeName}`;
    const existing = await this.datastore.get(key);
    if (!existing || !still(parseRecord(existing.value))) return false;
    try {
      await this.datastore.delete(key, existing.modRevision);
    } catch (error) {
      if (error instanceof ConflictError || error instanceof KeyNotFoundError) return false;
      throw error;
    }
    this.unindex(nodeName);
    return true;
  }

  /**
   * `drover node forget`: remove the name's record, so its credential stops working on every
   * server and any host may register the name again. The removed record, or undefined.
   */
  async forget(nodeName: string): Promise<NodeRecord | undefined> {
    const key = `${RECORD_PREFIX}${nodeName}`;
    try {
      const deleted = await this.datastore.delete(key);
      this.unindex(nodeName);
      return parseRecord(deleted.value);
    } catch (error) {
      if (error instanceof KeyNotFoundError) return undefined;
      throw error;
    }
  }

  authenticate(req: IncomingMessage): UserInfo | undefined {
    // The digest the other token authenticators of the chain worked out already.
    const token = presentedToken(req);
    if (!token) return undefined;
    const nodeName = this.byTokenHash.get(token.digest);
    if (!nodeName) return undefined;
    return { name: `${NODE_USER_PREFIX}${nodeName}`, groups: [NODES_GROUP, 'system:authenticated'] };
  }

  /**
   * Register (or re-register) a node and return its new credential. A name that has a record
   * takes only the password it was first registered with, whether or not its Node exists.
   * `currentNodeUid` reads the UID of the name's Node object, if there is one: the new credential
   * serves that Node (a restarted agent keeps its Node), or the one the agent is about to create.
   */
  async register(request: RegistrationRequest, currentNodeUid: () => Promise<string | undefined>): Promise<string> {
    const key = `${RECORD_PREFIX}${request.nodeName}`;
    for (let attempt = 0; attempt < 5; attempt++) {
      const existing = await this.datastore.get(key);
      let salt = randomBytes(16);
      let passwordHash: string | undefined;
      let previous: NodeRecord | undefined;
      if (existing) {
        previous = parseRecord(existing.value);
        const candidate = await hashPassword(request.password, Buffer.from(previous.passwordSalt, 'hex'));
        if (!timingSafeEqual(Buffer.from(candidate, 'hex'), Buffer.from(previous.passwordHash, 'hex'))) {
          throw errors.forbidden(
            `node name "${request.nodeName}" is already registered by another host (node id ${previous.nodeId}, since ${previous.registeredAt}); ` +
              `if that host is gone for good, an admin frees the name with "drover node forget ${request.nodeName}"; ` +
              'otherwise start this agent with another --node-name',
          );
        }
        salt = Buffer.from(previous.passwordSalt, 'hex');
        passwordHash = previous.passwordHash;
      }
      passwordHash ??= await hashPassword(request.password, salt);
      const nodeUid = await currentNodeUid();
      const now = new Date().toISOString();
      const token = generateSecret();
      const record: NodeRecord = {
        nodeName: request.nodeName,
        nodeId: request.nodeId,
        passwordSalt: salt.toString('hex'),
        passwordHash,
        tokenHash: sha256(token),
        registeredAt: now,
        ...(nodeUid ? { nodeUid } : {}),
        ...(previous?.activeAt || nodeUid ? { activeAt: previous?.activeAt ?? now } : {}),
        ...(request.addresses ? { addresses: request.addresses } : {}),
        ...(request.agentPort ? { agentPort: request.agentPort } : {}),
      };
      const value = Buffer.from(JSON.stringify(record));
      try {
        if (existing) await this.datastore.update(key, value, existing.modRevision);
        else await this.datastore.create(key, value);
      } catch (error) {
        if (error instanceof KeyExistsError || error instanceof ConflictError) continue;
        throw error;
      }
      this.index(record);
      return token;
    }
    throw errors.conflict({ group: '', plural: 'nodes' }, request.nodeName, 'concurrent registrations; try again');
  }
}
