import type {
  Admission,
  AdmissionAttributes,
  AuthorizationDecision,
  Authorizer,
  RequestAttributes,
  UserInfo,
} from '../apiserver/auth.js';
import { errors } from '../apiserver/errors.js';
import { getString } from '../apiserver/objects.js';
import { type ApiClient, NODES, PODS } from '../client/types.js';
import { leaseHolderIdentity, NODE_LEASE_NAMESPACE } from '../controllers/node-lifecycle.js';
import { NODE_USER_PREFIX, NODES_GROUP } from './node-registry.js';

/**
 * Node restriction, as Kubernetes' Node authorizer and NodeRestriction admission do it: an agent
 * may read what it needs, and write only its own Node, its own Lease and events about its own
 * Node. Everyone else (the admin) goes to the next authorizer.
 */

const READ = new Set(['get', 'list', 'watch']);
const WRITE = new Set(['create', 'update', 'patch']);

export function nodeNameOf(user: UserInfo): string | undefined {
  if (!user.groups.includes(NODES_GROUP) || !user.name.startsWith(NODE_USER_PREFIX)) return undefined;
  return user.name.slice(NODE_USER_PREFIX.length);
}

function decide(node: string, a: RequestAttributes): AuthorizationDecision {
  const deny = (reason: string): AuthorizationDecision => ({ allowed: false, reason });
  const own = a.name === node;
  if (a.group === '' && a.resource === 'nodes') {
    if (READ.has(a.verb)) return { allowed: true };
    // A create names the node in its body; admission checks it.
    if (a.verb === 'create' && !a.subresource) return { allowed: true };
    if ((WRITE.has(a.verb) || a.verb === 'delete') && own) return { allowed: true };
    return deny(`a node may only modify its own Node object (${node})`);
  }
  if (a.group === 'coordination.k8s.io' && a.resource === 'leases') {
    if (a.namespace !== NODE_LEASE_NAMESPACE) return deny(`a node may only use leases in ${NODE_LEASE_NAMESPACE}`);
    if (READ.has(a.verb) && a.verb !== 'list' && a.verb !== 'watch') return own ? { allowed: true } : deny('a node may only read its own lease');
    if (a.verb === 'create' || ((WRITE.has(a.verb) || a.verb === 'delete') && own)) return { allowed: true };
    return deny(`a node may only modify its own lease (${node})`);
  }
  if (a.group === '' && a.resource === 'events') {
    if (a.verb === 'create' || a.verb === 'patch' || a.verb === 'update' || READ.has(a.verb)) return { allowed: true };
    return deny('a node may only create and read events');
  }
  if (a.group === '' && (a.resource === 'pods' || a.resource === 'namespaces')) {
    if (READ.has(a.verb)) return { allowed: true };
    if (a.resource === 'pods' && a.subresource === 'status' && WRITE.has(a.verb)) return { allowed: true };
    // Finishing a graceful deletion and draining: admission checks the pod is bound to this node.
    if (a.resource === 'pods' && !a.subresource && a.verb === 'delete') return { allowed: true };
    if (a.resource === 'pods' && a.subresource === 'eviction' && a.verb === 'create') return { allowed: true };
    return deny('a node may only read pods and namespaces, and write the status of its own pods');
  }
  return deny('not allowed for nodes');
}

export class NodeAuthorizer implements Authorizer {
  constructor(private readonly fallback: Authorizer) {}

  authorize(user: UserInfo, attributes: RequestAttributes): AuthorizationDecision {
    const node = nodeNameOf(user);
    if (node === undefined) return this.fallback.authorize(user, attributes);
    return decide(node, attributes);
  }
}

export class NodeRestrictionAdmission implements Admission {
  constructor(private readonly client: ApiClient) {}

  async admit(a: AdmissionAttributes): Promise<void> {
    const node = nodeNameOf(a.user);
    if (node === undefined) return;
    const forbid = (why: string): never => {
      throw errors.forbidden(`${a.resource} is forbidden: User "${a.user.name}" ${why}`);
    };
    if (a.group === '' && a.resource === 'nodes') {
      if (a.object.metadata.name !== node) forbid(`may only create or modify its own Node "${node}"`);
      return;
    }
    if (a.group === 'coordination.k8s.io' && a.resource === 'leases') {
      if (a.object.metadata.name !== node) forbid(`may only create or modify its own lease "${node}"`);
      const current = await this.client.get(NODES, undefined, node);
      const holder = getString(a.object, ['spec', 'holderIdentity']);
      if (!current || holder !== leaseHolderIdentity(node, current.metadata.uid!)) {
        forbid(
          `holds lease identity "${holder}", which is not the current incarnation of node ${node}` +
            `${current ? ` (uid ${current.metadata.uid})` : ' (the Node does not exist)'}; re-register the agent`,
        );
      }
      return;
    }
    if (a.group === '' && a.resource === 'pods') {
      // Status writes, final deletes and evictions: only for pods bound to this node.
      const boundTo = getString(a.object, ['spec', 'nodeName']);
      if (boundTo !== node) forbid(`may only ${a.verb} pods bound to its own node "${node}" (this pod is bound to "${boundTo || 'no node'}")`);
      return;
    }
    if (a.group === '' && a.resource === 'events') {
      const kind = getString(a.object, ['involvedObject', 'kind']);
      const name = getString(a.object, ['involvedObject', 'name']);
      if (kind === 'Pod') {
        const pod = await this.client.get(PODS, getString(a.object, ['involvedObject', 'namespace']) || undefined, name);
        if (!pod || getString(pod, ['spec', 'nodeName']) !== node) forbid(`may only report events about pods bound to its own node "${node}"`);
        return;
      }
      if (kind !== 'Node' || name !== node) forbid(`may only report events about its own Node "${node}" or pods bound to it`);
    }
  }
}
