import type { UserInfo } from '../auth.js';
import { type CreateOnlyRequest, type KindContext, type ResourceDefinition, standardFields } from '../definition.js';
import { errors } from '../errors.js';
import type { KubeObject } from '../objects.js';
import {
  type AccessReviewSpec,
  accessReviewStatus,
  parseAccessReviewSpec,
  reviewSubject,
  selfSubjectReviewStatus,
  subjectRulesReviewStatus,
} from '../rbac/reviews.js';
import { InMemoryRbacSource } from '../rbac/source.js';
import type { AuthorizationAttributes } from '../rbac/types.js';
import { NAME_COLUMN, type Printer } from '../table.js';

/**
 * The access reviews: authorization.k8s.io/v1 SelfSubjectAccessReview (`kubectl auth can-i`),
 * SubjectAccessReview, SelfSubjectRulesReview (`kubectl auth can-i --list`) and
 * authentication.k8s.io/v1 SelfSubjectReview (`kubectl auth whoami`). They are never stored: a
 * POST is answered 201 with the body and its `status` filled in (../rbac/reviews.ts does the
 * work), every other verb is a 405. The review's own `create` is authorized first like any
 * request: the default `system:basic-user` role lets every signed-in user make the three self
 * reviews; SubjectAccessReview, which asks about someone else, needs an explicit grant.
 */

const AUTHORIZATION_GROUP = 'authorization.k8s.io';
const AUTHENTICATION_GROUP = 'authentication.k8s.io';

const NAME_ONLY: Printer = { columns: [NAME_COLUMN], cells: (obj) => [obj.metadata.name ?? ''] };

/** A review needs a user: in-process callers have none to ask about. */
function caller(kind: string, request: CreateOnlyRequest): UserInfo {
  if (!request.user) throw errors.badRequest(`a ${kind} needs an authenticated caller`);
  return request.user;
}

/** The review as received, with its status: kube answers the object it was sent, spec untouched. */
function answer(request: CreateOnlyRequest, status: unknown): KubeObject {
  const { status: _ignored, ...body } = request.object;
  return { ...body, metadata: { ...body.metadata, creationTimestamp: null }, status } as unknown as KubeObject;
}

function judge(context: KindContext, kind: string, user: UserInfo, spec: unknown, subject: boolean): ReturnType<typeof accessReviewStatus> {
  const parsed = parseAccessReviewSpec(spec, { subject });
  if (parsed.causes) throw errors.invalid(kind, '', AUTHORIZATION_GROUP, parsed.causes);
  if (!context.authorizer) throw errors.internal(`${kind} needs the server's authorizer`);
  const decision = context.authorizer.authorize(user, parsed.attributes as AuthorizationAttributes);
  return accessReviewStatus({ allowed: decision.allowed, reason: decision.reason ?? '' });
}

function review(group: string, kind: string, respond: ResourceDefinition['respondToCreate'], fields = standardFields('spec', 'status')): ResourceDefinition {
  const plural = `${kind.toLowerCase()}s`;
  return {
    group,
    version: 'v1',
    kind,
    plural,
    singular: kind.toLowerCase(),
    namespaced: false,
    shortNames: [],
    categories: [],
    subresources: [],
    printer: NAME_ONLY,
    fieldLabels: {},
    topLevelFields: fields,
    storagePath: `${group}/${plural}`,
    nameRule: 'dns-subdomain',
    respondToCreate: respond,
  };
}

export const SELF_SUBJECT_ACCESS_REVIEW_DEFINITION = review(AUTHORIZATION_GROUP, 'SelfSubjectAccessReview', (context, request) => {
  const user = caller('SelfSubjectAccessReview', request);
  return answer(request, judge(context, 'SelfSubjectAccessReview', user, request.object.spec, false));
});

export const SUBJECT_ACCESS_REVIEW_DEFINITION = review(AUTHORIZATION_GROUP, 'SubjectAccessReview', (context, request) => {
  caller('SubjectAccessReview', request);
  const spec = request.object.spec;
  const parsed = parseAccessReviewSpec(spec, { subject: true });
  if (parsed.causes) throw errors.invalid('SubjectAccessReview', '', AUTHORIZATION_GROUP, parsed.causes);
  return answer(request, judge(context, 'SubjectAccessReview', reviewSubject(spec as AccessReviewSpec), spec, true));
});

export const SELF_SUBJECT_RULES_REVIEW_DEFINITION = review(AUTHORIZATION_GROUP, 'SelfSubjectRulesReview', (context, request) => {
  const user = caller('SelfSubjectRulesReview', request);
  const namespace = (request.object.spec as { namespace?: unknown } | undefined)?.namespace;
  if (typeof namespace !== 'string' || !namespace) throw errors.badRequest('no namespace on request');
  return answer(request, subjectRulesReviewStatus(context.rbac ?? new InMemoryRbacSource(), user, namespace));
});

export const SELF_SUBJECT_REVIEW_DEFINITION = review(AUTHENTICATION_GROUP, 'SelfSubjectReview', (_context, request) => {
  const user = caller('SelfSubjectReview', request);
  return answer(request, selfSubjectReviewStatus(user));
}, standardFields('status'));

export const REVIEW_DEFINITIONS: readonly ResourceDefinition[] = [
  SELF_SUBJECT_REVIEW_DEFINITION,
  SELF_SUBJECT_ACCESS_REVIEW_DEFINITION,
  SUBJECT_ACCESS_REVIEW_DEFINITION,
  SELF_SUBJECT_RULES_REVIEW_DEFINITION,
];
