import { ApiError, errors, type StatusCause } from '../errors.js';
import { isJsonObject, jsonEqual, type JsonObject, type JsonValue } from '../json.js';
import { contains, overlaps } from './field-sets.js';
import { decodeFieldsV1, encodeFieldsV1, FieldSet, FieldsV1Error, fieldElement, pathString, rawContains, rawOverlaps } from './fields-v1.js';

/**
 * `metadata.managedFields`: one entry per field manager and operation, each with the set of
 * fields it owns, kept as kube-apiserver's field manager keeps them. An entry is identified by
 * its manager, operation and subresource, and for Update also its apiVersion (an applier keeps
 * one entry whatever version it applies with). Entries are decoded lazily: a write that touches
 * none of an entry's fields leaves its stored FieldsV1 as it was.
 */

export type Operation = 'Apply' | 'Update';

export interface ManagedEntry {
  manager: string;
  operation: Operation;
  apiVersion: string;
  time?: string;
  subresource?: string;
  /** The stored FieldsV1, until the set is changed. */
  fieldsV1?: JsonObject;
  /** The decoded set, once needed. */
  set?: FieldSet;
}

/** Who is writing, for the entry their write records. */
export interface FieldManagerInfo {
  manager: string;
  apiVersion: string;
  subresource?: string;
}

export function entrySet(entry: ManagedEntry): FieldSet {
  // Stored FieldsV1 was written by this server (or checked when a client sent it): canonical.
  if (!entry.set) entry.set = entry.fieldsV1 ? decodeFieldsV1(entry.fieldsV1, true) : new FieldSet();
  return entry.set;
}

export function sameIdentity(entry: ManagedEntry, operation: Operation, who: FieldManagerInfo): boolean {
  return (
    entry.operation === operation &&
    entry.manager === who.manager &&
    (entry.subresource ?? '') === (who.subresource ?? '') &&
    (operation === 'Apply' || entry.apiVersion === who.apiVersion)
  );
}

// ---------------------------------------------------------------------------------------------
// Reading and writing metadata.managedFields

/** The entries of a stored object (written by this server: trusted, anything odd skipped). */
export function storedEntries(value: unknown): ManagedEntry[] {
  if (!Array.isArray(value)) return [];
  const out: ManagedEntry[] = [];
  for (const raw of value) {
    if (!isJsonObject(raw) || (raw.operation !== 'Apply' && raw.operation !== 'Update') || !isJsonObject(raw.fieldsV1)) continue;
    out.push({
      manager: typeof raw.manager === 'string' ? raw.manager : '',
      operation: raw.operation,
      apiVersion: typeof raw.apiVersion === 'string' ? raw.apiVersion : '',
      ...(typeof raw.time === 'string' ? { time: raw.time } : {}),
      ...(typeof raw.subresource === 'string' && raw.subresource ? { subresource: raw.subresource } : {}),
      fieldsV1: raw.fieldsV1,
    });
  }
  return out;
}

/**
 * The entries a client sent, checked as kube-apiserver checks them: `'reset'` for an empty list
 * or a list of one empty entry (the documented way to clear managedFields), the entries
 * otherwise. A malformed list is a 422 naming each bad field.
 */
export function clientEntries(value: unknown, kind: string, name: string, group: string): ManagedEntry[] | 'reset' {
  const invalid = (causes: StatusCause[]): ApiError => errors.invalid(kind, name, group, causes);
  if (!Array.isArray(value)) {
    throw invalid([{ reason: 'FieldValueInvalid', message: 'Invalid value: must be a list of ManagedFieldsEntry', field: 'metadata.managedFields' }]);
  }
  if (value.length === 0 || (value.length === 1 && isJsonObject(value[0]) && Object.keys(value[0]).length === 0)) return 'reset';
  const causes: StatusCause[] = [];
  const out: ManagedEntry[] = [];
  value.forEach((raw: JsonValue, i) => {
    const at = `metadata.managedFields[${i}]`;
    const bad = (field: string, message: string): void => {
      causes.push({ reason: 'FieldValueInvalid', message, field: `${at}${field}` });
    };
    if (!isJsonObject(raw)) return bad('', 'Invalid value: must be an object');
    const { manager, operation, apiVersion, time, fieldsType, fieldsV1, subresource } = raw;
    if (operation !== 'Apply' && operation !== 'Update') bad('.operation', `Invalid value: ${JSON.stringify(operation ?? '')}: must be \`Apply\` or \`Update\``);
    if (typeof apiVersion !== 'string' || !apiVersion) bad('.apiVersion', 'Required value: apiVersion must not be empty');
    if (fieldsType !== 'FieldsV1') bad('.fieldsType', `Invalid value: ${JSON.stringify(fieldsType ?? '')}: must be \`FieldsV1\``);
    if (manager !== undefined && (typeof manager !== 'string' || manager.length > 128 || !/^[\x20-\x7e]*$/.test(manager))) {
      bad('.manager', 'Invalid value: must be a string of at most 128 printable characters');
    }
    if (time !== undefined && time !== null && (typeof time !== 'string' || Number.isNaN(Date.parse(time)))) bad('.time', 'Invalid value: must be an RFC 3339 time');
    if (subresource !== undefined && subresource !== null && typeof subresource !== 'string') bad('.subresource', 'Invalid value: must be a string');
    let set: FieldSet | undefined;
    try {
      set = decodeFieldsV1(fieldsV1 ?? {});
    } catch (error) {
      if (!(error instanceof FieldsV1Error)) throw error;
      bad('.fieldsV1', `Invalid value: ${error.message}`);
    }
    if (set && (operation === 'Apply' || operation === 'Update') && typeof apiVersion === 'string') {
      out.push({
        manager: typeof manager === 'string' ? manager : '',
        operation,
        apiVersion,
        ...(typeof time === 'string' ? { time } : {}),
        ...(typeof subresource === 'string' && subresource ? { subresource } : {}),
        set,
      });
    }
  });
  if (causes.length) throw invalid(causes);
  return out;
}

