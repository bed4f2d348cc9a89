import { type ResourceDefinition, standardFields } from '../definition.js';
import { isJsonObject } from '../json.js';
import type { KubeObject } from '../objects.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';
import { jsonType, undecodable } from './config-data.js';
import { TOKEN_REQUEST_STRATEGY } from './token-request.js';

/**
 * v1 ServiceAccount: an identity for pods and tools. Its fields are references only (`secrets`,
 * `imagePullSecrets`) and `automountServiceAccountToken`; kube-apiserver validates nothing but
 * the metadata, and so does Drover, after the shape checks its JSON decoding makes (a 400).
 * Tokens for it come from the `token` subresource (TokenRequest, ./token-request.ts); the
 * `default` account of every namespace and the legacy token Secrets are the controllers' work
 * (src/controllers/service-accounts.ts, legacy-tokens.ts).
 */

const KIND = 'ServiceAccount';

const SERVICE_ACCOUNT_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    // kube-apiserver declares this column a string and fills it with the count.
    column('Secrets', 'How many Secrets the account lists in its secrets field.'),
    AGE_COLUMN,
  ],
  cells: (sa, now) => [sa.metadata.name ?? '', Array.isArray(sa.secrets) ? sa.secrets.length : 0, ageOf(sa.metadata.creationTimestamp, now)],
};

const cannotUnmarshal = (path: string, field: string, value: unknown, goType: string): never =>
  undecodable(KIND, `json: cannot unmarshal ${jsonType(value)} into Go struct field ${field} of type ${goType}`, path);

/** A list of references as encoding/json takes it: null drops it; each entry an object of strings. */
function takeReferenceList(sa: KubeObject, field: string, goType: string, stringFields: readonly string[]): void {
  const value = sa[field];
  if (value === null || value === undefined) {
    delete sa[field];
    return;
  }
  if (!Array.isArray(value)) cannotUnmarshal(field, `${KIND}.${field}`, value, `[]${goType}`);
  (value as unknown[]).forEach((entry, i) => {
    if (!isJsonObject(entry)) cannotUnmarshal(`${field}[${i}]`, `${KIND}.${field}`, entry, goType);
    for (const key of stringFields) {
      const v = (entry as Record<string, unknown>)[key];
      if (v !== undefined && v !== null && typeof v !== 'string') cannotUnmarshal(`${field}[${i}].${key}`, `${KIND}.${field}.${key}`, v, 'string');
    }
  });
}

function normalizeServiceAccount(sa: KubeObject): void {
  takeReferenceList(sa, 'secrets', 'v1.ObjectReference', ['kind', 'namespace', 'name', 'uid', 'apiVersion', 'resourceVersion', 'fieldPath']);
  takeReferenceList(sa, 'imagePullSecrets', 'v1.LocalObjectReference', ['name']);
  const automount = sa.automountServiceAccountToken;
  if (automount === null) delete sa.automountServiceAccountToken;
  else if (automount !== undefined && typeof automount !== 'boolean') {
    cannotUnmarshal('automountServiceAccountToken', `${KIND}.automountServiceAccountToken`, automount, 'bool');
  }
}

export const SERVICE_ACCOUNT_DEFINITION: ResourceDefinition = {
  group: '',
  version: 'v1',
  kind: KIND,
  plural: 'serviceaccounts',
  singular: 'serviceaccount',
  namespaced: true,
  shortNames: ['sa'],
  categories: [],
  subresources: ['token'],
  printer: SERVICE_ACCOUNT_PRINTER,
  fieldLabels: {},
  topLevelFields: standardFields('secrets', 'imagePullSecrets', 'automountServiceAccountToken'),
  storagePath: 'core/serviceaccounts',
  nameRule: 'dns-subdomain',
  applyDefaults: normalizeServiceAccount,
  token: TOKEN_REQUEST_STRATEGY,
};
