import type { StatusCause } from './errors.js';
import { ROLE_LABEL_PREFIX, STATE_LABEL } from '../node-protocol/names.js';
import { getPath, getString, type KubeObject } from './objects.js';
import { defaultPodSpec, podDeletionGracePeriod, POD_PRINTER, validatePod, validatePodUpdate } from './pods.js';
import {
  defaultDeployment,
  defaultReplicaSet,
  defaultStatefulSet,
  DEPLOYMENT_PRINTER,
  REPLICASET_PRINTER,
  STATEFULSET_PRINTER,
  validateWorkload,
} from './workloads.js';
import {
  AGE_COLUMN,
  ageOf,
  type Cell,
  column,
  DEFAULT_PRINTER,
  NAME_COLUMN,
  type Printer,
} from './table.js';

/**
 * The resources Drover serves, described as data: the generic store, discovery, OpenAPI, tables
 * and selectors are all driven from these definitions, so a new kind is one entry here.
 */

/**
 * `status`: the status-only write path; `eviction`: policy Eviction (pods); `scale`: the
 * autoscaling/v1 Scale view of `spec.replicas`; `log`: a pod's container log, served by a hook.
 */
export type Subresource = 'status' | 'eviction' | 'scale' | 'log';

export interface Conversion {
  /** From this version's shape to the stored shape. */
  toStorage(obj: KubeObject): KubeObject;
  /** From the stored shape to this version's shape. */
  fromStorage(obj: KubeObject): KubeObject;
}

export interface ResourceDefinition {
  group: string;
  version: string;
  kind: string;
  plural: string;
  singular: string;
  namespaced: boolean;
  shortNames: readonly string[];
  categories: readonly string[];
  subresources: readonly Subresource[];
  printer: Printer;
  /** Field selector labels beyond metadata.name / metadata.namespace. */
  fieldLabels: Readonly<Record<string, (obj: KubeObject) => string>>;
  /** Top-level fields this kind has; anything else is an unknown field. */
  topLevelFields: ReadonlySet<string>;
  /** Where objects live in the datastore: `/registry/<storagePath>/...`. Shared across versions. */
  storagePath: string;
  nameRule: 'dns-subdomain' | 'dns-label';
  conversion?: Conversion;
  /** Defaults and server-owned fields on create. */
  prepareForCreate?(obj: KubeObject): void;
  /** Defaults kept on every write that is not a status write: filled in when a client leaves them out. */
  applyDefaults?(obj: KubeObject): void;
  validate?(obj: KubeObject): StatusCause[];
  /** Rules about what an update (not a status write) may change, given the stored object. */
  validateUpdate?(next: KubeObject, current: KubeObject): StatusCause[];
  /**
   * Kinds deleted gracefully (pods): the grace period in seconds this deletion gets, given the
   * caller's `gracePeriodSeconds`; 0 removes the object at once. Without it, deletion is immediate.
   */
  deletionGracePeriod?(obj: KubeObject, requested: number | undefined): number;
  /** Names that may not be deleted (the built-in namespaces). */
  undeletable?: ReadonlySet<string>;
  /**
   * Kinds the garbage collector watches (owners and dependents it knows): a DELETE's
   * propagationPolicy Orphan or Foreground puts its finalizer on them (src/apiserver/deletion.ts).
   * Other kinds ignore the policy, since no controller would ever take such a finalizer off.
   */
  garbageCollected?: true;
  /**
   * A DELETE that removes the object at once answers with the object (kube-apiserver's
   * ReturnDeletedObject: pods, namespaces); other kinds answer a Status of Success.
   */
  returnsDeletedObject?: true;
}

export function apiVersionOf(def: Pick<ResourceDefinition, 'group' | 'version'>): string {
  return def.group ? `${def.group}/${def.version}` : def.version;
}

const standardFields = (...extra: string[]): ReadonlySet<string> =>
  new Set(['apiVersion', 'kind', 'metadata', ...extra]);

const str = (obj: KubeObject, ...path: string[]): string => getString(obj, path);

