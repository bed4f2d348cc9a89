import { ROLE_LABEL_PREFIX, STATE_LABEL } from '../../node-protocol/names.js';
import { type ResourceDefinition, standardFields } from '../definition.js';
import { getPath, getString, type KubeObject } from '../objects.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';
import { validateSpecAndStatus } from './shared.js';

/** v1 Node: its printer (Drover's node verdict in STATUS) and its definition. Agents write their own. */

const str = (obj: KubeObject, ...path: string[]): string => getString(obj, path);

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

export const NODE_DEFINITION: ResourceDefinition = {
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
};
