import { type ResourceDefinition, standardFields } from '../definition.js';
import { errors, type StatusCause } from '../errors.js';
import { isJsonObject } from '../json.js';
import type { KubeObject } from '../objects.js';
import { labelSelectorMatcher } from '../rbac/aggregation.js';
import { goQuote } from '../rbac/go-format.js';
import { RBAC_GROUP } from '../rbac/types.js';
import { AGE_COLUMN, ageOf, column, NAME_COLUMN, type Printer } from '../table.js';
import { dnsSubdomainProblem, pathSegmentNameProblem } from '../validation.js';
import { jsonType, undecodable } from './config-data.js';
import { authorizeBindingWrite, authorizeRoleWrite } from './rbac-writes.js';

/**
 * rbac.authorization.k8s.io/v1 Role, ClusterRole, RoleBinding and ClusterRoleBinding: their data,
 * kube-apiserver's validation (pkg/apis/rbac/validation) in its wording, and the escalation
 * checks of their writes (rbac-writes.ts). What they mean to the authorizer is in ../rbac/.
 */

const ROLE_KINDS = ['Role', 'ClusterRole'];
const SUBJECT_KINDS = ['ServiceAccount', 'User', 'Group'];

/** Go's `%#v` of a []string, as field.Invalid prints a slice value. */
function goStringSlice(values: readonly string[]): string {
  return `[]string{${values.map(goQuote).join(', ')}}`;
}

const required = (field: string, detail = ''): StatusCause => ({
  reason: 'FieldValueRequired',
  message: detail ? `Required value: ${detail}` : 'Required value',
  field,
});
const invalid = (field: string, value: string, detail: string): StatusCause => ({ reason: 'FieldValueInvalid', message: `Invalid value: ${value}: ${detail}`, field });
const notSupported = (field: string, value: string, supported: readonly string[]): StatusCause => ({
  reason: 'FieldValueNotSupported',
  message: `Unsupported value: ${goQuote(value)}: supported values: ${supported.map(goQuote).join(', ')}`,
  field,
});

// ---------------------------------------------------------------------------------------------
// Decoding: the types Go's encoding/json would insist on (a 400, as kube-apiserver answers)

function stringList(kind: string, value: unknown, field: string, goStruct: string, goField: string): void {
  if (value === undefined || value === null) return;
  if (!Array.isArray(value)) undecodable(kind, `json: cannot unmarshal ${jsonType(value)} into Go struct field ${goStruct}.${goField} of type []string`, field);
  value.forEach((item, i) => {
    if (typeof item !== 'string') {
      undecodable(kind, `json: cannot unmarshal ${jsonType(item)} into Go struct field ${goStruct}.${goField} of type string`, `${field}[${i}]`);
    }
  });
}

function stringField(kind: string, value: unknown, field: string, goStruct: string, goField: string): void {
  if (value !== undefined && value !== null && typeof value !== 'string') {
    undecodable(kind, `json: cannot unmarshal ${jsonType(value)} into Go struct field ${goStruct}.${goField} of type string`, field);
  }
}

function objectField(kind: string, value: unknown, field: string, goStruct: string, goField: string, goType: string): boolean {
  if (value === undefined || value === null) return false;
  if (!isJsonObject(value)) undecodable(kind, `json: cannot unmarshal ${jsonType(value)} into Go struct field ${goStruct}.${goField} of type ${goType}`, field);
  return true;
}

/** A Role's or ClusterRole's body has the types Go would decode; throws the 400 otherwise. */
export function checkRoleShape(kind: 'Role' | 'ClusterRole', obj: KubeObject): void {
  const rules = obj.rules;
  if (rules !== undefined && rules !== null) {
    if (!Array.isArray(rules)) undecodable(kind, `json: cannot unmarshal ${jsonType(rules)} into Go struct field ${kind}.rules of type []v1.PolicyRule`, 'rules');
    rules.forEach((rule: unknown, i) => {
      const at = `rules[${i}]`;
      if (!isJsonObject(rule)) undecodable(kind, `json: cannot unmarshal ${jsonType(rule)} into Go struct field ${kind}.rules of type v1.PolicyRule`, at);
      for (const field of ['verbs', 'apiGroups', 'resources', 'resourceNames', 'nonResourceURLs']) {
        stringList(kind, rule[field], `${at}.${field}`, 'PolicyRule', `rules.${field}`);
      }
    });
  }
  if (kind === 'ClusterRole' && objectField(kind, obj.aggregationRule, 'aggregationRule', kind, 'aggregationRule', 'v1.AggregationRule')) {
    const selectors = (obj.aggregationRule as Record<string, unknown>).clusterRoleSelectors;
    if (selectors !== undefined && selectors !== null) {
      const field = 'aggregationRule.clusterRoleSelectors';
      if (!Array.isArray(selectors)) undecodable(kind, `json: cannot unmarshal ${jsonType(selectors)} into Go struct field AggregationRule.${field} of type []v1.LabelSelector`, field);
      selectors.forEach((selector: unknown, i) => {
        if (!isJsonObject(selector)) undecodable(kind, `json: cannot unmarshal ${jsonType(selector)} into Go struct field AggregationRule.${field} of type v1.LabelSelector`, `${field}[${i}]`);
      });
    }
  }
}