// ---------------------------------------------------------------------------------------------
// Printers

function conditionStatus(obj: KubeObject, type: string): string | undefined {
  const conditions = getPath(obj, ['status', 'conditions']);
  if (!Array.isArray(conditions)) return undefined;
  const match = conditions.find((c) => (c as { type?: unknown }).type === type) as
    | { status?: unknown }
    | undefined;
  return typeof match?.status === 'string' ? match.status : undefined;
}

export function nodeStatusText(node: KubeObject): string {
  // Drover's verdict (Ready, NotReady, Unknown, Down, Unavailable) when the controller gave one;
  // otherwise what the Ready condition says, as kubectl shows it for any Kubernetes node.
  const verdict = node.metadata.labels?.[STATE_LABEL];
  const ready = conditionStatus(node, 'Ready');
  const parts = [verdict ?? (ready === undefined ? 'Unknown' : ready === 'True' ? 'Ready' : 'NotReady')];
  if (getPath(node, ['spec', 'unschedulable']) === true) parts.push('SchedulingDisabled');
  return parts.join(',');
}

export function nodeRoles(node: KubeObject): string {
  const roles = new Set<string>();
  for (const [key, value] of Object.entries(node.metadata.labels ?? {})) {
    if (key.startsWith(ROLE_LABEL_PREFIX)) {
      const role = key.slice(ROLE_LABEL_PREFIX.length);
      if (role) roles.add(role);
    } else if (key === 'kubernetes.io/role' && value) {
      roles.add(value);
    }
  }
  return roles.size ? [...roles].sort().join(',') : '<none>';
}

function nodeAddress(node: KubeObject, type: string): string {
  const addresses = getPath(node, ['status', 'addresses']);
  if (!Array.isArray(addresses)) return '<none>';
  const match = addresses.find((a) => (a as { type?: unknown }).type === type) as
    | { address?: unknown }
    | undefined;
  return typeof match?.address === 'string' ? match.address : '<none>';
}

const orNone = (value: string): string => value || '<none>';

const NODE_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Status', 'The status of the node'),
    column('Roles', 'The roles of the node'),
    AGE_COLUMN,
    column('Version', 'Kubelet Version reported by the node.'),
    column('Internal-IP', 'List of internal IPs for the node.', { priority: 1 }),
    column('External-IP', 'List of external IPs for the node.', { priority: 1 }),
    column('OS-Image', 'OS Image reported by the node from /etc/os-release.', { priority: 1 }),
    column('Kernel-Version', 'Kernel Version reported by the node.', { priority: 1 }),
    column('Container-Runtime', 'Container Runtime Version reported by the node.', { priority: 1 }),
  ],
  cells: (node, now) => [
    node.metadata.name ?? '',
    nodeStatusText(node),
    nodeRoles(node),
    ageOf(node.metadata.creationTimestamp, now),
    str(node, 'status', 'nodeInfo', 'kubeletVersion'),
    nodeAddress(node, 'InternalIP'),
    nodeAddress(node, 'ExternalIP'),
    orNone(str(node, 'status', 'nodeInfo', 'osImage')),
    orNone(str(node, 'status', 'nodeInfo', 'kernelVersion')),
    orNone(str(node, 'status', 'nodeInfo', 'containerRuntimeVersion')),
  ],
};

function eventLastSeen(event: KubeObject, now: number): string {
  const last =
    getPath(event, ['series', 'lastObservedTime']) ??
    getPath(event, ['lastTimestamp']) ??
    getPath(event, ['eventTime']) ??
    getPath(event, ['firstTimestamp']) ??
    event.metadata.creationTimestamp;
  return ageOf(last, now);
}

