/**
 * rbac.authorization.k8s.io/v1 kinds (k8s.io/api/rbac/v1/generated.proto), which kubectl 1.32's
 * `create role`, `create clusterrole`, `create rolebinding` and `create clusterrolebinding` send
 * as protobuf: Role and ClusterRole {1 metadata, 2 rules, 3 aggregationRule (ClusterRole)},
 * RoleBinding and ClusterRoleBinding {1 metadata, 2 subjects, 3 roleRef}.
 */

import { inOrder, type Json, listOrUndefined, nonEmpty } from './go-json.js';
import { decodeLabelSelector, decodeObjectMeta } from './meta.js';
import { bytes, embedded, parseMessage, str } from './reader.js';

const RBAC_API_VERSION = 'rbac.authorization.k8s.io/v1';

/** PolicyRule {1 verbs, 2 apiGroups, 3 resources, 4 resourceNames, 5 nonResourceURLs}; verbs has no omitempty in Go. */
function decodePolicyRule(buf: Uint8Array): Json {
  const m = 'PolicyRule';
  const lists: Record<number, string[]> = { 1: [], 2: [], 3: [], 4: [], 5: [] };
  for (const f of parseMessage(buf, m)) lists[f.field]?.push(str(f, m));
  return inOrder(
    {
      verbs: lists[1],
      apiGroups: listOrUndefined(lists[2]!),
      resources: listOrUndefined(lists[3]!),
      resourceNames: listOrUndefined(lists[4]!),
      nonResourceURLs: listOrUndefined(lists[5]!),
    },
    ['verbs', 'apiGroups', 'resources', 'resourceNames', 'nonResourceURLs'],
  );
}

function decodeRole(raw: Uint8Array, kind: 'Role' | 'ClusterRole'): Json {
  const fields = parseMessage(raw, kind);
  const rules = fields.filter((f) => f.field === 2).map((f) => decodePolicyRule(bytes(f, kind)));
  const out: Json = { apiVersion: RBAC_API_VERSION, kind, metadata: decodeObjectMeta(embedded(fields, 1, kind)), rules };
  const aggregation = kind === 'ClusterRole' ? embedded(fields, 3, kind) : undefined;
  if (aggregation) {
    // AggregationRule {1 clusterRoleSelectors}
    const selectors = parseMessage(aggregation, 'AggregationRule')
      .filter((f) => f.field === 1)
      .map((f) => decodeLabelSelector(bytes(f, 'AggregationRule'), kind));
    out.aggregationRule = selectors.length ? { clusterRoleSelectors: selectors } : {};
  }
  return out;
}

export const decodeRbacRole = (raw: Uint8Array): Json => decodeRole(raw, 'Role');
export const decodeRbacClusterRole = (raw: Uint8Array): Json => decodeRole(raw, 'ClusterRole');

/** Subject {1 kind, 2 apiGroup, 3 name, 4 namespace}. */
function decodeSubject(buf: Uint8Array): Json {
  const m = 'Subject';
  const values: Record<number, string> = {};
  for (const f of parseMessage(buf, m)) if (f.field >= 1 && f.field <= 4) values[f.field] = str(f, m);
  return inOrder(
    { kind: values[1] ?? '', apiGroup: nonEmpty(values[2] ?? ''), name: values[3] ?? '', namespace: nonEmpty(values[4] ?? '') },
    ['kind', 'apiGroup', 'name', 'namespace'],
  );
}

/** RoleRef {1 apiGroup, 2 kind, 3 name}. */
function decodeRoleRef(buf: Uint8Array | undefined): Json {
  const m = 'RoleRef';
  const values: Record<number, string> = {};
  if (buf) for (const f of parseMessage(buf, m)) if (f.field >= 1 && f.field <= 3) values[f.field] = str(f, m);
  return { apiGroup: values[1] ?? '', kind: values[2] ?? '', name: values[3] ?? '' };
}

function decodeBinding(raw: Uint8Array, kind: 'RoleBinding' | 'ClusterRoleBinding'): Json {
  const fields = parseMessage(raw, kind);
  const subjects = fields.filter((f) => f.field === 2).map((f) => decodeSubject(bytes(f, kind)));
  return inOrder(
    {
      apiVersion: RBAC_API_VERSION,
      kind,
      metadata: decodeObjectMeta(embedded(fields, 1, kind)),
      subjects: listOrUndefined(subjects),
      roleRef: decodeRoleRef(embedded(fields, 3, kind)),
    },
    ['apiVersion', 'kind', 'metadata', 'subjects', 'roleRef'],
  );
}

export const decodeRbacRoleBinding = (raw: Uint8Array): Json => decodeBinding(raw, 'RoleBinding');
export const decodeRbacClusterRoleBinding = (raw: Uint8Array): Json => decodeBinding(raw, 'ClusterRoleBinding');
