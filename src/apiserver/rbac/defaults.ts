import { aggregateAll } from './aggregation.js';
import {
  AUTHENTICATED_GROUP,
  AUTOUPDATE_ANNOTATION,
  BOOTSTRAPPING_LABEL,
  BOOTSTRAPPING_VALUE,
  type ClusterRole,
  type ClusterRoleBinding,
  MASTERS_GROUP,
  type PolicyRule,
  RBAC_API_VERSION,
  RBAC_GROUP,
  SERVICE_ACCOUNTS_GROUP,
  UNAUTHENTICATED_GROUP,
} from './types.js';

/**
 * The default RBAC policy: the ClusterRoles and ClusterRoleBindings every cluster starts with,
 * written from the Kubernetes documentation's description of its default roles and limited to
 * the resources Drover serves (and those the ServiceAccount, workload and service work adds).
 * Every object carries `kubernetes.io/bootstrapping: rbac-defaults` and
 * `rbac.authorization.kubernetes.io/autoupdate: "true"`: the server brings them back to this
 * shape at start unless an administrator sets the annotation to "false" (see reconcile.ts).
 *
 * Drover's own components need no roles here: controllers run inside the server and call the
 * store directly, and agents are judged by the node authorizer.
 */

export const AGGREGATE_TO_ADMIN = 'rbac.authorization.k8s.io/aggregate-to-admin';
export const AGGREGATE_TO_EDIT = 'rbac.authorization.k8s.io/aggregate-to-edit';
export const AGGREGATE_TO_VIEW = 'rbac.authorization.k8s.io/aggregate-to-view';

/** A group of users Kubernetes defines for metrics scrapers; Drover issues no such credential itself. */
export const MONITORING_GROUP = 'system:monitoring';

const READ = ['get', 'list', 'watch'];
const WRITE = ['create', 'delete', 'deletecollection', 'patch', 'update'];

function rule(verbs: string[], apiGroups: string[], resources: string[]): PolicyRule {
  return { verbs, apiGroups, resources };
}

function urls(verbs: string[], nonResourceURLs: string[]): PolicyRule {
  return { verbs, nonResourceURLs };
}

function clusterRole(
  name: string,
  rules: PolicyRule[],
  options: { labels?: Record<string, string>; aggregateFrom?: string } = {},
): ClusterRole {
  return {
    apiVersion: RBAC_API_VERSION,
    kind: 'ClusterRole',
    metadata: {
      name,
      labels: { [BOOTSTRAPPING_LABEL]: BOOTSTRAPPING_VALUE, ...options.labels },
      annotations: { [AUTOUPDATE_ANNOTATION]: 'true' },
    },
    ...(options.aggregateFrom ? { aggregationRule: { clusterRoleSelectors: [{ matchLabels: { [options.aggregateFrom]: 'true' } }] } } : {}),
    rules,
  };
}

function groupBinding(name: string, role: string, groups: string[]): ClusterRoleBinding {
  return {
    apiVersion: RBAC_API_VERSION,
    kind: 'ClusterRoleBinding',
    metadata: {
      name,
      labels: { [BOOTSTRAPPING_LABEL]: BOOTSTRAPPING_VALUE },
      annotations: { [AUTOUPDATE_ANNOTATION]: 'true' },
    },
    roleRef: { apiGroup: RBAC_GROUP, kind: 'ClusterRole', name: role },
    subjects: groups.map((group) => ({ kind: 'Group', apiGroup: RBAC_GROUP, name: group })),
  };
}

/** Read-only access to a namespace's workloads, their status and configuration; not Secrets. */
const VIEW_RULES: PolicyRule[] = [
  rule(READ, [''], [
    'configmaps',
    'endpoints',
    'events',
    'namespaces',
    'namespaces/status',
    'pods',
    'pods/log',
    'pods/status',
    'serviceaccounts',
    'services',
    'services/status',
  ]),
  rule(READ, ['apps'], [
    'controllerrevisions',
    'daemonsets',
    'daemonsets/status',
    'deployments',
    'deployments/scale',
    'deployments/status',
    'replicasets',
    'replicasets/scale',
    'replicasets/status',
    'statefulsets',
    'statefulsets/scale',
    'statefulsets/status',
  ]),
  rule(READ, ['batch'], ['cronjobs', 'cronjobs/status', 'jobs', 'jobs/status']),
  rule(READ, ['policy'], ['poddisruptionbudgets', 'poddisruptionbudgets/status']),
  rule(READ, ['discovery.k8s.io'], ['endpointslices']),
  rule(READ, ['events.k8s.io'], ['events']),
];

/**
 * Read-write access to a namespace's workloads, Secrets and ServiceAccounts, running commands in
 * pods, and acting as any of the namespace's ServiceAccounts (a pod can run as any of them, so an
 * editor can get their power anyway). Not Endpoints or EndpointSlices: writing those would let an
 * editor send a Service's traffic anywhere, which Kubernetes stopped allowing in 1.22.
 */