/** A binding's body has the types Go would decode; throws the 400 otherwise. */
export function checkBindingShape(kind: 'RoleBinding' | 'ClusterRoleBinding', obj: KubeObject): void {
  if (objectField(kind, obj.roleRef, 'roleRef', kind, 'roleRef', 'v1.RoleRef')) {
    const ref = obj.roleRef as Record<string, unknown>;
    for (const field of ['apiGroup', 'kind', 'name']) stringField(kind, ref[field], `roleRef.${field}`, 'RoleRef', `roleRef.${field}`);
  }
  const subjects = obj.subjects;
  if (subjects !== undefined && subjects !== null) {
    if (!Array.isArray(subjects)) undecodable(kind, `json: cannot unmarshal ${jsonType(subjects)} into Go struct field ${kind}.subjects of type []v1.Subject`, 'subjects');
    subjects.forEach((subject: unknown, i) => {
      if (!isJsonObject(subject)) undecodable(kind, `json: cannot unmarshal ${jsonType(subject)} into Go struct field ${kind}.subjects of type v1.Subject`, `subjects[${i}]`);
      for (const field of ['kind', 'apiGroup', 'name', 'namespace']) stringField(kind, subject[field], `subjects[${i}].${field}`, 'Subject', `subjects.${field}`);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Validation (kube's ValidatePolicyRule, ValidateRoleBinding, ValidateRoleBindingSubject)

const list = (value: unknown): string[] => (Array.isArray(value) ? (value as string[]) : []);

function validateRules(obj: KubeObject, namespaced: boolean): StatusCause[] {
  const causes: StatusCause[] = [];
  list(obj.rules).forEach((value: unknown, i) => {
    const rule = value as Record<string, unknown>;
    const at = `rules[${i}]`;
    if (list(rule.verbs).length === 0) causes.push(required(`${at}.verbs`, 'verbs must contain at least one value'));
    const urls = list(rule.nonResourceURLs);
    if (urls.length > 0) {
      if (namespaced) causes.push(invalid(`${at}.nonResourceURLs`, goStringSlice(urls), 'namespaced rules cannot apply to non-resource URLs'));
      if (list(rule.apiGroups).length > 0 || list(rule.resources).length > 0 || list(rule.resourceNames).length > 0) {
        causes.push(invalid(`${at}.nonResourceURLs`, goStringSlice(urls), 'rules cannot apply to both regular resources and non-resource URLs'));
      }
      return;
    }
    if (list(rule.apiGroups).length === 0) causes.push(required(`${at}.apiGroups`, 'resource rules must supply at least one api group'));
    if (list(rule.resources).length === 0) causes.push(required(`${at}.resources`, 'resource rules must supply at least one resource'));
  });
  return causes;
}

function validateRole(obj: KubeObject): StatusCause[] {
  return validateRules(obj, true);
}

function validateClusterRole(obj: KubeObject): StatusCause[] {
  const causes = validateRules(obj, false);
  const rule = obj.aggregationRule as { clusterRoleSelectors?: unknown[] | null } | null | undefined;
  if (rule !== undefined && rule !== null) {
    const selectors = rule.clusterRoleSelectors ?? [];
    if (selectors.length === 0) {
      causes.push(required('aggregationRule.clusterRoleSelectors', 'at least one clusterRoleSelector required if aggregationRule is non-nil'));
    }
    selectors.forEach((selector, i) => {
      const matcher = labelSelectorMatcher(selector as Parameters<typeof labelSelectorMatcher>[0]);
      if (typeof matcher !== 'function') {
        causes.push({ reason: 'FieldValueInvalid', message: matcher.error, field: `aggregationRule.clusterRoleSelectors[${i}]` });
      }
    });
  }
  return causes;
}

function validateSubjects(obj: KubeObject, namespaced: boolean): StatusCause[] {
  const causes: StatusCause[] = [];
  list(obj.subjects).forEach((value: unknown, i) => {
    const subject = value as { kind?: string; apiGroup?: string; name?: string; namespace?: string };
    const at = `subjects[${i}]`;
    const name = subject.name ?? '';
    if (!name) causes.push(required(`${at}.name`));
    const apiGroup = subject.apiGroup ?? '';
    switch (subject.kind) {
      case 'ServiceAccount': {
        const problem = name ? dnsSubdomainProblem(name) : undefined;
        if (problem) causes.push(invalid(`${at}.name`, goQuote(name), problem));
        if (apiGroup) causes.push(notSupported(`${at}.apiGroup`, apiGroup, ['']));
        if (!namespaced && !subject.namespace) causes.push(required(`${at}.namespace`));
        break;
      }
      case 'User':
      case 'Group':
        if (apiGroup !== RBAC_GROUP) causes.push(notSupported(`${at}.apiGroup`, apiGroup, [RBAC_GROUP]));
        break;
      default:
        causes.push(notSupported(`${at}.kind`, subject.kind ?? '', SUBJECT_KINDS));
    }
  });
  return causes;
}

function validateBinding(obj: KubeObject, namespaced: boolean): StatusCause[] {
  const causes: StatusCause[] = [];
  const ref = (obj.roleRef ?? {}) as { apiGroup?: string; kind?: string; name?: string };
  if ((ref.apiGroup ?? '') !== RBAC_GROUP) causes.push(notSupported('roleRef.apiGroup', ref.apiGroup ?? '', [RBAC_GROUP]));
  const kinds = namespaced ? ROLE_KINDS : ['ClusterRole'];
  if (!kinds.includes(ref.kind ?? '')) causes.push(notSupported('roleRef.kind', ref.kind ?? '', kinds));
  const name = ref.name ?? '';
  if (!name) causes.push(required('roleRef.name'));
  else {
    const problem = pathSegmentNameProblem(name);
    if (problem) causes.push(invalid('roleRef.name', goQuote(name), problem));
  }
  return [...causes, ...validateSubjects(obj, namespaced)];
}

/** `roleRef` is immutable: a binding to another role is a new binding (kube: "cannot change roleRef"). */
function validateBindingUpdate(next: KubeObject, current: KubeObject): StatusCause[] {
  const a = (current.roleRef ?? {}) as Record<string, string | undefined>;
  const b = (next.roleRef ?? {}) as Record<string, string | undefined>;
  if (a.apiGroup === b.apiGroup && a.kind === b.kind && a.name === b.name) return [];
  const shown = `rbac.RoleRef{APIGroup:${goQuote(b.apiGroup ?? '')}, Kind:${goQuote(b.kind ?? '')}, Name:${goQuote(b.name ?? '')}}`;
  return [invalid('roleRef', shown, 'cannot change roleRef')];
}

/** v1 defaults: a subject's apiGroup (the RBAC group for users and groups), the roleRef's group. */
function bindingDefaults(obj: KubeObject): void {
  const ref = obj.roleRef as Record<string, unknown> | undefined;
  if (isJsonObject(ref) && !ref.apiGroup) ref.apiGroup = RBAC_GROUP;
  for (const subject of list(obj.subjects) as unknown as Array<Record<string, unknown>>) {
    if (isJsonObject(subject) && !subject.apiGroup && (subject.kind === 'User' || subject.kind === 'Group')) subject.apiGroup = RBAC_GROUP;
  }
}

// ---------------------------------------------------------------------------------------------
// Printers (kubectl get): as kube-apiserver's

const CREATED_AT = column('Created At', 'Time at which the object was created.', { type: 'date' });

const ROLE_PRINTER: Printer = {
  columns: [NAME_COLUMN, CREATED_AT],
  cells: (role) => [role.metadata.name ?? '', typeof role.metadata.creationTimestamp === 'string' ? role.metadata.creationTimestamp : ''],
};

function subjectNames(binding: KubeObject, kind: string): string {
  const subjects = list(binding.subjects) as unknown as Array<{ kind?: string; name?: string; namespace?: string }>;
  return subjects
    .filter((s) => s.kind === kind)
    .map((s) => (kind === 'ServiceAccount' ? `${s.namespace ?? binding.metadata.namespace ?? ''}/${s.name ?? ''}` : (s.name ?? '')))
    .join(', ');
}

const BINDING_PRINTER: Printer = {
  columns: [
    NAME_COLUMN,
    column('Role', 'Role references the role the binding grants.'),
    AGE_COLUMN,
    column('Users', 'Users in the binding.', { priority: 1 }),
    column('Groups', 'Groups in the binding.', { priority: 1 }),
    column('ServiceAccounts', 'ServiceAccounts in the binding.', { priority: 1 }),
  ],
  cells: (binding, now) => {
    const ref = (binding.roleRef ?? {}) as { kind?: string; name?: string };
    return [
      binding.metadata.name ?? '',
      `${ref.kind ?? ''}/${ref.name ?? ''}`,
      ageOf(binding.metadata.creationTimestamp, now),
      subjectNames(binding, 'User'),
      subjectNames(binding, 'Group'),
      subjectNames(binding, 'ServiceAccount'),
    ];
  },
};

// ---------------------------------------------------------------------------------------------
// The four definitions

/**
 * Before the escalation check, which reads the rules and roleRef: the body's types and the kind's
 * own rules, so a malformed body is its 400 or 422 and never reaches the check half-formed.
 */
function checkedBody(kind: string, obj: KubeObject, prepare: (obj: KubeObject) => void, validate: (obj: KubeObject) => StatusCause[]): void {
  prepare(obj);
  const causes = validate(obj);
  if (causes.length) throw errors.invalid(kind, obj.metadata.name ?? '', RBAC_GROUP, causes);
}

const common = {
  group: RBAC_GROUP,
  version: 'v1',
  shortNames: [],
  categories: [],
  subresources: [],
  fieldLabels: {},
  nameRule: 'path-segment',
} as const;

function roleDefinition(kind: 'Role' | 'ClusterRole'): ResourceDefinition {
  const namespaced = kind === 'Role';
  const prepare = (obj: KubeObject): void => checkRoleShape(kind, obj);
  const validate = namespaced ? validateRole : validateClusterRole;
  return {
    ...common,
    kind,
    plural: namespaced ? 'roles' : 'clusterroles',
    singular: namespaced ? 'role' : 'clusterrole',
    namespaced,
    printer: ROLE_PRINTER,
    topLevelFields: namespaced ? standardFields('rules') : standardFields('rules', 'aggregationRule'),
    storagePath: `${RBAC_GROUP}/${namespaced ? 'roles' : 'clusterroles'}`,
    applyDefaults: prepare,
    validate,
    authorizeWrite: (context, write) => {
      checkedBody(kind, write.object, prepare, validate);
      return authorizeRoleWrite(context, kind, write);
    },
  };
}

function bindingDefinition(kind: 'RoleBinding' | 'ClusterRoleBinding'): ResourceDefinition {
  const namespaced = kind === 'RoleBinding';
  const prepare = (obj: KubeObject): void => {
    checkBindingShape(kind, obj);
    bindingDefaults(obj);
  };
  const validate = (obj: KubeObject): StatusCause[] => validateBinding(obj, namespaced);
  return {
    ...common,
    kind,
    plural: namespaced ? 'rolebindings' : 'clusterrolebindings',
    singular: namespaced ? 'rolebinding' : 'clusterrolebinding',
    namespaced,
    printer: BINDING_PRINTER,
    topLevelFields: standardFields('subjects', 'roleRef'),
    storagePath: `${RBAC_GROUP}/${namespaced ? 'rolebindings' : 'clusterrolebindings'}`,
    applyDefaults: prepare,
    validate,
    validateUpdate: validateBindingUpdate,
    authorizeWrite: (context, write) => {
      checkedBody(kind, write.object, prepare, validate);
      return authorizeBindingWrite(context, kind, write);
    },
  };
}

export const ROLE_DEFINITION = roleDefinition('Role');
export const CLUSTER_ROLE_DEFINITION = roleDefinition('ClusterRole');
export const ROLE_BINDING_DEFINITION = bindingDefinition('RoleBinding');
export const CLUSTER_ROLE_BINDING_DEFINITION = bindingDefinition('ClusterRoleBinding');

export const RBAC_DEFINITIONS: readonly ResourceDefinition[] = [
  ROLE_DEFINITION,
  CLUSTER_ROLE_DEFINITION,
  ROLE_BINDING_DEFINITION,
  CLUSTER_ROLE_BINDING_DEFINITION,
];
