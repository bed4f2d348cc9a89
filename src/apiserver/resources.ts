import { apiVersionOf, checkDefinition, type ResourceDefinition } from './definition.js';
import { RESOURCES } from './kinds/index.js';

export { BUILT_IN_NAMESPACES } from './kinds/namespaces.js';

/**
 * The kinds served, grouped by `group/version` for routing and discovery. The kinds themselves
 * are data plus hooks in src/apiserver/kinds/ (their shape: src/apiserver/definition.ts).
 */
export class ResourceRegistry {
  private readonly byGroupVersion = new Map<string, Map<string, ResourceDefinition>>();

  constructor(readonly all: readonly ResourceDefinition[] = RESOURCES) {
    for (const def of all) {
      checkDefinition(def);
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
