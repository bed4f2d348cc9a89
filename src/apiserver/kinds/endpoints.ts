import { isIP, isIPv4, isIPv6 } from 'node:net';
import { type ResourceDefinition, standardFields } from '../definition.js';
import type { StatusCause } from '../errors.js';
import { isJsonObject } from '../json.js';
import type { KubeObject } from '../objects.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';
import { dnsLabelProblem, dnsSubdomainProblem } from '../validation.js';

/**
 * v1 Endpoints and discovery.k8s.io/v1 EndpointSlice: where a Service's traffic goes. The
 * endpoints controller (src/controllers/endpoints.ts) keeps both for Services with a selector;
 * for a selector-less Service they are the user's to write. Validation as kube-apiserver's
 * ValidateEndpoints and ValidateEndpointSlice, in their main rules.
 */

const PROTOCOLS = ['SCTP', 'TCP', 'UDP'];
const ADDRESS_TYPES = ['FQDN', 'IPv4', 'IPv6'];
const MAX_SLICE_ENDPOINTS = 1000;
const MAX_SLICE_PORTS = 100;
const MAX_ADDRESSES = 100;
/** At most this many addresses in a printed cell, then "+ N more...", as kubectl's. */
const PRINTED = 3;

type Obj = Record<string, unknown>;
const list = (value: unknown): Obj[] => (Array.isArray(value) ? (value.filter(isJsonObject) as Obj[]) : []);

const invalid = (field: string, value: unknown, why: string): StatusCause => ({
  reason: 'FieldValueInvalid',
  field,
  message: `Invalid value: ${typeof value === 'string' ? JSON.stringify(value) : String(value)}: ${why}`,
});
const required = (field: string): StatusCause => ({ reason: 'FieldValueRequired', field, message: 'Required value' });
const notSupported = (field: string, value: unknown, supported: readonly string[]): StatusCause => ({
  reason: 'FieldValueNotSupported',
  field,
  message: `Unsupported value: ${JSON.stringify(value)}: supported values: ${supported.map((s) => JSON.stringify(s)).join(', ')}`,
});

function portCauses(port: Obj, at: string, nameRequired: boolean, portRequired: boolean, causes: StatusCause[]): void {
  const name = typeof port.name === 'string' ? port.name : '';
  if (nameRequired && !name) causes.push(required(`${at}.name`));
  if (name) {
    const problem = dnsLabelProblem(name);
    if (problem) causes.push(invalid(`${at}.name`, name, problem));
  }
  if (port.port !== undefined && port.port !== null) {
    const n = port.port;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 1 || n > 65535) causes.push(invalid(`${at}.port`, n, 'must be between 1 and 65535, inclusive'));
  } else if (portRequired) {
    causes.push(required(`${at}.port`));
  }
  if (!PROTOCOLS.includes(String(port.protocol))) causes.push(notSupported(`${at}.protocol`, port.protocol, PROTOCOLS));
}

/** An endpoint address that no Service may send traffic to (kube refuses these too). */
export function unroutable(ip: string): string | undefined {
  if (ip === '0.0.0.0' || ip === '::') return 'may not be unspecified (0.0.0.0)';
  if (ip.startsWith('127.') || ip === '::1') return 'may not be in the loopback range (127.0.0.0/8, ::1/128)';
  if (ip.startsWith('169.254.') || ip.toLowerCase().startsWith('fe80:')) return 'may not be in the link-local range (169.254.0.0/16, fe80::/10)';
  if (/^22[4-9]\.|^23\d\./.test(ip)) return 'may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)';
  return undefined;
}

function defaultPorts(ports: unknown): void {
  for (const port of list(ports)) port.protocol ??= 'TCP';
}

// ---------------------------------------------------------------------------------------------
// v1 Endpoints

function defaultEndpoints(ep: KubeObject): void {
  for (const subset of list(ep.subsets)) defaultPorts(subset.ports);
}

