import { apiVersionOf, checkDefinition, type ResourceDefinition } from './definition.js';
import { RESOURCES } from './kinds/index.js';

export { BUILT_IN_NAMESPACES } from './kinds/namespaces.js';

/**
 * The kinds served, grouped by `group/version` for routing and discovery. The built-in kinds are
 * data plus hooks in src/apiserver/kinds/ (their shape: src/apiserver/definition.ts) and never
 * change; the kinds of CustomResourceDefinitions (src/apiserver/extensions/) come and go while
 * the server runs, each CRD's set replaced or removed as a whole by `setDynamic`/`removeDynamic`.
 * `generation` counts those changes, so derived documents (OpenAPI) know when to rebuild.
 */
export class ResourceRegistry {
  private byGroupVersion = new Map<string, Map<string, ResourceDefinition>>();
  private readonly builtIn: readonly ResourceDefinition[];
  /** Each CRD's kinds (one per served version), by the CRD's name. */
  private readonly dynamic = new Map<string, readonly ResourceDefinition[]>();
  private allKinds: readonly ResourceDefinition[];
  private changes = 0;

  constructor(all: readonly ResourceDefinition[] = RESOURCES) {
    for (const def of all) checkDefinition(def);
    this.builtIn = all;
    this.allKinds = all;
    this.index();
  }

  /** Every kind served now: the built-in ones, then those of CRDs. */
  get all(): readonly ResourceDefinition[] {
    return this.allKinds;
  }

  /** Bumped at every change of the dynamic kinds. */
  get generation(): number {
    return this.changes;
  }

  /** The built-in kinds only (what a CRD may not shadow). */
  get builtInKinds(): readonly ResourceDefinition[] {
    return this.builtIn;
  }

  /** Serves `defs` for the CRD named `owner`, replacing what it served before. */
  setDynamic(owner: string, defs: readonly ResourceDefinition[]): void {
    for (const def of defs) checkDefinition(def);
    this.dynamic.set(owner, defs);
    this.rebuild();
  }

  removeDynamic(owner: string): void {
    if (this.dynamic.delete(owner)) this.rebuild();
  }

  /** The CRD names whose kinds are served now. */
  dynamicOwners(): string[] {
    return [...this.dynamic.keys()];
  }

  private rebuild(): void {
    this.allKinds = [...this.builtIn, ...[...this.dynamic.values()].flat()];
    this.changes++;
    this.index();
  }

  private index(): void {
    // A new map swapped in whole: a request in flight keeps a consistent view.
    const byGroupVersion = new Map<string, Map<string, ResourceDefinition>>();
    for (const def of this.allKinds) {
      const gv = apiVersionOf(def);
      let resources = byGroupVersion.get(gv);
      if (!resources) {
        resources = new Map();
        byGroupVersion.set(gv, resources);
      }
      // The first wins: a built-in kind is never shadowed by a CRD.
      if (!resources.has(def.plural)) resources.set(def.plural, def);
    }
    this.byGroupVersion = byGroupVersion;
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

  /**
   * API groups (not the legacy core group) in a stable order, each with its versions: built-in
   * groups in definition order; a CRD group's versions by kube's version priority (GA before
   * beta before alpha, higher first), so its preferred version is the first.
   */
  groups(): { name: string; versions: string[] }[] {
    const groups = new Map<string, string[]>();
    const builtInGroups = new Set(this.builtIn.map((def) => def.group));
    for (const def of this.allKinds) {
      if (!def.group) continue;
      const versions = groups.get(def.group) ?? [];
      if (!versions.includes(def.version)) versions.push(def.version);
      groups.set(def.group, versions);
    }
    return [...groups].map(([name, versions]) => ({
      name,
      versions: builtInGroups.has(name) ? versions : [...versions].sort(compareKubeVersions),
    }));
  }
}

/** `v2` → [2, 3 (GA), 0]; `v1beta2` → [1, 2, 2]; anything else sorts after, alphabetically. */
function versionRank(version: string): [number, number, number] | undefined {
  const match = /^v(\d+)(?:(alpha|beta)(\d+))?$/.exec(version);
  if (!match) return undefined;
  const stage = match[2] === 'alpha' ? 1 : match[2] === 'beta' ? 2 : 3;
  return [Number(match[1]), stage, Number(match[3] ?? 0)];
}

/** Kubernetes' version priority order (apimachinery's CompareKubeAwareVersionStrings), highest first. */
export function compareKubeVersions(a: string, b: string): number {
  const ra = versionRank(a);
  const rb = versionRank(b);
  if (!ra || !rb) return ra ? -1 : rb ? 1 : a.localeCompare(b);
  if (ra[1] !== rb[1]) return rb[1] - ra[1];
  if (ra[0] !== rb[0]) return rb[0] - ra[0];
  return rb[2] - ra[2];
}