const EVENT_PRINTER: Printer = {
  columns: [
    column('Last Seen', 'Time since the event was last observed.'),
    column('Type', 'Type of this event (Normal, Warning).'),
    column('Reason', 'Why the action was taken.'),
    column('Object', 'The object that this event is about.'),
    column('Subobject', 'The subobject (field path) this event is about.', { priority: 1 }),
    column('Source', 'The component that reported this event.', { priority: 1 }),
    column('Message', 'A human-readable description of the status of this operation.'),
    column('First Seen', 'Time since the event was first observed.', { priority: 1 }),
    column('Count', 'How many times the event has occurred.', { priority: 1 }),
    column('Name', 'The name of the event.', { priority: 1, format: 'name' }),
  ],
  cells: (event, now) => {
    const kind = str(event, 'involvedObject', 'kind').toLowerCase();
    const name = str(event, 'involvedObject', 'name');
    const source = [str(event, 'source', 'component'), str(event, 'source', 'host')]
      .filter(Boolean)
      .join(', ');
    const count = getPath(event, ['count']);
    return [
      eventLastSeen(event, now),
      str(event, 'type'),
      str(event, 'reason'),
      kind ? `${kind}/${name}` : name,
      str(event, 'involvedObject', 'fieldPath'),
      source || str(event, 'reportingComponent'),
      str(event, 'message'),
      ageOf(getPath(event, ['firstTimestamp']) ?? event.metadata.creationTimestamp, now),
      typeof count === 'number' ? count : 1,
      event.metadata.name ?? '',
    ] satisfies Cell[];
  },
};

const LEASE_PRINTER: Printer = {
  columns: [NAME_COLUMN, column('Holder', 'The holder of the lease.'), AGE_COLUMN],
  cells: (lease, now) => [
    lease.metadata.name ?? '',
    str(lease, 'spec', 'holderIdentity'),
    ageOf(lease.metadata.creationTimestamp, now),
  ],
};

const NAMESPACE_PRINTER: Printer = {
  columns: [NAME_COLUMN, column('Status', 'The status of the namespace'), AGE_COLUMN],
  cells: (ns, now) => [
    ns.metadata.name ?? '',
    str(ns, 'status', 'phase') || 'Active',
    ageOf(ns.metadata.creationTimestamp, now),
  ],
};

const PDB_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Min Available', 'The minimum number of pods that must be available.'),
    column('Max Unavailable', 'The maximum number of pods that may be unavailable.'),
    column('Allowed Disruptions', 'Calculated number of pods that may be disrupted at this time.', {
      type: 'integer',
    }),
    AGE_COLUMN,
  ],
  cells: (pdb, now) => [
    pdb.metadata.name ?? '',
    str(pdb, 'spec', 'minAvailable') || 'N/A',
    str(pdb, 'spec', 'maxUnavailable') || 'N/A',
    Number(getPath(pdb, ['status', 'disruptionsAllowed']) ?? 0),
    ageOf(pdb.metadata.creationTimestamp, now),
  ],
};

// ---------------------------------------------------------------------------------------------
// Events: one stored shape (core/v1), served also as events.k8s.io/v1.

const EVENT_FIELD_RENAMES: readonly [core: string, events: string][] = [
  ['involvedObject', 'regarding'],
  ['message', 'note'],
  ['reportingComponent', 'reportingController'],
  ['source', 'deprecatedSource'],
  ['firstTimestamp', 'deprecatedFirstTimestamp'],
  ['lastTimestamp', 'deprecatedLastTimestamp'],
  ['count', 'deprecatedCount'],
];

function renameFields(obj: KubeObject, pairs: readonly [string, string][], apiVersion: string): KubeObject {
  const out: KubeObject = { ...obj, apiVersion };
  for (const [from, to] of pairs) {
    if (from in out) {
      out[to] = out[from];
      delete out[from];
    }
  }
  return out;
}

const EVENTS_V1_CONVERSION: Conversion = {
  toStorage: (obj) =>
    renameFields(
      obj,
      EVENT_FIELD_RENAMES.map(([core, events]) => [events, core]),
      'v1',
    ),
  fromStorage: (obj) => renameFields(obj, EVENT_FIELD_RENAMES, 'events.k8s.io/v1'),
};

// ---------------------------------------------------------------------------------------------
// Validation helpers

function requireObjectField(obj: KubeObject, field: string, causes: StatusCause[]): void {
  const value = obj[field];
  if (value !== undefined && (typeof value !== 'object' || value === null || Array.isArray(value))) {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be an object', field });
  }
}