export function validateEndpoints(ep: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  if (ep.subsets !== undefined && ep.subsets !== null && !Array.isArray(ep.subsets)) return [invalid('subsets', '', 'must be a list')];
  list(ep.subsets).forEach((subset, i) => {
    const at = `subsets[${i}]`;
    const addresses = list(subset.addresses);
    const notReady = list(subset.notReadyAddresses);
    if (addresses.length === 0 && notReady.length === 0) causes.push(required(`${at}`));
    for (const [field, entries] of [['addresses', addresses], ['notReadyAddresses', notReady]] as const) {
      entries.forEach((address, j) => {
        const ip = address.ip;
        if (typeof ip !== 'string' || !isIP(ip)) causes.push(invalid(`${at}.${field}[${j}].ip`, ip, 'must be a valid IP address'));
        else {
          const problem = unroutable(ip);
          if (problem) causes.push(invalid(`${at}.${field}[${j}].ip`, ip, problem));
        }
        if (typeof address.hostname === 'string' && address.hostname) {
          const problem = dnsLabelProblem(address.hostname);
          if (problem) causes.push(invalid(`${at}.${field}[${j}].hostname`, address.hostname, problem));
        }
      });
    }
    const ports = list(subset.ports);
    ports.forEach((port, j) => portCauses(port, `${at}.ports[${j}]`, ports.length > 1, true, causes));
  });
  return causes;
}

function endpointsCell(ep: KubeObject): string {
  const all: string[] = [];
  for (const subset of list(ep.subsets)) {
    const ports = list(subset.ports);
    for (const address of list(subset.addresses)) {
      if (ports.length === 0) all.push(String(address.ip));
      for (const port of ports) all.push(`${String(address.ip)}:${String(port.port)}`);
    }
  }
  return printedList(all, '<none>');
}

function printedList(all: string[], empty: string): string {
  if (all.length === 0) return empty;
  const shown = all.slice(0, PRINTED).join(',');
  return all.length > PRINTED ? `${shown} + ${all.length - PRINTED} more...` : shown;
}

const ENDPOINTS_PRINTER: Printer = {
  columns: [NAME_COLUMN, column('Endpoints', 'Endpoints is the list of domain names or IP addresses the Service reaches.'), AGE_COLUMN],
  cells: (ep, now) => [ep.metadata.name ?? '', endpointsCell(ep), ageOf(ep.metadata.creationTimestamp, now)],
};

export const ENDPOINTS_DEFINITION: ResourceDefinition = {
  group: '',
  version: 'v1',
  kind: 'Endpoints',
  plural: 'endpoints',
  singular: 'endpoints',
  namespaced: true,
  shortNames: ['ep'],
  categories: [],
  subresources: [],
  printer: ENDPOINTS_PRINTER,
  fieldLabels: {},
  topLevelFields: standardFields('subsets'),
  storagePath: 'core/endpoints',
  nameRule: 'dns-subdomain',
  applyDefaults: defaultEndpoints,
  validate: validateEndpoints,
};

// ---------------------------------------------------------------------------------------------
// discovery.k8s.io/v1 EndpointSlice

function defaultSlice(slice: KubeObject): void {
  for (const port of list(slice.ports)) {
    port.protocol ??= 'TCP';
    port.name ??= '';
  }
}

function addressProblem(addressType: string, address: unknown): string | undefined {
  if (typeof address !== 'string') return 'must be a string';
  if (addressType === 'IPv4') return isIPv4(address) ? unroutable(address) : 'must be a valid IPv4 address';
  if (addressType === 'IPv6') return isIPv6(address) ? unroutable(address) : 'must be a valid IPv6 address';
  return dnsSubdomainProblem(address);
}