const EDIT_RULES: PolicyRule[] = [
  rule(READ, [''], ['pods/attach', 'pods/exec', 'pods/portforward', 'secrets']),
  rule(WRITE, [''], ['pods', 'pods/attach', 'pods/exec', 'pods/portforward']),
  rule(['create'], [''], ['pods/eviction']),
  rule(WRITE, [''], ['configmaps', 'events', 'secrets', 'serviceaccounts', 'services']),
  rule(['create'], [''], ['serviceaccounts/token']),
  rule(['impersonate'], [''], ['serviceaccounts']),
  rule(WRITE, ['apps'], [
    'daemonsets',
    'deployments',
    'deployments/scale',
    'replicasets',
    'replicasets/scale',
    'statefulsets',
    'statefulsets/scale',
  ]),
  rule(WRITE, ['batch'], ['cronjobs', 'jobs']),
  rule(WRITE, ['policy'], ['poddisruptionbudgets']),
];

/** What an admin of a namespace adds to edit: its Roles and RoleBindings. */
const ADMIN_RULES: PolicyRule[] = [rule([...READ, ...WRITE], [RBAC_GROUP], ['rolebindings', 'roles'])];

/**
 * The default ClusterRoles, with the rules of the aggregated roles (admin ⊇ edit ⊇ view, each
 * gathered from the `system:aggregate-to-*` role and the role below it) already computed, so the
 * policy is usable before the aggregation controller first runs.
 */
export function defaultClusterRoles(): ClusterRole[] {
  const roles = [
    clusterRole('cluster-admin', [rule(['*'], ['*'], ['*']), urls(['*'], ['*'])]),
    clusterRole('admin', [], { aggregateFrom: AGGREGATE_TO_ADMIN }),
    clusterRole('edit', [], { aggregateFrom: AGGREGATE_TO_EDIT, labels: { [AGGREGATE_TO_ADMIN]: 'true' } }),
    clusterRole('view', [], { aggregateFrom: AGGREGATE_TO_VIEW, labels: { [AGGREGATE_TO_EDIT]: 'true' } }),
    clusterRole('system:aggregate-to-admin', ADMIN_RULES, { labels: { [AGGREGATE_TO_ADMIN]: 'true' } }),
    clusterRole('system:aggregate-to-edit', EDIT_RULES, { labels: { [AGGREGATE_TO_EDIT]: 'true' } }),
    clusterRole('system:aggregate-to-view', VIEW_RULES, { labels: { [AGGREGATE_TO_VIEW]: 'true' } }),
    // What metrics-server's aggregated role grants: `kubectl top` for whoever may view.
    clusterRole('system:aggregated-metrics-reader', [rule(['get', 'list'], ['metrics.k8s.io'], ['nodes', 'pods'])], {
      labels: { [AGGREGATE_TO_VIEW]: 'true', [AGGREGATE_TO_EDIT]: 'true', [AGGREGATE_TO_ADMIN]: 'true' },
    }),
    // Every signed-in user may ask what they may do and who they are.
    clusterRole('system:basic-user', [
      rule(['create'], ['authorization.k8s.io'], ['selfsubjectaccessreviews', 'selfsubjectrulesreviews']),
      rule(['create'], ['authentication.k8s.io'], ['selfsubjectreviews']),
    ]),
    // What a client needs to find the API: discovery, OpenAPI, health and version.
    clusterRole('system:discovery', [
      urls(['get'], ['/api', '/api/*', '/apis', '/apis/*', '/healthz', '/livez', '/openapi', '/openapi/*', '/readyz', '/version', '/version/']),
    ]),
    // What may be told to anyone, signed in or not.
    clusterRole('system:public-info-viewer', [urls(['get'], ['/healthz', '/livez', '/readyz', '/version', '/version/'])]),
    // The ServiceAccount token issuer's OIDC discovery, for verifiers of those tokens.
    clusterRole('system:service-account-issuer-discovery', [
      urls(['get'], ['/.well-known/openid-configuration', '/.well-known/openid-configuration/', '/openid/v1/jwks', '/openid/v1/jwks/']),
    ]),
    // Metrics and detailed health, for scrapers.
    clusterRole('system:monitoring', [
      urls(['get'], ['/healthz', '/healthz/*', '/livez', '/livez/*', '/metrics', '/metrics/slis', '/readyz', '/readyz/*']),
    ]),
  ];
  return aggregateAll(roles).clusterRoles;
}

export function defaultClusterRoleBindings(): ClusterRoleBinding[] {
  return [
    groupBinding('cluster-admin', 'cluster-admin', [MASTERS_GROUP]),
    groupBinding('system:basic-user', 'system:basic-user', [AUTHENTICATED_GROUP]),
    groupBinding('system:discovery', 'system:discovery', [AUTHENTICATED_GROUP]),
    groupBinding('system:public-info-viewer', 'system:public-info-viewer', [AUTHENTICATED_GROUP, UNAUTHENTICATED_GROUP]),
    groupBinding('system:service-account-issuer-discovery', 'system:service-account-issuer-discovery', [SERVICE_ACCOUNTS_GROUP]),
    groupBinding('system:monitoring', 'system:monitoring', [MONITORING_GROUP]),
  ];
}
