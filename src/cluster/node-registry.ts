import { createHash, randomBytes, scrypt as scryptCallback, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { promisify } from 'node:util';
import { type Authenticator, bearerToken, type UserInfo } from '../apiserver/auth.js';
import { errors } from '../apiserver/errors.js';
import { ConflictError, type Datastore, KeyExistsError, type Watch } from '../datastore/types.js';
import { generateSecret } from '../security/tokens.js';

/**
 * Node identity. Each agent proves itself with a password it generated on first start; the server
 * keeps only a scrypt hash of it, bound to the node name. A different host (another password)
 * claiming a name that has a live Node object is refused until that Node is deleted. On every
 * successful registration the node gets a fresh bearer credential (`system:node:<name>`); only its
 * SHA-256 is stored, and every server keeps an in-memory index of them fed by a datastore watch.
 */

const scrypt = promisify(scryptCallback) as (password: string, salt: Buffer, keylen: number) => Promise<Buffer>;

const RECORD_PREFIX = '/drover/nodes/';
export const NODES_GROUP = 'system:nodes';
export const NODE_USER_PREFIX = 'system:node:';

interface NodeRecord {
  nodeName: string;
  nodeId: string;
  passwordSalt: string;
  passwordHash: string;
  tokenHash: string;
  registeredAt: string;
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

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

async function hashPassword(password: string, salt: Buffer): Promise<string> {
  return (await scrypt(password, salt, 32)).toString('hex');
}

export class NodeRegistry implements Authenticator {
  private readonly byTokenHash = new Map<string, string>();
  private readonly tokenHashByNode = new Map<string, string>();
  private readonly endpointByNode = new Map<string, AgentEndpoint>();
  private watch: Watch | undefined;

  constructor(private readonly datastore: Datastore) {}

  /** Load every node credential and follow changes (other servers register nodes too). */
  async start(): Promise<void> {
    const { items, revision } = await this.datastore.list(RECORD_PREFIX);
    for (const kv of items) this.index(JSON.parse(kv.value.toString('utf8')) as NodeRecord);
    this.watch = this.datastore.watch(RECORD_PREFIX, revision + 1, {
      onEvents: (events) => {
        for (const event of events) {
          const record = JSON.parse(event.kv.value.toString('utf8')) as NodeRecord;
          if (event.type === 'delete') this.unindex(record.nodeName);
          else this.index(record);
        }
      },
      onError: () => {
        // Fall back to a fresh load; credentials must not go stale silently.
        void this.start();
      },
    });
  }

  stop(): void {
    this.watch?.cancel();
  }

  private index(record: NodeRecord): void {
    this.unindex(record.nodeName);
    this.byTokenHash.set(record.tokenHash, record.nodeName);
    this.tokenHashByNode.set(record.nodeName, record.tokenHash);
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
  }

  authenticate(req: IncomingMessage): UserInfo | undefined {
    const token = bearerToken(req);
    if (!token) return undefined;
    const nodeName = this.byTokenHash.get(sha256(token));
    if (!nodeName) return undefined;
    return { name: `${NODE_USER_PREFIX}${nodeName}`, groups: [NODES_GROUP, 'system:authenticated'] };
  }

  /**
   * Register (or re-register) a node and return its new credential. `nodeObjectExists` tells
   * whether the name is still taken by a live Node object.
   */
  async register(request: RegistrationRequest, nodeObjectExists: () => Promise<boolean>): Promise<string> {
    const key = `${RECORD_PREFIX}${request.nodeName}`;
    for (let attempt = 0; attempt < 5; attempt++) {
      const existing = await this.datastore.get(key);
      let salt = randomBytes(16);
      let passwordHash: string | undefined;
      if (existing) {
        const record = JSON.parse(existing.value.toString('utf8')) as NodeRecord;
        const candidate = await hashPassword(request.password, Buffer.from(record.passwordSalt, 'hex'));
        const matches = timingSafeEqual(Buffer.from(candidate, 'hex'), Buffer.from(record.passwordHash, 'hex'));
        if (matches) {
          salt = Buffer.from(record.passwordSalt, 'hex');
          passwordHash = record.passwordHash;
        } else if (await nodeObjectExists()) {
          throw errors.forbidden(
            `node name "${request.nodeName}" is already registered by another host (node id ${record.nodeId}, since ${record.registeredAt}); ` +
              `delete that node (kubectl delete node ${request.nodeName}) to free the name, or start this agent with another --node-name`,
          );
        }
      }
      passwordHash ??= await hashPassword(request.password, salt);
      const token = generateSecret();
      const record: NodeRecord = {
        nodeName: request.nodeName,
        nodeId: request.nodeId,
        passwordSalt: salt.toString('hex'),
        passwordHash,
        tokenHash: sha256(token),
        registeredAt: new Date().toISOString(),
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
