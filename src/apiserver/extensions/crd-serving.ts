import type { Logger } from '../../logging/logger.js';
import type { ResourceDefinition } from '../definition.js';
import { ApiError, errors } from '../errors.js';
import { isJsonObject, jsonEqual } from '../json.js';
import { type KubeObject, kubeTime } from '../objects.js';
import type { ResourceRegistry } from '../resources.js';
import { parseSelection } from '../selection.js';
import type { ObjectStore } from '../storage.js';
import type { ObjectWatch } from '../storage-types.js';
import { CRD_CLEANUP_FINALIZER, CRD_DEFINITION } from './crd-kind.js';
import { crdSpec } from './crd-validation.js';
import { customResourceKinds } from './custom-resources.js';

/**
 * What makes a CRD served, on every API server: a watch on CustomResourceDefinitions in the store
 * (not the write path of the server that took the create, so every server of an HA cluster
 * follows within a watch delivery). For each CRD it checks the names (kube's naming controller),
 * serves its versions or stops, writes status.conditions (NamesAccepted, Established,
 * Terminating) and acceptedNames, and for a CRD being deleted removes its objects and then the
 * cleanup finalizer (kube's finalizer controller). Status writes are compare-and-swaps computed
 * from the stored CRD, so servers doing the same work at once agree and only one write lands.
 */

const RETRY_MS = 1000;

interface Served {
  /** uid, generation and whether it is terminating: what the served kinds were built from. */
  key: string;
}

type Condition = { type: string; status: string; reason: string; message: string; lastTransitionTime?: string };

export class CrdServing {
  private watch: ObjectWatch | undefined;
  private stopped = false;
  private retry: NodeJS.Timeout | undefined;
  private readonly served = new Map<string, Served>();
  private readonly cleaning = new Set<string>();
  private readonly crds = new Map<string, KubeObject>();

  constructor(
    private readonly store: ObjectStore,
    private readonly registry: ResourceRegistry,
    private readonly logger: Logger,
  ) {}

