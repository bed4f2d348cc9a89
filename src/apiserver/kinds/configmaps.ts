import { type ResourceDefinition, standardFields } from '../definition.js';
import type { StatusCause } from '../errors.js';
import { isJsonObject, jsonEqual } from '../json.js';
import type { KubeObject } from '../objects.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';
import {
  immutableCauses,
  keyCauses,
  MAX_CONFIG_BYTES,
  takeBytesMap,
  takeImmutable,
  takeStringMap,
  tooLongCause,
} from './config-data.js';

/**
 * v1 ConfigMap: string entries in `data`, byte entries (base64 in JSON) in `binaryData`, no key in
 * both, 1 MiB in all; once `immutable: true`, neither changes and the flag stays. As
 * kube-apiserver's registry/core/configmap strategy and ValidateConfigMap(Update).
 */

const KIND = 'ConfigMap';

const keysOf = (value: unknown): string[] => (isJsonObject(value) ? Object.keys(value) : []);

const CONFIGMAP_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Data', 'Data contains the configuration data.', { type: 'integer' }),
    AGE_COLUMN,
  ],
  cells: (cm, now) => [
    cm.metadata.name ?? '',
    keysOf(cm.data).length + keysOf(cm.binaryData).length,
    ageOf(cm.metadata.creationTimestamp, now),
  ],
};

/** The shape JSON decoding demands (a 400 otherwise), with binaryData in canonical base64. */
function normalizeConfigMap(cm: KubeObject): void {
  takeStringMap(cm, KIND, 'data', 'string');
  takeBytesMap(cm, KIND, 'binaryData');
  takeImmutable(cm, KIND);
}

export function validateConfigMap(cm: KubeObject): StatusCause[] {
  const data = isJsonObject(cm.data) ? (cm.data as Record<string, string>) : {};
  const binaryData = isJsonObject(cm.binaryData) ? (cm.binaryData as Record<string, string>) : {};
  const causes = keyCauses('data', data);
  let total = 0;
  for (const [key, value] of Object.entries(data)) {
    if (Object.hasOwn(binaryData, key)) {
      causes.push({ reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(key)}: duplicate of key present in binaryData`, field: `data[${key}]` });
    }
    total += Buffer.byteLength(value, 'utf8');
  }
  causes.push(...keyCauses('binaryData', binaryData));
  for (const value of Object.values(binaryData)) total += Buffer.byteLength(value, 'base64');
  // kube-apiserver reports the whole object, whose field path prints as `[]`.
  if (total > MAX_CONFIG_BYTES) causes.push(tooLongCause('[]'));
  return causes;
}

export const CONFIGMAP_DEFINITION: ResourceDefinition = {
  group: '',
  version: 'v1',
  kind: KIND,
  plural: 'configmaps',
  singular: 'configmap',
  namespaced: true,
  shortNames: ['cm'],
  categories: [],
  subresources: [],
  printer: CONFIGMAP_PRINTER,
  fieldLabels: {},
  topLevelFields: standardFields('data', 'binaryData', 'immutable'),
  storagePath: 'core/configmaps',
  nameRule: 'dns-subdomain',
  applyDefaults: normalizeConfigMap,
  validate: validateConfigMap,
  validateUpdate: (next, current) => immutableCauses(next, current, ['data', 'binaryData'], jsonEqual),
};
