import type {
  Admission,
  AdmissionAttributes,
  AuthorizationDecision,
  Authorizer,
  NonResourceAttributes,
  RequestAttributes,
  UserInfo,
} from '../apiserver/auth.js';
import { errors } from '../apiserver/errors.js';
import { getString } from '../apiserver/objects.js';
import { type ApiClient, NODES, PODS } from '../client/types.js';
import type { KubeObject } from '../apiserver/objects.js';
import type { ConfigKind } from '../node-protocol/pod-references.js';
import type { NodeConfigGraph } from './node-graph.js';
import { leaseHolderIdentity, NODE_LEASE_NAMESPACE, SHUTDOWN_ANNOTATION, STATE_LABEL } from '../node-protocol/names.js';
import { NODE_USER_PREFIX, NODES_GROUP } from './node-registry.js';
import { REGISTRY_PEER_NAMESPACE } from '../node-protocol/registry-peers.js';

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

/** What answers "does a pod of this node use that object?": the graph, or nothing (deny). */
export type ConfigGraphView = Pick<NodeConfigGraph, 'synced' | 'nodeMayRead' | 'nodeMayRequestToken'>;

/**
 * ConfigMaps and Secrets, as Kubernetes' node authorizer reads them: one named object at a time
 * (get, or a list or watch with `fieldSelector=metadata.name=<name>`), and only if a pod bound to
 * the node refers to it. Its reasons are kube's.
 */
function decideConfig(node: string, kind: ConfigKind, a: RequestAttributes, graph: ConfigGraphView | undefined): AuthorizationDecision {
  const deny = (reason: string): AuthorizationDecision => ({ allowed: false, reason });
  if (!READ.has(a.verb)) return deny('can only read resources of this type');
  if (a.subresource) return deny('cannot read subresource');
  if (!a.namespace) return deny('can only read namespaced object of this type');
  if (!a.name) return deny('No Object name found');
  if (!graph?.synced) return deny("the node authorizer has not loaded the cluster's pods yet; retry");
  if (!graph.nodeMayRead(node, { kind, namespace: a.namespace, name: a.name })) {
    return deny(`no relationship found between node '${node}' and this object`);
  }
  return { allowed: true };
}

function decide(node: string, a: RequestAttributes, graph: ConfigGraphView | undefined): AuthorizationDecision {
  const deny = (reason: string): AuthorizationDecision => ({ allowed: false, reason });
  const own = a.name === node;
  if (a.group === '' && a.resource === 'configmaps' && a.namespace === REGISTRY_PEER_NAMESPACE) {
    // Embedded-registry peer advertisements: every node reads all of them, writes only its own.
    if (READ.has(a.verb) && !a.subresource) return { allowed: true };
    if (!a.subresource && (a.verb === 'create' || ((WRITE.has(a.verb) || a.verb === 'delete') && own))) return { allowed: true };
    return deny(`a node may only modify its own registry advertisement in ${REGISTRY_PEER_NAMESPACE} (${node})`);
  }
  if (a.group === '' && a.resource === 'configmaps') return decideConfig(node, 'ConfigMap', a, graph);
  if (a.group === '' && a.resource === 'secrets') return decideConfig(node, 'Secret', a, graph);
  if (a.group === '' && a.resource === 'serviceaccounts') {
    // Tokens for projected volumes, as Kubernetes' node authorizer allows them: only for the
    // accounts of pods bound to this node (admission then requires the token bound to such a pod).
    if (a.subresource !== 'token' || a.verb !== 'create') return deny('can only create tokens for individual service accounts');
    if (!a.namespace || !a.name) return deny('No Object name found');
    if (!graph?.synced) return deny("the node authorizer has not loaded the cluster's pods yet; retry");
    if (!graph.nodeMayRequestToken(node, a.namespace, a.name)) return deny(`no relationship found between node '${node}' and this object`);
    return { allowed: true };
  }
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
  if (a.group === 'node.k8s.io' && a.resource === 'runtimeclasses') {
    // What runtime a pod asks for (its class's handler), as Kubernetes' node authorizer allows.
    if (READ.has(a.verb)) return { allowed: true };
    return deny('a node may only read runtime classes');
  }
  if ((a.group === '' && (a.resource === 'services' || a.resource === 'endpoints')) || (a.group === 'discovery.k8s.io' && a.resource === 'endpointslices')) {
    // The node's Service datapath and cluster DNS (kube-proxy's and kubelet's reads in Kubernetes;
    // both run in the agent here). Reading only: nothing on a node writes them.
    if (READ.has(a.verb) && !a.subresource) return { allowed: true };
    return deny('a node may only read services, endpoints and endpoint slices');
  }
  if (a.group === '' && a.resource === 'events') {
    if (a.verb === 'create' || a.verb === 'patch' || a.verb === 'update' || READ.has(a.verb)) return { allowed: true };
    return deny('a node may only create and read events');
  }
  if (a.group === '' && (a.resource === 'pods' || a.resource === 'namespaces')) {
    // Reading pods, not their logs: a node has no business with other pods' output (Kubernetes'
    // node role has no pods/log either).
    if (READ.has(a.verb) && (!a.subresource || a.subresource === 'status')) return { allowed: true };
    if (a.resource === 'pods' && a.subresource === 'status' && WRITE.has(a.verb)) return { allowed: true };
    // Finishing a graceful deletion and draining: admission checks the pod is bound to this node.
    if (a.resource === 'pods' && !a.subresource && a.verb === 'delete') return { allowed: true };
    if (a.resource === 'pods' && a.subresource === 'eviction' && a.verb === 'create') return { allowed: true };
    return deny('a node may only read pods and namespaces, and write the status of its own pods');
  }
  return deny('not allowed for nodes');
}