function validateLease(lease: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  requireObjectField(lease, 'spec', causes);
  const duration = getPath(lease, ['spec', 'leaseDurationSeconds']);
  if (duration !== undefined && (!Number.isInteger(duration) || (duration as number) <= 0)) {
    causes.push({
      reason: 'FieldValueInvalid',
      message: 'must be a positive integer',
      field: 'spec.leaseDurationSeconds',
    });
  }
  const holder = getPath(lease, ['spec', 'holderIdentity']);
  if (holder !== undefined && holder !== null && typeof holder !== 'string') {
    causes.push({ reason: 'FieldValueInvalid', message: 'must be a string', field: 'spec.holderIdentity' });
  }
  return causes;
}

function validateEvent(event: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  requireObjectField(event, 'involvedObject', causes);
  const involvedNs = getPath(event, ['involvedObject', 'namespace']);
  if (typeof involvedNs === 'string' && involvedNs && involvedNs !== event.metadata.namespace) {
    causes.push({
      reason: 'FieldValueInvalid',
      message: 'does not match event.namespace',
      field: 'involvedObject.namespace',
    });
  }
  return causes;
}

function validateSpecAndStatus(obj: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  requireObjectField(obj, 'spec', causes);
  requireObjectField(obj, 'status', causes);
  return causes;
}

// ---------------------------------------------------------------------------------------------
// The definitions

const EVENT_FIELD_LABELS: Record<string, (obj: KubeObject) => string> = {
  'involvedObject.kind': (e) => str(e, 'involvedObject', 'kind'),
  'involvedObject.namespace': (e) => str(e, 'involvedObject', 'namespace'),
  'involvedObject.name': (e) => str(e, 'involvedObject', 'name'),
  'involvedObject.uid': (e) => str(e, 'involvedObject', 'uid'),
  'involvedObject.apiVersion': (e) => str(e, 'involvedObject', 'apiVersion'),
  'involvedObject.resourceVersion': (e) => str(e, 'involvedObject', 'resourceVersion'),
  'involvedObject.fieldPath': (e) => str(e, 'involvedObject', 'fieldPath'),
  reason: (e) => str(e, 'reason'),
  reportingComponent: (e) => str(e, 'reportingComponent'),
  source: (e) => str(e, 'source', 'component'),
  type: (e) => str(e, 'type'),
};

const CORE_EVENT_FIELDS = [
  'involvedObject',
  'reason',
  'message',
  'source',
  'firstTimestamp',
  'lastTimestamp',
  'count',
  'type',
  'eventTime',
  'series',
  'action',
  'related',
  'reportingComponent',
  'reportingInstance',
];

const BUILT_IN_NAMESPACES = new Set(['default', 'kube-system', 'kube-public', 'kube-node-lease']);

