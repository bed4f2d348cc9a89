import type { StatusCause } from '../errors.js';
import { rulesFor, type RbacDecision } from './authorizer.js';
import { aggregateMessages } from './go-format.js';
import type { AuthorizationAttributes, RbacSource, UserInfo } from './types.js';

/**
 * The access-review kinds as pure functions: what `kubectl auth can-i` (SelfSubjectAccessReview,
 * and SelfSubjectRulesReview for `--list`), `kubectl auth whoami` (SelfSubjectReview) and
 * delegating servers (SubjectAccessReview) send, turned into authorizer attributes, and the
 * decision turned back into the `status` they expect. The HTTP layer decodes the body (JSON, or
 * protobuf from kubectl 1.32+), authorizes the review's own `create`, and answers 201 with the
 * object it received plus this status.
 */

export interface ResourceAttributesSpec {
  namespace?: string;
  verb?: string;
  group?: string;
  version?: string;
  resource?: string;
  subresource?: string;
  name?: string;
}

export interface NonResourceAttributesSpec {
  path?: string;
  verb?: string;
}

export interface AccessReviewSpec {
  resourceAttributes?: ResourceAttributesSpec | null;
  nonResourceAttributes?: NonResourceAttributesSpec | null;
  /** SubjectAccessReview only: whom to judge. */
  user?: string;
  groups?: string[];
  uid?: string;
  extra?: Record<string, string[]>;
}

export type ParsedReview = { attributes: AuthorizationAttributes; causes?: undefined } | { attributes?: undefined; causes: StatusCause[] };

