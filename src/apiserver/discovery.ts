import { apiVersionOf, type ResourceDefinition } from './definition.js';
import type { ResourceRegistry } from './resources.js';

/**
 * Discovery documents. Legacy discovery (/api, /apis, /api/v1, /apis/g/v) is what every kubectl
 * from 1.20 on understands; aggregated discovery is served only when the Accept header asks for
 * it, because kubectl 1.20 fails to decode it.
 */

export const AGGREGATED_CONTENT_TYPE = {
  v2: 'application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList',
  v2beta1: 'application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList',
} as const;

const ALL_VERBS = ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'];

/** Kinds that are never stored take only create (the access reviews) or only get and list (metrics). */
const verbsOf = (def: ResourceDefinition): string[] => (def.respondToCreate ? ['create'] : def.reads ? ['get', 'list'] : ALL_VERBS);

const serverAddresses = [{ clientCIDR: '0.0.0.0/0', serverAddress: '' }];

export function apiVersions(): object {
  return { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: serverAddresses };
}

export function apiGroupList(registry: ResourceRegistry): object {
  return {
    kind: 'APIGroupList',
    apiVersion: 'v1',
    groups: registry.groups().map((group) => apiGroup(group.name, group.versions)),
  };
}

export function apiGroup(name: string, versions: string[]): object {
  const versionEntries = versions.map((version) => ({ groupVersion: `${name}/${version}`, version }));
  return {
    kind: 'APIGroup',
    apiVersion: 'v1',
    name,
    versions: versionEntries,
    preferredVersion: versionEntries[0],
  };
}

function subresourceVerbs(sub: string): string[] {
  if (sub === 'eviction' || sub === 'token') return ['create'];
  if (sub === 'log') return ['get'];
  if (sub === 'finalize') return ['update'];
  if (sub === 'exec' || sub === 'attach' || sub === 'portforward') return ['create', 'get'];
  return ['get', 'patch', 'update'];
}

/** The kind a subresource answers with, where it is not the resource's own. */
const SUBRESOURCE_KINDS: Readonly<Record<string, { group: string; version: string; kind: string }>> = {
  eviction: { group: 'policy', version: 'v1', kind: 'Eviction' },
  scale: { group: 'autoscaling', version: 'v1', kind: 'Scale' },
  token: { group: 'authentication.k8s.io', version: 'v1', kind: 'TokenRequest' },
  exec: { group: '', version: 'v1', kind: 'PodExecOptions' },
  attach: { group: '', version: 'v1', kind: 'PodAttachOptions' },
  portforward: { group: '', version: 'v1', kind: 'PodPortForwardOptions' },
};

export function apiResourceList(registry: ResourceRegistry, group: string, version: string): object {
  const resources: object[] = [];
  for (const def of registry.inGroupVersion(group, version)) {
    resources.push({
      name: def.plural,
      singularName: def.singular,
      namespaced: def.namespaced,
      kind: def.kind,
      verbs: verbsOf(def),
      ...(def.shortNames.length ? { shortNames: def.shortNames } : {}),
      ...(def.categories.length ? { categories: def.categories } : {}),
    });
    for (const sub of def.subresources) {
      resources.push({
        name: `${def.plural}/${sub}`,
        singularName: '',
        namespaced: def.namespaced,
        ...(SUBRESOURCE_KINDS[sub] ?? { kind: def.kind }),
        verbs: subresourceVerbs(sub),
      });
    }
  }
  return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: apiVersionOf({ group, version }), resources };
}

function discoveryResource(def: ResourceDefinition): object {
  return {
    resource: def.plural,
    responseKind: { group: def.group, version: def.version, kind: def.kind },
    scope: def.namespaced ? 'Namespaced' : 'Cluster',
    singularResource: def.singular,
    verbs: verbsOf(def),
    ...(def.shortNames.length ? { shortNames: def.shortNames } : {}),
    ...(def.categories.length ? { categories: def.categories } : {}),
    ...(def.subresources.length
      ? {
          subresources: def.subresources.map((sub) => ({
            subresource: sub,
            responseKind: SUBRESOURCE_KINDS[sub] ?? { group: def.group, version: def.version, kind: def.kind },
            verbs: subresourceVerbs(sub),
          })),
        }
      : {}),
  };
}

/** `/api` (legacy=true) or `/apis` as an APIGroupDiscoveryList. */
export function aggregatedDiscovery(registry: ResourceRegistry, legacy: boolean, version: 'v2' | 'v2beta1'): object {
  const groups = legacy ? [{ name: '', versions: ['v1'] }] : registry.groups();
  return {
    kind: 'APIGroupDiscoveryList',
    apiVersion: `apidiscovery.k8s.io/${version}`,
    metadata: {},
    items: groups.map((group) => ({
      metadata: { name: group.name, creationTimestamp: null },
      versions: group.versions.map((v) => ({
        version: v,
        resources: registry.inGroupVersion(group.name, v).map(discoveryResource),
        freshness: 'Current',
      })),
    })),
  };
}
