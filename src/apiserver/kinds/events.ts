import { type Conversion, type ResourceDefinition, standardFields } from '../definition.js';
import type { StatusCause } from '../errors.js';
import { getPath, getString, type KubeObject } from '../objects.js';
import { ageOf, type Cell, column, type Printer } from '../table.js';
import { requireObjectField } from './shared.js';

/**
 * Events: one stored shape (core/v1), served also as events.k8s.io/v1 through a conversion that
 * renames fields, with the same printer and field selectors.
 */

const str = (obj: KubeObject, ...path: string[]): string => getString(obj, path);

function eventLastSeen(event: KubeObject, now: number): string {
  const last =
    getPath(event, ['series', 'lastObservedTime']) ??
    getPath(event, ['lastTimestamp']) ??
    getPath(event, ['eventTime']) ??
    getPath(event, ['firstTimestamp']) ??
    event.metadata.creationTimestamp;
  return ageOf(last, now);
}

const EVENT_PRINTER: Printer = {
  columns: [
    column('Last Seen', 'Time since the event was last observed.'),
    column('Type', 'Type of this event (Normal, Warning).'),
    column('Reason', 'Why the action was taken.'),
    column('Object', 'The object that this event is about.'),
    column('Subobject', 'The subobject (field path) this event is about.', { priority: 1 }),
    column('Source', 'The component that reported this event.', { priority: 1 }),
    column('Message', 'A human-readable description of the status of this operation.'),
    column('First Seen', 'Time since the event was first observed.', { priority: 1 }),
    column('Count', 'How many times the event has occurred.', { priority: 1 }),
    column('Name', 'The name of the event.', { priority: 1, format: 'name' }),
  ],
  cells: (event, now) => {
    const kind = str(event, 'involvedObject', 'kind').toLowerCase();
    const name = str(event, 'involvedObject', 'name');
    const source = [str(event, 'source', 'component'), str(event, 'source', 'host')]
      .filter(Boolean)
      .join(', ');
    const count = getPath(event, ['count']);
    return [
      eventLastSeen(event, now),
      str(event, 'type'),
      str(event, 'reason'),
      kind ? `${kind}/${name}` : name,
      str(event, 'involvedObject', 'fieldPath'),
      source || str(event, 'reportingComponent'),
      str(event, 'message'),
      ageOf(getPath(event, ['firstTimestamp']) ?? event.metadata.creationTimestamp, now),
      typeof count === 'number' ? count : 1,
      event.metadata.name ?? '',
    ] satisfies Cell[];
  },
};

const EVENT_FIELD_RENAMES: readonly [core: string, events: string][] = [
  ['involvedObject', 'regarding'],
  ['message', 'note'],
  ['reportingComponent', 'reportingController'],
  ['source', 'deprecatedSource'],
  ['firstTimestamp', 'deprecatedFirstTimestamp'],
  ['lastTimestamp', 'deprecatedLastTimestamp'],
  ['count', 'deprecatedCount'],
];

function renameFields(obj: KubeObject, pairs: readonly [string, string][], apiVersion: string): KubeObject {
  const out: KubeObject = { ...obj, apiVersion };
  for (const [from, to] of pairs) {
    if (from in out) {
      out[to] = out[from];
      delete out[from];
    }
  }
  return out;
}

const EVENTS_V1_CONVERSION: Conversion = {
  toStorage: (obj) =>
    renameFields(
      obj,
      EVENT_FIELD_RENAMES.map(([core, events]) => [events, core]),
      'v1',
    ),
  fromStorage: (obj) => renameFields(obj, EVENT_FIELD_RENAMES, 'events.k8s.io/v1'),
};

function validateEvent(event: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  requireObjectField(event, 'involvedObject', causes);
  const involvedNs = getPath(event, ['involvedObject', 'namespace']);
  if (typeof involvedNs === 'string' && involvedNs && involvedNs !== event.metadata.namespace) {
    causes.push({
      reason: 'FieldValueInvalid',
      message: 'does not match event.namespace',
      field: 'involvedObject.namespace',
    });
  }
  return causes;
}

const EVENT_FIELD_LABELS: Record<string, (obj: KubeObject) => string> = {
  'involvedObject.kind': (e) => str(e, 'involvedObject', 'kind'),
  'involvedObject.namespace': (e) => str(e, 'involvedObject', 'namespace'),
  'involvedObject.name': (e) => str(e, 'involvedObject', 'name'),
  'involvedObject.uid': (e) => str(e, 'involvedObject', 'uid'),
  'involvedObject.apiVersion': (e) => str(e, 'involvedObject', 'apiVersion'),
  'involvedObject.resourceVersion': (e) => str(e, 'involvedObject', 'resourceVersion'),
  'involvedObject.fieldPath': (e) => str(e, 'involvedObject', 'fieldPath'),
  reason: (e) => str(e, 'reason'),
  reportingComponent: (e) => str(e, 'reportingComponent'),
  source: (e) => str(e, 'source', 'component'),
  type: (e) => str(e, 'type'),
};

const CORE_EVENT_FIELDS = [
  'involvedObject',
  'reason',
  'message',
  'source',
  'firstTimestamp',
  'lastTimestamp',
  'count',
  'type',
  'eventTime',
  'series',
  'action',
  'related',
  'reportingComponent',
  'reportingInstance',
];


export const CORE_EVENT_DEFINITION: ResourceDefinition = {
  group: '',
  version: 'v1',
  kind: 'Event',
  plural: 'events',
  singular: 'event',
  namespaced: true,
  shortNames: ['ev'],
  categories: [],
  subresources: [],
  printer: EVENT_PRINTER,
  fieldLabels: EVENT_FIELD_LABELS,
  topLevelFields: standardFields(...CORE_EVENT_FIELDS),
  storagePath: 'core/events',
  nameRule: 'dns-subdomain',
  validate: validateEvent,
};

export const EVENTS_V1_DEFINITION: ResourceDefinition = {
  group: 'events.k8s.io',
  version: 'v1',
  kind: 'Event',
  plural: 'events',
  singular: 'event',
  namespaced: true,
  shortNames: ['ev'],
  categories: [],
  subresources: [],
  printer: {
    columns: EVENT_PRINTER.columns,
    cells: (obj, now) => EVENT_PRINTER.cells(EVENTS_V1_CONVERSION.toStorage(obj), now),
  },
  fieldLabels: Object.fromEntries(
    Object.entries(EVENT_FIELD_LABELS).map(([label, get]) => [
      label.replace('involvedObject.', 'regarding.'),
      (obj: KubeObject) => get(EVENTS_V1_CONVERSION.toStorage(obj)),
    ]),
  ),
  topLevelFields: standardFields(
    'eventTime',
    'series',
    'reportingController',
    'reportingInstance',
    'action',
    'reason',
    'regarding',
    'related',
    'note',
    'type',
    'deprecatedSource',
    'deprecatedFirstTimestamp',
    'deprecatedLastTimestamp',
    'deprecatedCount',
  ),
  storagePath: 'core/events',
  nameRule: 'dns-subdomain',
  conversion: EVENTS_V1_CONVERSION,
  validate: (obj) => validateEvent(EVENTS_V1_CONVERSION.toStorage(obj)),
};
