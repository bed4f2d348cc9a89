/**
 * Strategic-merge-patch metadata: which lists merge, and by what key. Kubernetes reads this from
 * the `patchStrategy` / `patchMergeKey` struct tags of its Go types; Drover has no Go types, so
 * the tags of the kinds it serves are restated here. Anything not described is patched as in a
 * JSON merge patch: maps merge, lists are replaced.
 */

/**
 * `merge`: a list is merged with the live one (by `mergeKey` for objects, as a set for
 * primitives). `replace`: the value is replaced as a whole, maps included. Absent: maps merge,
 * lists are replaced.
 */
export type PatchStrategy = 'merge' | 'replace';

/** One node of the metadata tree: a field, or the root object. */
export interface PatchMeta {
  readonly strategy?: PatchStrategy;
  /** For a merge list of objects, the field that identifies an element. */
  readonly mergeKey?: string;
  /** The fields of this object, or of every element when this is a list of objects. */
  readonly children?: Readonly<Record<string, PatchMeta>>;
}

/** The metadata of `field` below `meta`, if any. */
export function childMeta(meta: PatchMeta | undefined, field: string): PatchMeta | undefined {
  const children = meta?.children;
  // Own keys only: field names come from the patch, and `constructor` must not find Object's.
  return children !== undefined && Object.hasOwn(children, field) ? children[field] : undefined;
}

function mergeByKey(mergeKey: string, children?: Record<string, PatchMeta>): PatchMeta {
  return children === undefined ? { strategy: 'merge', mergeKey } : { strategy: 'merge', mergeKey, children };
}

const PRIMITIVE_SET: PatchMeta = { strategy: 'merge' };
const CONDITIONS = mergeByKey('type');

// labels and annotations are maps, which merge without being listed.
const OBJECT_META: PatchMeta = {
  children: {
    finalizers: PRIMITIVE_SET,
    ownerReferences: mergeByKey('uid'),
  },
};

// Container and EphemeralContainer carry the same tags.
const CONTAINER: Record<string, PatchMeta> = {
  ports: mergeByKey('containerPort'),
  env: mergeByKey('name'),
  volumeMounts: mergeByKey('mountPath'),
  volumeDevices: mergeByKey('devicePath'),
};

const POD_SPEC: PatchMeta = {
  children: {
    containers: mergeByKey('name', CONTAINER),
    initContainers: mergeByKey('name', CONTAINER),
    ephemeralContainers: mergeByKey('name', CONTAINER),
    volumes: mergeByKey('name'),
    imagePullSecrets: mergeByKey('name'),
    hostAliases: mergeByKey('ip'),
    topologySpreadConstraints: mergeByKey('topologyKey'),
    schedulingGates: mergeByKey('name'),
    resourceClaims: mergeByKey('name'),
  },
};

// containerStatuses and the other status lists have no strategy: they are replaced.
const POD_STATUS: PatchMeta = {
  children: {
    conditions: CONDITIONS,
    podIPs: mergeByKey('ip'),
    hostIPs: mergeByKey('ip'),
  },
};

const POD_TEMPLATE_SPEC: PatchMeta = { children: { metadata: OBJECT_META, spec: POD_SPEC } };

function kindMeta(fields: Record<string, PatchMeta>): PatchMeta {
  return { children: { metadata: OBJECT_META, ...fields } };
}

/** A workload whose pods come from `spec.template`, with conditions in its status. */
const WORKLOAD = kindMeta({
  spec: { children: { template: POD_TEMPLATE_SPEC } },
  status: { children: { conditions: CONDITIONS } },
});

const OBJECT_META_ONLY = kindMeta({});

const KINDS: Readonly<Record<string, PatchMeta>> = {
  Pod: kindMeta({ spec: POD_SPEC, status: POD_STATUS }),
  // spec.taints has no strategy in Kubernetes: a taint list in a patch replaces the node's.
  Node: kindMeta({
    spec: { children: { podCIDRs: PRIMITIVE_SET } },
    status: { children: { conditions: CONDITIONS, addresses: mergeByKey('type') } },
  }),
  PodTemplate: kindMeta({ template: POD_TEMPLATE_SPEC }),
  Deployment: WORKLOAD,
  ReplicaSet: WORKLOAD,
  ReplicationController: WORKLOAD,
  StatefulSet: WORKLOAD,
  DaemonSet: WORKLOAD,
  Job: WORKLOAD,
  CronJob: kindMeta({
    spec: {
      children: {
        jobTemplate: { children: { metadata: OBJECT_META, spec: { children: { template: POD_TEMPLATE_SPEC } } } },
      },
    },
  }),
};

/** The patch metadata for objects of `kind`; kinds without list rules get only ObjectMeta's. */
export function patchMetaForKind(kind: string): PatchMeta {
  return Object.hasOwn(KINDS, kind) ? KINDS[kind] : OBJECT_META_ONLY;
}