export function validateEndpointSlice(slice: KubeObject): StatusCause[] {
  const causes: StatusCause[] = [];
  const addressType = slice.addressType;
  if (addressType === undefined || addressType === '') causes.push(required('addressType'));
  else if (!ADDRESS_TYPES.includes(String(addressType))) causes.push(notSupported('addressType', addressType, ADDRESS_TYPES));
  const endpoints = list(slice.endpoints);
  if (endpoints.length > MAX_SLICE_ENDPOINTS) causes.push({ reason: 'FieldValueTooMany', field: 'endpoints', message: `Too many: ${endpoints.length}: must have at most ${MAX_SLICE_ENDPOINTS} items` });
  endpoints.forEach((endpoint, i) => {
    const at = `endpoints[${i}]`;
    const addresses = Array.isArray(endpoint.addresses) ? (endpoint.addresses as unknown[]) : [];
    if (addresses.length === 0) causes.push(required(`${at}.addresses`));
    if (addresses.length > MAX_ADDRESSES) causes.push({ reason: 'FieldValueTooMany', field: `${at}.addresses`, message: `Too many: ${addresses.length}: must have at most ${MAX_ADDRESSES} items` });
    if (ADDRESS_TYPES.includes(String(addressType))) {
      addresses.forEach((address, j) => {
        const problem = addressProblem(String(addressType), address);
        if (problem) causes.push(invalid(`${at}.addresses[${j}]`, address, problem));
      });
    }
    if (endpoint.conditions !== undefined && endpoint.conditions !== null) {
      if (!isJsonObject(endpoint.conditions)) causes.push(invalid(`${at}.conditions`, '', 'must be an object'));
      else {
        for (const [key, value] of Object.entries(endpoint.conditions)) {
          if (value !== null && typeof value !== 'boolean') causes.push(invalid(`${at}.conditions.${key}`, value, 'must be a boolean'));
        }
      }
    }
    if (typeof endpoint.hostname === 'string' && endpoint.hostname) {
      const problem = dnsLabelProblem(endpoint.hostname);
      if (problem) causes.push(invalid(`${at}.hostname`, endpoint.hostname, problem));
    }
  });
  const ports = list(slice.ports);
  if (ports.length > MAX_SLICE_PORTS) causes.push({ reason: 'FieldValueTooMany', field: 'ports', message: `Too many: ${ports.length}: must have at most ${MAX_SLICE_PORTS} items` });
  const names = new Set<string>();
  ports.forEach((port, i) => {
    portCauses(port, `ports[${i}]`, false, false, causes);
    const name = String(port.name ?? '');
    if (names.has(name)) causes.push({ reason: 'FieldValueDuplicate', field: `ports[${i}].name`, message: `Duplicate value: ${JSON.stringify(name)}` });
    names.add(name);
  });
  return causes;
}

const validateSliceUpdate = (next: KubeObject, current: KubeObject): StatusCause[] =>
  next.addressType !== current.addressType ? [invalid('addressType', next.addressType, 'field is immutable')] : [];

const SLICE_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('AddressType', 'The IP protocol for this slice'),
    column('Ports', 'The ports for this slice'),
    column('Endpoints', 'The endpoints for this slice'),
    AGE_COLUMN,
  ],
  cells: (slice, now) => {
    const ports = list(slice.ports).map((p) => (typeof p.port === 'number' ? String(p.port) : '<unset>'));
    const addresses = list(slice.endpoints).flatMap((e) => (Array.isArray(e.addresses) ? (e.addresses as unknown[]).map(String) : []));
    return [
      slice.metadata.name ?? '',
      String(slice.addressType ?? ''),
      ports.length ? ports.join(',') : '<unset>',
      printedList(addresses, '<unset>'),
      ageOf(slice.metadata.creationTimestamp, now),
    ];
  },
};

export const ENDPOINT_SLICE_DEFINITION: ResourceDefinition = {
  group: 'discovery.k8s.io',
  version: 'v1',
  kind: 'EndpointSlice',
  plural: 'endpointslices',
  singular: 'endpointslice',
  namespaced: true,
  shortNames: [],
  categories: [],
  subresources: [],
  printer: SLICE_PRINTER,
  fieldLabels: {},
  topLevelFields: standardFields('addressType', 'endpoints', 'ports'),
  storagePath: 'discovery.k8s.io/endpointslices',
  nameRule: 'dns-subdomain',
  applyDefaults: defaultSlice,
  validate: validateEndpointSlice,
  validateUpdate: validateSliceUpdate,
};