export class NodeAuthorizer implements Authorizer {
  /** `graph`: which ConfigMaps and Secrets each node's pods use; without it nodes read none. */
  constructor(
    private readonly fallback: Authorizer,
    private readonly graph?: ConfigGraphView,
  ) {}

  authorize(user: UserInfo, attributes: RequestAttributes | NonResourceAttributes): AuthorizationDecision {
    const node = nodeNameOf(user);
    if (node === undefined) return this.fallback.authorize(user, attributes);
    // Discovery, OpenAPI and /metrics: what every authenticated caller could read before RBAC.
    if (!('resource' in attributes)) return { allowed: true };
    return decide(node, attributes, this.graph);
  }
}

export class NodeRestrictionAdmission implements Admission {
  /**
   * `cachedNode`: the Node as this server's watch cache holds it (shared, read only), if it does.
   * A lease renewal whose holder names that Node's uid is admitted without reading the Node (the
   * dominant write of a cluster: every node, every second); anything else is judged on a read.
   */
  constructor(
    private readonly client: ApiClient,
    private readonly cachedNode?: (name: string) => KubeObject | undefined,
  ) {}

  /** Only node credentials are restricted. */
  judges(user: UserInfo): boolean {
    return nodeNameOf(user) !== undefined;
  }

  async admit(a: AdmissionAttributes): Promise<void> {
    const node = nodeNameOf(a.user);
    if (node === undefined) return;
    const forbid = (why: string): never => {
      throw errors.forbidden(`${a.resource} is forbidden: User "${a.user.name}" ${why}`);
    };
    if (a.group === '' && a.resource === 'nodes') {
      if (a.object.metadata.name !== node) forbid(`may only create or modify its own Node "${node}"`);
      const violation = nodeSelfUpdateViolation(a.oldObject, a.object);
      if (violation) forbid(violation);
      return;
    }
    if (a.group === 'coordination.k8s.io' && a.resource === 'leases') {
      if (a.object.metadata.name !== node) forbid(`may only create or modify its own lease "${node}"`);
      const holder = getString(a.object, ['spec', 'holderIdentity']);
      // A uid is never reused, so a cached Node with the holder's uid is that incarnation: it
      // existed at a recent revision, as a read would have shown a moment ago.
      const cached = this.cachedNode?.(node);
      if (cached?.metadata.uid && holder === leaseHolderIdentity(node, cached.metadata.uid)) return;
      const current = await this.client.get(NODES, undefined, node);
      if (!current || holder !== leaseHolderIdentity(node, current.metadata.uid!)) {
        forbid(
          `holds lease identity "${holder}", which is not the current incarnation of node ${node}` +
            `${current ? ` (uid ${current.metadata.uid})` : ' (the Node does not exist)'}; re-register the agent`,
        );
      }
      return;
    }
    if (a.group === '' && a.resource === 'configmaps' && a.namespace === REGISTRY_PEER_NAMESPACE) {
      // Its own registry advertisement only, judged on the stored object too (a create names itself in the body).
      for (const object of [a.oldObject, a.object]) {
        if (object && object.metadata.name !== node) forbid(`may only create or modify its own registry advertisement "${node}"`);
      }
      return;
    }
    if (a.group === '' && a.resource === 'pods' && a.subresource === 'ephemeralcontainers') {
      // A node runs what the API says; it never decides what runs in a pod (Kubernetes' node restriction refuses it too).
      forbid('may not add or change ephemeral containers');
    }
    if (a.group === '' && a.resource === 'pods') {
      // Status writes, final deletes and evictions: only for pods bound to this node, judged on
      // the stored pod (which the caller cannot choose) and on the one it would leave behind.
      for (const pod of [a.oldObject, a.object]) {
        if (!pod) continue;
        const boundTo = getString(pod, ['spec', 'nodeName']);
        if (boundTo !== node) forbid(`may only ${a.verb} pods bound to its own node "${node}" (this pod is bound to "${boundTo || 'no node'}")`);
      }
      return;
    }
    if (a.group === '' && a.resource === 'serviceaccounts' && a.subresource === 'token') {
      await this.checkTokenRequest(node, a, forbid);
      return;
    }
    if (a.group === '' && a.resource === 'events') {
      // Both the event it writes and the one it would overwrite must be about this node's things.
      for (const event of [a.oldObject, a.object]) {
        if (event) await this.checkEventSubject(node, event, forbid);
      }
    }
  }