  async start(): Promise<void> {
    await this.sync();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retry);
    this.watch?.cancel();
  }

  /** List every CRD, serve what is listed, drop what is not, then follow changes from there. */
  private async sync(): Promise<void> {
    this.watch?.cancel();
    this.watch = undefined;
    const selection = parseSelection(CRD_DEFINITION, undefined, undefined);
    const list = await this.store.list(CRD_DEFINITION, undefined, selection);
    const names = new Set(list.items.map((crd) => crd.metadata.name ?? ''));
    for (const name of [...this.crds.keys()]) if (!names.has(name)) this.removed(name);
    for (const crd of list.items) this.changed(crd);
    if (this.stopped) return;
    this.watch = await this.store.watch(CRD_DEFINITION, undefined, list.resourceVersion, selection, {
      event: (type, crd) => (type === 'DELETED' ? this.removed(crd.metadata.name ?? '') : this.changed(crd)),
      progress: () => {},
      error: (error) => {
        this.logger.debug({ err: error }, 'the CustomResourceDefinition watch ended; listing again');
        this.scheduleSync();
      },
    });
  }

  private scheduleSync(): void {
    if (this.stopped || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      this.sync().catch((error: unknown) => {
        this.logger.warn({ err: error }, 'listing CustomResourceDefinitions failed; retrying');
        this.scheduleSync();
      });
    }, RETRY_MS);
    this.retry.unref();
  }

  private removed(name: string): void {
    const gone = this.crds.get(name);
    this.crds.delete(name);
    this.served.delete(name);
    this.registry.removeDynamic(name);
    // Names it held may now go to another CRD of its group (kube requeues the group likewise).
    if (gone) {
      const group = crdSpec(gone).group;
      for (const other of [...this.crds.values()]) if (crdSpec(other).group === group && !this.served.has(other.metadata.name ?? '')) this.changed(other);
    }
  }

  private changed(crd: KubeObject): void {
    const name = crd.metadata.name ?? '';
    this.crds.set(name, crd);
    const conflict = this.namesConflict(crd);
    const terminating = Boolean(crd.metadata.deletionTimestamp);
    if (conflict) {
      this.served.delete(name);
      this.registry.removeDynamic(name);
    } else {
      const key = `${crd.metadata.uid}/${crd.metadata.generation}/${terminating}`;
      if (this.served.get(name)?.key !== key) {
        try {
          const kinds = customResourceKinds(crd);
          this.registry.setDynamic(name, terminating ? kinds.map(refuseCreates) : kinds);
          this.served.set(name, { key });
        } catch (error) {
          // Validation admitted it; a schema that still fails to build is logged, not served.
          this.logger.warn({ err: error, crd: name }, 'cannot serve CustomResourceDefinition');
          this.registry.removeDynamic(name);
        }
      }
    }
    this.writeStatus(name, conflict).catch((error: unknown) => this.statusFailed(name, error));
    if (terminating && !this.cleaning.has(name)) {
      this.cleaning.add(name);
      this.cleanUp(crd).finally(() => this.cleaning.delete(name));
    }
  }

  private statusFailed(name: string, error: unknown): void {
    if (error instanceof ApiError && (error.code === 404 || error.code === 409)) return;
    this.logger.warn({ err: error, crd: name }, 'writing CustomResourceDefinition status failed');
  }

  /** kube's naming controller, for what matters here: a built-in kind or an older CRD holds the plural or kind. */
  private namesConflict(crd: KubeObject): { reason: string; message: string } | undefined {
    const { group, names } = crdSpec(crd);
    for (const def of this.registry.builtInKinds) {
      if (def.group !== group) continue;
      if (def.plural === names.plural) return { reason: 'PluralConflict', message: `"${names.plural}" is already in use` };
      if (def.kind === names.kind) return { reason: 'KindConflict', message: `"${names.kind}" is already in use` };
    }
    const mine = acceptedNamesOf(crd);
    for (const other of this.crds.values()) {
      if (other === crd || other.metadata.name === crd.metadata.name) continue;
      const theirs = crdSpec(other);
      if (theirs.group !== group) continue;
      // kube's naming controller: names another CRD has accepted are taken. A CRD that accepted
      // them first keeps them; only between two that both did (or neither did) the older wins.
      const accepted = acceptedNamesOf(other);
      const older =
        (other.metadata.creationTimestamp ?? '') < (crd.metadata.creationTimestamp ?? '') ||
        ((other.metadata.creationTimestamp ?? '') === (crd.metadata.creationTimestamp ?? '') && (other.metadata.name ?? '') < (crd.metadata.name ?? ''));
      const holds = (name: string, field: 'plural' | 'kind' | 'shortNames'): boolean => {
        const theirsHas = accepted ? accepted[field].includes(name) : false;
        const mineHas = mine ? mine[field].includes(name) : false;
        if (theirsHas) return !mineHas || older;
        const claimed = field === 'shortNames' ? theirs.names.shortNames.includes(name) : theirs.names[field] === name;
        return !accepted && !mineHas && claimed && older;
      };
      if (holds(names.plural, 'plural')) return { reason: 'PluralConflict', message: `"${names.plural}" is already in use` };
      if (holds(names.kind, 'kind')) return { reason: 'KindConflict', message: `"${names.kind}" is already in use` };
      const shortTaken = names.shortNames.find((short) => holds(short, 'shortNames'));
      if (shortTaken) return { reason: 'ShortNamesConflict', message: `"${shortTaken}" is already in use` };
    }
    return undefined;
  }

  private async writeStatus(name: string, conflict: { reason: string; message: string } | undefined): Promise<void> {
    await this.store.guaranteedUpdate(
      CRD_DEFINITION,
      undefined,
      name,
      (crd) => {
        const { names, versions } = crdSpec(crd);
        const status = (isJsonObject(crd.status) ? crd.status : {}) as Record<string, unknown>;
        const conditions = (Array.isArray(status.conditions) ? status.conditions : []) as Condition[];
        const wanted: Condition[] = conflict
          ? [
              { type: 'NamesAccepted', status: 'False', reason: conflict.reason, message: conflict.message },
              { type: 'Established', status: 'False', reason: 'NotAccepted', message: 'not all names are accepted' },
            ]
          : [
              { type: 'NamesAccepted', status: 'True', reason: 'NoConflicts', message: 'no conflicts found' },
              { type: 'Established', status: 'True', reason: 'InitialNamesAccepted', message: 'the initial names have been accepted' },
            ];
        if (crd.metadata.deletionTimestamp) {
          wanted.push({ type: 'Terminating', status: 'True', reason: 'InstanceDeletionInProgress', message: 'CustomResource deletion is in progress' });
        }
        const next = [...conditions.filter((c) => !wanted.some((w) => w.type === c.type))];
        for (const condition of wanted) {
          const old = conditions.find((c) => c.type === condition.type);
          const same = old && old.status === condition.status && old.reason === condition.reason && old.message === condition.message;
          next.push(same ? old : { ...condition, lastTransitionTime: old?.status === condition.status ? old.lastTransitionTime ?? kubeTime() : kubeTime() });
        }
        const stored = Array.isArray(status.storedVersions) ? (status.storedVersions as string[]) : [];
        const storage = versions.find((v) => v.storage)?.name;
        const storedVersions = storage && !stored.includes(storage) ? [...stored, storage] : stored;
        const acceptedNames = conflict
          ? (status.acceptedNames ?? { plural: '', kind: '' })
          : {
              plural: names.plural,
              singular: names.singular,
              kind: names.kind,
              listKind: names.listKind,
              ...(names.shortNames.length ? { shortNames: names.shortNames } : {}),
              ...(names.categories.length ? { categories: names.categories } : {}),
            };
        const nextStatus = { ...status, conditions: next, acceptedNames, storedVersions };
        if (jsonEqual(nextStatus, status)) return crd;
        return { ...crd, status: nextStatus };
      },
      { subresource: 'status' },
    );
  }

  /** kube's finalizer controller: delete every object of the CRD, then take the finalizer off. */
  private async cleanUp(crd: KubeObject): Promise<void> {
    const name = crd.metadata.name ?? '';
    const def = customResourceKinds(crd)[0];
    try {
      let remaining = 0;
      if (def) {
        const { items } = await this.store.list(def, undefined, parseSelection(def, undefined, undefined));
        for (const obj of items) {
          try {
            const result = await this.store.delete(def, obj.metadata.namespace, obj.metadata.name ?? '');
            if (!result.removed) remaining++;
          } catch (error) {
            if (!(error instanceof ApiError && error.code === 404)) throw error;
          }
        }
      }
      if (remaining) throw errors.conflict(CRD_DEFINITION, name, `${remaining} objects still have finalizers`);
      await this.store.guaranteedUpdate(CRD_DEFINITION, undefined, name, (current) => {
        const finalizers = (current.metadata.finalizers ?? []).filter((f) => f !== CRD_CLEANUP_FINALIZER);
        if (finalizers.length) current.metadata.finalizers = finalizers;
        else delete current.metadata.finalizers;
        return current;
      });
    } catch (error) {
      if (error instanceof ApiError && error.code === 404) return;
      this.logger.debug({ err: error, crd: name }, 'removing the objects of a deleted CustomResourceDefinition; retrying');
      if (this.stopped) return;
      setTimeout(() => {
        const latest = this.crds.get(name);
        if (latest?.metadata.deletionTimestamp && !this.cleaning.has(name)) {
          this.cleaning.add(name);
          void this.cleanUp(latest).finally(() => this.cleaning.delete(name));
        }
      }, RETRY_MS).unref();
    }
  }
}

/** The names a CRD's status says were accepted, if any were. */
function acceptedNamesOf(crd: KubeObject): { plural: string[]; kind: string[]; shortNames: string[] } | undefined {
  const status = isJsonObject(crd.status) ? crd.status : undefined;
  const accepted = status && isJsonObject(status.acceptedNames) ? status.acceptedNames : undefined;
  if (!accepted || typeof accepted.plural !== 'string' || !accepted.plural) return undefined;
  const shortNames = Array.isArray(accepted.shortNames) ? accepted.shortNames.filter((n): n is string => typeof n === 'string') : [];
  return { plural: [accepted.plural], kind: typeof accepted.kind === 'string' ? [accepted.kind] : [], shortNames };
}

/** While its CRD is being deleted, a kind takes no new objects (kube answers 405 likewise). */
function refuseCreates(def: ResourceDefinition): ResourceDefinition {
  return {
    ...def,
    async admitCreate() {
      throw new ApiError(405, 'MethodNotAllowed', `create not allowed while custom resource definition is terminating`);
    },
  };
}