/**
 * metadata.managedFields as kube-apiserver writes it: Apply entries first, then Update, each by
 * time, manager, apiVersion and subresource; entries that own nothing are left out; undefined
 * when none is left.
 */
export function encodeEntries(entries: readonly ManagedEntry[]): JsonObject[] | undefined {
  // fieldsV1, when still there, is up to date: the set was not changed since it was read.
  const kept = entries.filter((e) => (e.fieldsV1 ? Object.keys(e.fieldsV1).length > 0 : e.set !== undefined && !e.set.empty()));
  if (!kept.length) return undefined;
  const secondsOf = new Map(kept.map((e) => [e, e.time ? Math.floor(Date.parse(e.time) / 1000) : 0]));
  const seconds = (e: ManagedEntry): number => secondsOf.get(e)!;
  const order = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
  kept.sort(
    (p, q) =>
      order(p.operation, q.operation) ||
      seconds(p) - seconds(q) ||
      order(p.manager, q.manager) ||
      order(p.apiVersion, q.apiVersion) ||
      order(p.subresource ?? '', q.subresource ?? ''),
  );
  return kept.map((e) => ({
    manager: e.manager,
    operation: e.operation,
    apiVersion: e.apiVersion,
    ...(e.time ? { time: e.time } : {}),
    fieldsType: 'FieldsV1',
    fieldsV1: e.fieldsV1 ?? encodeFieldsV1(e.set!),
    ...(e.subresource ? { subresource: e.subresource } : {}),
  }));
}

// ---------------------------------------------------------------------------------------------
// The fields no manager owns: identity and bookkeeping the server sets.

const STRIPPED_METADATA = ['name', 'namespace', 'creationTimestamp', 'selfLink', 'uid', 'clusterName', 'generation', 'managedFields', 'resourceVersion'];

/** Removes what kube-apiserver never records as owned (apiVersion, kind, metadata's identity fields). */
export function stripServerFields(set: FieldSet): FieldSet {
  set.children?.delete(fieldElement('apiVersion'));
  set.children?.delete(fieldElement('kind'));
  const metadata = set.child(fieldElement('metadata'));
  if (metadata) {
    metadata.member = false;
    for (const field of STRIPPED_METADATA) metadata.children?.delete(fieldElement(field));
    if (metadata.empty()) set.children!.delete(fieldElement('metadata'));
  }
  return set;
}

// ---------------------------------------------------------------------------------------------
// Update: an ordinary write

/**
 * The entries after an ordinary write by `who` that changed `changed` and removed `removed`:
 * every manager loses the fields that changed or went (an update never conflicts), and the
 * writer's Update entry gains what changed, with the time of the write. A write that changed
 * nothing leaves the entries as they were.
 */
export function recordUpdate(entries: ManagedEntry[], changed: FieldSet, removed: FieldSet, who: FieldManagerInfo, time: string): ManagedEntry[] {
  stripServerFields(changed);
  stripServerFields(removed);
  const anyChange = !changed.empty();
  if (!anyChange && removed.empty()) return entries;
  let mine: ManagedEntry | undefined;
  for (const entry of entries) {
    if (sameIdentity(entry, 'Update', who)) {
      mine = entry;
      continue;
    }
    loseFields(entry, changed, removed);
  }
  if (mine) {
    // The common case (a heartbeat): the writer already owns what it changed and nothing it owns
    // went; only the time moves, and its stored FieldsV1 is kept as it is.
    const raw = mine.set ? undefined : mine.fieldsV1;
    const loses = raw ? !removed.empty() && rawOverlaps(raw, removed) : overlaps(entrySet(mine), removed);
    const gains = anyChange && (raw ? !rawContains(raw, changed) : !contains(entrySet(mine), changed));
    if (loses || gains) {
      const set = entrySet(mine);
      if (loses) set.removeAll(removed);
      if (gains) set.addAll(changed);
      delete mine.fieldsV1;
    }
    if (anyChange) mine.time = time;
    return entries;
  }
  if (!anyChange) return entries;
  return [
    ...entries,
    { manager: who.manager, operation: 'Update', apiVersion: who.apiVersion, time, ...(who.subresource ? { subresource: who.subresource } : {}), set: changed },
  ];
}

