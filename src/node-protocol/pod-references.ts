/**
 * Which ConfigMaps and Secrets a pod refers to: what its node's agent reads to run it, and so what
 * the node authorizer lets that node read (Kubernetes' node authorizer graph has the same edges).
 * One definition, shared by the agent and the API server, so the two never disagree about what a
 * node needs. A leaf: it reads plain JSON and imports nothing.
 */

export type ConfigKind = 'ConfigMap' | 'Secret';

export interface ConfigReference {
  kind: ConfigKind;
  namespace: string;
  name: string;
}

/** The parts of a pod this module reads. */
export interface PodView {
  metadata: { namespace?: string };
  spec?: unknown;
}

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

function list(value: unknown): Json[] {
  return Array.isArray(value) ? value.filter(isObject) : [];
}

function nameAt(value: unknown, field: string): string | undefined {
  if (!isObject(value)) return undefined;
  const name = value[field];
  return typeof name === 'string' && name ? name : undefined;
}

/** `kind/namespace/name`: one key per object, for sets and maps. */
export function referenceKey(ref: ConfigReference): string {
  return `${ref.kind}/${ref.namespace}/${ref.name}`;
}

/**
 * Every ConfigMap and Secret `pod` names: in its volumes (configMap, secret, and the sources of a
 * projected volume), in the env and envFrom of its containers, init containers and ephemeral
 * containers, and its imagePullSecrets. Each once, in a stable order.
 */
export function podConfigReferences(pod: PodView): ConfigReference[] {
  const namespace = pod.metadata.namespace || 'default';
  const spec = isObject(pod.spec) ? pod.spec : {};
  const found = new Map<string, ConfigReference>();
  const add = (kind: ConfigKind, name: string | undefined): void => {
    if (!name) return;
    const ref = { kind, namespace, name };
    found.set(referenceKey(ref), ref);
  };
  for (const volume of list(spec.volumes)) {
    add('ConfigMap', nameAt(volume.configMap, 'name'));
    add('Secret', nameAt(volume.secret, 'secretName'));
    const projected = isObject(volume.projected) ? volume.projected : {};
    for (const source of list(projected.sources)) {
      add('ConfigMap', nameAt(source.configMap, 'name'));
      add('Secret', nameAt(source.secret, 'name'));
    }
  }
  for (const field of ['containers', 'initContainers', 'ephemeralContainers']) {
    for (const container of list(spec[field])) {
      for (const env of list(container.env)) {
        const from = isObject(env.valueFrom) ? env.valueFrom : {};
        add('ConfigMap', nameAt(from.configMapKeyRef, 'name'));
        add('Secret', nameAt(from.secretKeyRef, 'name'));
      }
      for (const source of list(container.envFrom)) {
        add('ConfigMap', nameAt(source.configMapRef, 'name'));
        add('Secret', nameAt(source.secretRef, 'name'));
      }
    }
  }
  for (const secret of list(spec.imagePullSecrets)) add('Secret', nameAt(secret, 'name'));
  return [...found.values()].sort((a, b) => referenceKey(a).localeCompare(referenceKey(b)));
}