  /**
   * A node's TokenRequest must be bound to a pod bound to it, named with its UID, as Kubernetes'
   * NodeRestriction requires: so an agent cannot mint an account token that outlives the pods it
   * runs, nor one for a pod elsewhere.
   */
  private async checkTokenRequest(node: string, a: AdmissionAttributes, forbid: (why: string) => never): Promise<void> {
    const ref = (a.object.spec as { boundObjectRef?: { kind?: unknown; apiVersion?: unknown; name?: unknown; uid?: unknown } } | undefined)?.boundObjectRef;
    if (!ref || ref.kind !== 'Pod' || (ref.apiVersion !== undefined && ref.apiVersion !== 'v1') || typeof ref.name !== 'string' || !ref.name) {
      forbid('requested a token not bound to a pod');
    }
    if (typeof ref!.uid !== 'string' || !ref!.uid) forbid('requested a token bound to a pod without naming its uid');
    const pod = await this.client.get(PODS, a.namespace, ref!.name as string);
    if (!pod) forbid(`requested a token bound to pod "${String(ref!.name)}", which does not exist`);
    if (pod!.metadata.uid !== ref!.uid) {
      forbid(`the UID in the bound object reference (${String(ref!.uid)}) does not match the UID in record. The object might have been deleted and then recreated`);
    }
    if (getString(pod!, ['spec', 'nodeName']) !== node) forbid('requested a token bound to a pod scheduled on a different node');
  }

  private async checkEventSubject(node: string, event: KubeObject, forbid: (why: string) => never): Promise<void> {
    const kind = getString(event, ['involvedObject', 'kind']);
    const name = getString(event, ['involvedObject', 'name']);
    if (kind === 'Pod') {
      const pod = await this.client.get(PODS, getString(event, ['involvedObject', 'namespace']) || undefined, name);
      if (!pod || getString(pod, ['spec', 'nodeName']) !== node) forbid(`may only report events about pods bound to its own node "${node}"`);
      return;
    }
    if (kind !== 'Node' || name !== node) forbid(`may only report events about its own Node "${node}" or pods bound to it`);
  }
}

/** Label domains whose keys a node may set on itself, as kubelet's allowed labels in Kubernetes. */
const NODE_SETTABLE_LABELS = new Set([
  'kubernetes.io/hostname',
  'kubernetes.io/os',
  'kubernetes.io/arch',
  'beta.kubernetes.io/os',
  'beta.kubernetes.io/arch',
  'beta.kubernetes.io/instance-type',
  'node.kubernetes.io/instance-type',
  'failure-domain.beta.kubernetes.io/region',
  'failure-domain.beta.kubernetes.io/zone',
  'topology.kubernetes.io/region',
  'topology.kubernetes.io/zone',
]);
const NODE_SETTABLE_DOMAINS = ['kubelet.kubernetes.io', 'node.kubernetes.io'];

/**
 * Why a node may not set (or change, or remove) this label on itself, or undefined when it may.
 * Roles and `node-restriction.kubernetes.io/` labels steer workloads and are the admin's; other
 * `kubernetes.io`/`k8s.io` keys are reserved except kubelet's own; `drover.io/state` is the
 * lifecycle controller's verdict, which the scheduler trusts.
 */