/**
 * The hot path of {@link recordUpdate} (a heartbeat: the writer's Update entry already owns every
 * field it changed, it removed nothing, and no other entry owns any of them), worked on the stored
 * list as it is: the same entries with only the writer's time moved. Undefined when the write is
 * not that case (the caller then takes the general path); the stored list when nothing changed.
 */
export function touchOnly(stored: unknown, changed: FieldSet, removed: FieldSet, who: FieldManagerInfo, time: string): unknown[] | undefined {
  if (!Array.isArray(stored)) return undefined;
  stripServerFields(changed);
  stripServerFields(removed);
  if (!removed.empty()) return undefined;
  if (changed.empty()) return stored;
  let mine = -1;
  for (let i = 0; i < stored.length; i++) {
    const raw = stored[i] as JsonValue;
    if (!isJsonObject(raw) || !isJsonObject(raw.fieldsV1)) return undefined;
    const same =
      raw.operation === 'Update' && raw.manager === who.manager && raw.apiVersion === who.apiVersion && (raw.subresource ?? '') === (who.subresource ?? '');
    if (same) {
      if (mine >= 0 || !rawContains(raw.fieldsV1, changed)) return undefined;
      mine = i;
    } else if (rawOverlaps(raw.fieldsV1, changed)) {
      return undefined;
    }
  }
  if (mine < 0) return undefined;
  // The entry keeps its place if its new time still sorts it there (it is usually the latest).
  const next = stored[mine + 1] as JsonObject | undefined;
  if (next && (next.operation !== 'Update' || typeof next.time !== 'string' || next.time <= time)) return undefined;
  const out = stored.slice();
  out[mine] = { ...(stored[mine] as JsonObject), time };
  return out;
}

/** Takes fields away from an entry (only decoding it when it owns any of them). */
function loseFields(entry: ManagedEntry, ...sets: FieldSet[]): void {
  const raw = entry.set ? undefined : entry.fieldsV1;
  if (raw ? !sets.some((s) => !s.empty() && rawOverlaps(raw, s)) : !sets.some((s) => overlaps(entrySet(entry), s))) return;
  const set = entrySet(entry);
  for (const s of sets) set.removeAll(s);
  delete entry.fieldsV1;
}

// ---------------------------------------------------------------------------------------------
// Conflicts

export interface Conflict {
  entry: ManagedEntry;
  path: string[];
}

/** How kube-apiserver names a manager in a conflict: an Update names its apiVersion, a subresource is said. */
function managerWords(entry: ManagedEntry): string {
  let words = JSON.stringify(entry.manager);
  if (entry.subresource) words += ` with subresource ${JSON.stringify(entry.subresource)}`;
  if (entry.operation === 'Update') words += ` using ${entry.apiVersion}`;
  return words;
}

/** The 409 kube-apiserver answers an apply that conflicts, word for word. */
export function conflictError(conflicts: readonly Conflict[]): ApiError {
  const causes: StatusCause[] = conflicts.map((c) => ({ reason: 'FieldManagerConflict', message: `conflict with ${managerWords(c.entry)}`, field: pathString(c.path) }));
  let message: string;
  if (conflicts.length === 1) {
    message = `Apply failed with 1 conflict: conflict with ${managerWords(conflicts[0].entry)}: ${pathString(conflicts[0].path)}`;
  } else {
    const byManager = new Map<string, string[]>();
    for (const c of conflicts) {
      const words = managerWords(c.entry);
      byManager.set(words, [...(byManager.get(words) ?? []), pathString(c.path)]);
    }
    const lines: string[] = [];
    for (const words of [...byManager.keys()].sort()) {
      lines.push(`conflicts with ${words}:`);
      for (const path of byManager.get(words)!) lines.push(`- ${path}`);
    }
    message = `Apply failed with ${conflicts.length} conflicts: ${lines.join('\n')}`;
  }
  return new ApiError(409, 'Conflict', message, { causes });
}

/** Whether two entry lists as stored say the same (a client that sent back what it read). */
export function sameEntries(a: unknown, b: unknown): boolean {
  return jsonEqual(a, b);
}