export const RESOURCES: readonly ResourceDefinition[] = [
  {
    group: '',
    version: 'v1',
    kind: 'Namespace',
    plural: 'namespaces',
    singular: 'namespace',
    namespaced: false,
    shortNames: ['ns'],
    categories: [],
    subresources: ['status'],
    printer: NAMESPACE_PRINTER,
    fieldLabels: { 'status.phase': (ns) => str(ns, 'status', 'phase') },
    topLevelFields: standardFields('spec', 'status'),
    storagePath: 'core/namespaces',
    nameRule: 'dns-label',
    prepareForCreate: (ns) => {
      ns.spec = { finalizers: ['kubernetes'], ...(ns.spec as object | undefined) };
      ns.status = { phase: 'Active' };
    },
    validate: validateSpecAndStatus,
    undeletable: new Set(['default', 'kube-system', 'kube-public']),
    returnsDeletedObject: true,
  },
  {
    group: '',
    version: 'v1',
    kind: 'Node',
    plural: 'nodes',
    singular: 'node',
    namespaced: false,
    shortNames: ['no'],
    categories: [],
    subresources: ['status'],
    printer: NODE_PRINTER,
    fieldLabels: { 'spec.unschedulable': (n) => String(getPath(n, ['spec', 'unschedulable']) === true) },
    topLevelFields: standardFields('spec', 'status'),
    storagePath: 'core/nodes',
    nameRule: 'dns-subdomain',
    validate: validateSpecAndStatus,
  },
  {
    group: '',
    version: 'v1',
    kind: 'Pod',
    plural: 'pods',
    singular: 'pod',
    namespaced: true,
    shortNames: ['po'],
    categories: ['all'],
    subresources: ['status', 'eviction', 'log'],
    printer: POD_PRINTER,
    fieldLabels: {
      'spec.nodeName': (p) => str(p, 'spec', 'nodeName'),
      'spec.restartPolicy': (p) => str(p, 'spec', 'restartPolicy'),
      'spec.schedulerName': (p) => str(p, 'spec', 'schedulerName'),
      'spec.serviceAccountName': (p) => str(p, 'spec', 'serviceAccountName'),
      'status.phase': (p) => str(p, 'status', 'phase'),
      'status.podIP': (p) => str(p, 'status', 'podIP'),
      'status.nominatedNodeName': (p) => str(p, 'status', 'nominatedNodeName'),
    },
    topLevelFields: standardFields('spec', 'status'),
    storagePath: 'core/pods',
    nameRule: 'dns-subdomain',
    prepareForCreate: (pod) => {
      // Status is the node's to report; a client cannot create a pod that claims to be running.
      pod.status = { phase: 'Pending' };
    },
    applyDefaults: (pod) => defaultPodSpec(pod.spec),
    validate: validatePod,
    validateUpdate: validatePodUpdate,
    deletionGracePeriod: podDeletionGracePeriod,
    garbageCollected: true,
    returnsDeletedObject: true,
  },
  {
    group: '',
    version: 'v1',
    kind: 'Event',
    plural: 'events',
    singular: 'event',
    namespaced: true,
    shortNames: ['ev'],
    categories: [],
    subresources: [],
    printer: EVENT_PRINTER,
    fieldLabels: EVENT_FIELD_LABELS,
    topLevelFields: standardFields(...CORE_EVENT_FIELDS),
    storagePath: 'core/events',
    nameRule: 'dns-subdomain',
    validate: validateEvent,
  },
  {
    group: 'events.k8s.io',
    version: 'v1',
    kind: 'Event',
    plural: 'events',
    singular: 'event',
    namespaced: true,
    shortNames: ['ev'],
    categories: [],
    subresources: [],
    printer: {
      columns: EVENT_PRINTER.columns,
      cells: (obj, now) => EVENT_PRINTER.cells(EVENTS_V1_CONVERSION.toStorage(obj), now),
    },
    fieldLabels: Object.fromEntries(
      Object.entries(EVENT_FIELD_LABELS).map(([label, get]) => [
        label.replace('involvedObject.', 'regarding.'),
        (obj: KubeObject) => get(EVENTS_V1_CONVERSION.toStorage(obj)),
      ]),
    ),
    topLevelFields: standardFields(
      'eventTime',
      'series',
      'reportingController',
      'reportingInstance',
      'action',
      'reason',
      'regarding',
      'related',
      'note',
      'type',
      'deprecatedSource',
      'deprecatedFirstTimestamp',
      'deprecatedLastTimestamp',
      'deprecatedCount',
    ),
    storagePath: 'core/events',
    nameRule: 'dns-subdomain',
    conversion: EVENTS_V1_CONVERSION,
    validate: (obj) => validateEvent(EVENTS_V1_CONVERSION.toStorage(obj)),
  },
  {
    group: 'coordination.k8s.io',
    version: 'v1',
    kind: 'Lease',
    plural: 'leases',
    singular: 'lease',
    namespaced: true,
    shortNames: [],
    categories: [],
    subresources: [],
    printer: LEASE_PRINTER,
    fieldLabels: {},
    topLevelFields: standardFields('spec'),
    storagePath: 'coordination.k8s.io/leases',
    nameRule: 'dns-subdomain',
    validate: validateLease,
  },
  {
    group: 'apps',
    version: 'v1',
    kind: 'Deployment',
    plural: 'deployments',
    singular: 'deployment',
    namespaced: true,
    shortNames: ['deploy'],
    categories: ['all'],
    subresources: ['status', 'scale'],
    printer: DEPLOYMENT_PRINTER,
    fieldLabels: {},
    topLevelFields: standardFields('spec', 'status'),
    storagePath: 'apps/deployments',
    nameRule: 'dns-subdomain',
    applyDefaults: defaultDeployment,
    validate: validateWorkload,
    garbageCollected: true,
  },
  {
    group: 'apps',
    version: 'v1',
    kind: 'ReplicaSet',
    plural: 'replicasets',
    singular: 'replicaset',
    namespaced: true,
    shortNames: ['rs'],
    categories: ['all'],
    subresources: ['status', 'scale'],
    printer: REPLICASET_PRINTER,
    fieldLabels: { 'status.replicas': (rs) => str(rs, 'status', 'replicas') || '0' },
    topLevelFields: standardFields('spec', 'status'),
    storagePath: 'apps/replicasets',
    nameRule: 'dns-subdomain',
    applyDefaults: defaultReplicaSet,
    validate: validateWorkload,
    garbageCollected: true,
  },
  {
    group: 'apps',
    version: 'v1',
    kind: 'StatefulSet',
    plural: 'statefulsets',
    singular: 'statefulset',
    namespaced: true,
    shortNames: ['sts'],
    categories: ['all'],
    subresources: ['status', 'scale'],
    printer: STATEFULSET_PRINTER,
    fieldLabels: {},
    topLevelFields: standardFields('spec', 'status'),
    storagePath: 'apps/statefulsets',
    nameRule: 'dns-subdomain',
    applyDefaults: defaultStatefulSet,
    validate: validateWorkload,
    garbageCollected: true,
  },
  {
    group: 'policy',
    version: 'v1',
    kind: 'PodDisruptionBudget',
    plural: 'poddisruptionbudgets',
    singular: 'poddisruptionbudget',
    namespaced: true,
    shortNames: ['pdb'],
    categories: [],
    subresources: ['status'],
    printer: PDB_PRINTER,
    fieldLabels: {},
    topLevelFields: standardFields('spec', 'status'),
    storagePath: 'policy/poddisruptionbudgets',
    nameRule: 'dns-subdomain',
    validate: validateSpecAndStatus,
  },
];