function stringField(value: unknown, field: string, causes: StatusCause[]): string {
  if (value === undefined || value === null) return '';
  if (typeof value === 'string') return value;
  causes.push({ reason: 'FieldValueInvalid', field, message: `Invalid value: ${JSON.stringify(value)}: must be a string` });
  return '';
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The attributes a SelfSubjectAccessReview (`subject: false`) or SubjectAccessReview
 * (`subject: true`) asks about, or the causes of a 422. Exactly one of resourceAttributes and
 * nonResourceAttributes must be given; a SubjectAccessReview must name a user or a group.
 */
export function parseAccessReviewSpec(spec: unknown, options: { subject: boolean }): ParsedReview {
  const causes: StatusCause[] = [];
  const body = isObject(spec) ? spec : {};
  const resource = body.resourceAttributes;
  const nonResource = body.nonResourceAttributes;
  const hasResource = resource !== undefined && resource !== null;
  const hasNonResource = nonResource !== undefined && nonResource !== null;
  if (hasResource && hasNonResource) {
    causes.push({ reason: 'FieldValueInvalid', field: 'spec.nonResourceAttributes', message: 'Invalid value: "object": cannot be specified in combination with resourceAttributes' });
  }
  if (!hasResource && !hasNonResource) {
    causes.push({
      reason: 'FieldValueInvalid',
      field: 'spec.resourceAttributes',
      message: 'Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified',
    });
  }
  if (options.subject) {
    const groups = body.groups;
    if (groups !== undefined && groups !== null && (!Array.isArray(groups) || groups.some((g) => typeof g !== 'string'))) {
      causes.push({ reason: 'FieldValueInvalid', field: 'spec.groups', message: 'Invalid value: must be a list of strings' });
    }
    const user = stringField(body.user, 'spec.user', causes);
    if (!user && (!Array.isArray(groups) || groups.length === 0)) {
      causes.push({ reason: 'FieldValueInvalid', field: 'spec.user', message: 'Invalid value: "": at least one of user or group must be specified' });
    }
  }
  let attributes: AuthorizationAttributes | undefined;
  if (hasResource && !hasNonResource) {
    if (!isObject(resource)) {
      causes.push({ reason: 'FieldValueInvalid', field: 'spec.resourceAttributes', message: 'Invalid value: must be an object' });
    } else {
      const at = (field: keyof ResourceAttributesSpec): string => stringField(resource[field], `spec.resourceAttributes.${field}`, causes);
      const namespace = at('namespace');
      const subresource = at('subresource');
      const name = at('name');
      attributes = {
        verb: at('verb'),
        group: at('group'),
        resource: at('resource'),
        ...(subresource ? { subresource } : {}),
        ...(namespace ? { namespace } : {}),
        ...(name ? { name } : {}),
      };
      at('version');
    }
  } else if (hasNonResource && !hasResource) {
    if (!isObject(nonResource)) {
      causes.push({ reason: 'FieldValueInvalid', field: 'spec.nonResourceAttributes', message: 'Invalid value: must be an object' });
    } else {
      attributes = {
        verb: stringField(nonResource.verb, 'spec.nonResourceAttributes.verb', causes),
        path: stringField(nonResource.path, 'spec.nonResourceAttributes.path', causes),
      };
    }
  }
  if (causes.length > 0 || !attributes) return { causes };
  return { attributes };
}

/** Whom a SubjectAccessReview judges: exactly the user and groups it names (nothing is added). */
export function reviewSubject(spec: AccessReviewSpec): UserInfo {
  return { name: spec.user ?? '', groups: [...(spec.groups ?? [])] };
}

export interface AccessReviewStatus {
  allowed: boolean;
  denied?: boolean;
  reason?: string;
  evaluationError?: string;
}

/**
 * The status of an access review. RBAC never denies outright (it only fails to allow), so
 * `denied` stays absent, and `reason` only when there is one, as Go's omitempty leaves them.
 */
export function accessReviewStatus(decision: RbacDecision): AccessReviewStatus {
  return { allowed: decision.allowed, ...(decision.reason ? { reason: decision.reason } : {}) };
}

export interface SubjectRulesReviewStatus {
  resourceRules: Array<{ verbs: string[]; apiGroups?: string[]; resources?: string[]; resourceNames?: string[] }>;
  nonResourceRules: Array<{ verbs: string[]; nonResourceURLs?: string[] }>;
  incomplete: boolean;
  evaluationError?: string;
}

/**
 * A SelfSubjectRulesReview's status: every RBAC rule the user holds in `namespace` (the HTTP
 * layer answers 400 `no namespace on request` when the spec has none), split into resource and
 * non-resource rules. Unreadable bindings (a missing role) show as evaluationError.
 */
export function subjectRulesReviewStatus(source: RbacSource, user: UserInfo, namespace: string): SubjectRulesReviewStatus {
  const { rules, errors } = rulesFor(source, user, namespace);
  const status: SubjectRulesReviewStatus = { resourceRules: [], nonResourceRules: [], incomplete: false };
  for (const rule of rules) {
    if ((rule.resources ?? []).length > 0) {
      status.resourceRules.push({
        verbs: [...(rule.verbs ?? [])],
        ...(rule.apiGroups?.length ? { apiGroups: [...rule.apiGroups] } : {}),
        resources: [...rule.resources!],
        ...(rule.resourceNames?.length ? { resourceNames: [...rule.resourceNames] } : {}),
      });
    }
    if ((rule.nonResourceURLs ?? []).length > 0) {
      status.nonResourceRules.push({ verbs: [...(rule.verbs ?? [])], nonResourceURLs: [...rule.nonResourceURLs!] });
    }
  }
  if (errors.length > 0) status.evaluationError = aggregateMessages(errors);
  return status;
}

/** `kubectl auth whoami`: the SelfSubjectReview status for the caller. */
export function selfSubjectReviewStatus(user: UserInfo & { uid?: string; extra?: Record<string, string[]> }): {
  userInfo: { username: string; uid?: string; groups: string[]; extra?: Record<string, string[]> };
} {
  return {
    userInfo: {
      username: user.name,
      ...(user.uid ? { uid: user.uid } : {}),
      groups: [...user.groups],
      ...(user.extra && Object.keys(user.extra).length > 0 ? { extra: user.extra } : {}),
    },
  };
}