export function nodeLabelViolation(key: string): string | undefined {
  if (key === STATE_LABEL) return `may not set label ${key}: it is the node lifecycle controller's verdict`;
  const slash = key.indexOf('/');
  if (slash < 0) return undefined;
  const domain = key.slice(0, slash);
  const reserved = (suffix: string): boolean => domain === suffix || domain.endsWith(`.${suffix}`);
  if (reserved('node-restriction.kubernetes.io')) return `may not set label ${key}: node-restriction.kubernetes.io/ labels are for administrators`;
  if (!reserved('kubernetes.io') && !reserved('k8s.io')) return undefined;
  if (NODE_SETTABLE_LABELS.has(key) || NODE_SETTABLE_DOMAINS.some(reserved)) return undefined;
  return `may not set label ${key}: of the kubernetes.io and k8s.io labels a node may set only its own (${[...NODE_SETTABLE_LABELS].join(', ')}, ${NODE_SETTABLE_DOMAINS.map((d) => `${d}/*`).join(', ')})`;
}

interface NodeSpecView {
  taints?: unknown;
  unschedulable?: boolean;
}

/**
 * What NodeRestriction forbids a node to do to its own Node, or undefined. `previous` is the
 * stored Node (absent on create). A node sets its taints only when it registers (as kubelet's
 * --register-with-taints); it may cordon itself only for a planned stop, recorded in the shutdown
 * annotation with `cordoned: true`, and uncordon itself only by withdrawing such a record of its
 * own: an admin's cordon stays.
 */
export function nodeSelfUpdateViolation(previous: KubeObject | undefined, next: KubeObject): string | undefined {
  const before = previous?.metadata.labels ?? {};
  const after = next.metadata.labels ?? {};
  for (const key of new Set([...Object.keys(before), ...Object.keys(after)])) {
    if (before[key] === after[key]) continue;
    const violation = nodeLabelViolation(key);
    if (violation) return violation;
  }
  if (!previous) {
    const spec = (next.spec as { podCIDR?: unknown; podCIDRs?: unknown } | undefined) ?? {};
    return spec.podCIDR !== undefined || spec.podCIDRs !== undefined ? 'may not set its pod CIDR (the cluster allocates it)' : undefined;
  }
  const oldSpec = (previous.spec ?? {}) as NodeSpecView;
  const newSpec = (next.spec ?? {}) as NodeSpecView;
  if (JSON.stringify(oldSpec.taints ?? []) !== JSON.stringify(newSpec.taints ?? [])) {
    return 'may not modify its taints after registration';
  }
  // Its pod range is the allocator's: a node choosing one could take another node's pods' traffic.
  const oldCidrs = (previous.spec as { podCIDR?: unknown; podCIDRs?: unknown } | undefined) ?? {};
  const newCidrs = (next.spec as { podCIDR?: unknown; podCIDRs?: unknown } | undefined) ?? {};
  if (JSON.stringify([oldCidrs.podCIDR, oldCidrs.podCIDRs]) !== JSON.stringify([newCidrs.podCIDR, newCidrs.podCIDRs])) {
    return 'may not set its pod CIDR (the cluster allocates it)';
  }
  const wasCordoned = oldSpec.unschedulable === true;
  const isCordoned = newSpec.unschedulable === true;
  const oldRecord = shutdownRecordOf(previous);
  const newRecord = shutdownRecordOf(next);
  // Claiming a cordon as its own is only possible in the write that makes it.
  if (newRecord?.cordoned && !oldRecord?.cordoned && !(isCordoned && !wasCordoned)) {
    return 'may record a cordon as its own only in the write that cordons it';
  }
  if (isCordoned && !wasCordoned && !newRecord) return 'may cordon itself only with a shutdown record (a planned stop)';
  if (wasCordoned && !isCordoned && !oldRecord?.cordoned) return 'may not uncordon itself: an administrator cordoned it';
  return undefined;
}

function shutdownRecordOf(node: KubeObject): { cordoned?: boolean } | undefined {
  const text = node.metadata.annotations?.[SHUTDOWN_ANNOTATION];
  if (!text) return undefined;
  try {
    const parsed: unknown = JSON.parse(text);
    return typeof parsed === 'object' && parsed !== null ? (parsed as { cordoned?: boolean }) : {};
  } catch {
    return {};
  }
}