export { BUILT_IN_NAMESPACES, DEFAULT_PRINTER };

/** Resources grouped by `group/version` for routing and discovery. */
export class ResourceRegistry {
  private readonly byGroupVersion = new Map<string, Map<string, ResourceDefinition>>();

  constructor(readonly all: readonly ResourceDefinition[] = RESOURCES) {
    for (const def of all) {
      const gv = apiVersionOf(def);
      let resources = this.byGroupVersion.get(gv);
      if (!resources) {
        resources = new Map();
        this.byGroupVersion.set(gv, resources);
      }
      resources.set(def.plural, def);
    }
  }

  lookup(group: string, version: string, plural: string): ResourceDefinition | undefined {
    return this.byGroupVersion.get(group ? `${group}/${version}` : version)?.get(plural);
  }

  hasGroupVersion(group: string, version: string): boolean {
    return this.byGroupVersion.has(group ? `${group}/${version}` : version);
  }

  inGroupVersion(group: string, version: string): ResourceDefinition[] {
    return [...(this.byGroupVersion.get(group ? `${group}/${version}` : version)?.values() ?? [])];
  }

  /** API groups (not the legacy core group) in a stable order, each with its versions. */
  groups(): { name: string; versions: string[] }[] {
    const groups = new Map<string, string[]>();
    for (const def of this.all) {
      if (!def.group) continue;
      const versions = groups.get(def.group) ?? [];
      if (!versions.includes(def.version)) versions.push(def.version);
      groups.set(def.group, versions);
    }
    return [...groups].map(([name, versions]) => ({ name, versions }));
  }
}
