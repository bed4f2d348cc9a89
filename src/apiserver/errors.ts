/**
 * API errors, rendered as Kubernetes `Status` objects so that kubectl and client libraries show
 * them the way users know (`Error from server (NotFound): nodes "x" not found`).
 *
 * The body has kube-apiserver's shape field for field: `kind`, `apiVersion`, `metadata: {}`,
 * `status`, `message`, `reason`, `details` and `code`, in that order, with the empty `details`
 * fields left out as Go's `omitempty` leaves them out. Whether `details` is there at all depends
 * on the reason, as it does with the k8s.io/apimachinery constructor behind each one: clients read
 * it without checking for nil where kube-apiserver always sends it (kubectl debug panics on a 404
 * without it), so toStatus() adds at least `{}` for those reasons whoever built the error.
 */

export interface StatusCause {
  reason: string;
  message: string;
  field?: string;
}

export interface StatusDetails {
  name?: string;
  group?: string;
  /** The resource (plural), as Kubernetes fills it in, or the kind for Invalid. */
  kind?: string;
  uid?: string;
  causes?: StatusCause[];
  retryAfterSeconds?: number;
}

export type StatusReason =
  | 'BadRequest'
  | 'Unauthorized'
  | 'Forbidden'
  | 'NotFound'
  | 'AlreadyExists'
  | 'Conflict'
  | 'Gone'
  | 'Expired'
  | 'Invalid'
  | 'MethodNotAllowed'
  | 'NotAcceptable'
  | 'RequestEntityTooLarge'
  | 'UnsupportedMediaType'
  | 'TooManyRequests'
  | 'InternalError'
  | 'ServiceUnavailable'
  | 'Timeout';

export interface Status {
  kind: 'Status';
  apiVersion: 'v1';
  metadata: Record<string, never>;
  status: 'Failure';
  message: string;
  reason?: StatusReason;
  details?: StatusDetails;
  code: number;
}

/**
 * What kube-apiserver answers to a DELETE that removed an object at once, for every kind but
 * pods and namespaces (its registry's finalizeDelete): no message, reason or code.
 */
export interface SuccessStatus {
  kind: 'Status';
  apiVersion: 'v1';
  metadata: Record<string, never>;
  status: 'Success';
  details: StatusDetails;
}

/**
 * Reasons whose apimachinery constructor always fills in `details` (NewNotFound, NewAlreadyExists,
 * NewConflict, NewInvalid, NewForbidden, NewInternalError, NewTooManyRequests, NewTimeoutError,
 * and NewGenericServerResponse behind the 404 and 405 of unknown paths and methods). The others
 * (NewBadRequest, NewUnauthorized, NewResourceExpired, NewServiceUnavailable, the negotiation
 * errors, request-entity-too-large) have none.
 */
const REASONS_WITH_DETAILS: ReadonlySet<StatusReason> = new Set([
  'NotFound',
  'AlreadyExists',
  'Conflict',
  'Invalid',
  'Forbidden',
  'MethodNotAllowed',
  'InternalError',
  'TooManyRequests',
  'Timeout',
]);

/** Details as Go serializes metav1.StatusDetails: fixed field order, empty values left out. */
export function cleanDetails(details: StatusDetails): StatusDetails {
  const out: StatusDetails = {};
  if (details.name) out.name = details.name;
  if (details.group) out.group = details.group;
  if (details.kind) out.kind = details.kind;
  if (details.uid) out.uid = details.uid;
  if (details.causes?.length) {
    out.causes = details.causes.map((c) => ({
      ...(c.reason ? { reason: c.reason } : {}),
      ...(c.message ? { message: c.message } : {}),
      ...(c.field ? { field: c.field } : {}),
    })) as StatusCause[];
  }
  if (details.retryAfterSeconds) out.retryAfterSeconds = details.retryAfterSeconds;
  return out;
}

export class ApiError extends Error {
  override name = 'ApiError';
  constructor(
    readonly code: number,
    readonly reason: StatusReason,
    message: string,
    readonly details?: StatusDetails,
  ) {
    super(message);
  }

  toStatus(): Status {
    const details = this.details ?? (REASONS_WITH_DETAILS.has(this.reason) ? {} : undefined);
    return {
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: this.message,
      reason: this.reason,
      ...(details ? { details: cleanDetails(details) } : {}),
      code: this.code,
    };
  }
}

/** The Status Success a DELETE answers when the object is gone at once (kinds that do not return it). */
export function deletedStatus(resource: ResourceRef, name: string, uid: string | undefined): SuccessStatus {
  return {
    kind: 'Status',
    apiVersion: 'v1',
    metadata: {},
    status: 'Success',
    details: cleanDetails({ name, group: resource.group, kind: resource.plural, ...(uid ? { uid } : {}) }),
  };
}

/** `group/resource` as Kubernetes prints it in messages: `nodes`, `leases.coordination.k8s.io`. */
export interface ResourceRef {
  group: string;
  plural: string;
}

function qualified(resource: ResourceRef): string {
  return resource.group ? `${resource.plural}.${resource.group}` : resource.plural;
}

export const errors = {
  badRequest(message: string): ApiError {
    return new ApiError(400, 'BadRequest', message);
  },
  unauthorized(): ApiError {
    return new ApiError(401, 'Unauthorized', 'Unauthorized');
  },
  /** `resource` (and `name`) fill in details, as NewForbidden does; without them details are `{}`. */
  forbidden(message: string, resource?: ResourceRef, name?: string): ApiError {
    return new ApiError(
      403,
      'Forbidden',
      message,
      resource ? { ...(name ? { name } : {}), group: resource.group, kind: resource.plural } : undefined,
    );
  },
  notFound(resource: ResourceRef, name: string): ApiError {
    return new ApiError(404, 'NotFound', `${qualified(resource)} "${name}" not found`, {
      name,
      group: resource.group,
      kind: resource.plural,
    });
  },
  /**
   * A path the server does not serve (an unknown group, version, resource or subresource), worded
   * as kube-apiserver answers it, details `{}`. kubectl tells this from a missing object by the
   * empty details.name (kubectl debug: "ephemeral containers are disabled for this cluster").
   */
  pathNotFound(): ApiError {
    return new ApiError(404, 'NotFound', 'the server could not find the requested resource', {});
  },
  alreadyExists(resource: ResourceRef, name: string): ApiError {
    return new ApiError(409, 'AlreadyExists', `${qualified(resource)} "${name}" already exists`, {
      name,
      group: resource.group,
      kind: resource.plural,
    });
  },
  conflict(resource: ResourceRef, name: string, why: string): ApiError {
    return new ApiError(
      409,
      'Conflict',
      `Operation cannot be fulfilled on ${qualified(resource)} "${name}": ${why}`,
      { name, group: resource.group, kind: resource.plural },
    );
  },
  modified(resource: ResourceRef, name: string): ApiError {
    return errors.conflict(
      resource,
      name,
      'the object has been modified; please apply your changes to the latest version and try again',
    );
  },
  expired(message: string): ApiError {
    return new ApiError(410, 'Expired', message);
  },
  /** NewInvalid: `Kind.group "name" is invalid: field: why` (several causes in `[…]`). */
  invalid(kind: string, name: string, group: string, causes: StatusCause[]): ApiError {
    const each = causes.map((c) => (c.field ? `${c.field}: ${c.message}` : c.message));
    const summary = each.length === 1 ? each[0] : `[${each.join(', ')}]`;
    const qualifiedKind = group ? `${kind}.${group}` : kind;
    return new ApiError(422, 'Invalid', `${qualifiedKind} "${name}" is invalid: ${summary}`, {
      name,
      group,
      kind,
      causes,
    });
  },
  /** A method the path does not take, worded as kube-apiserver's answer for it. */
  methodNotAllowed(): ApiError {
    return new ApiError(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource', {});
  },
  notAcceptable(accept: string): ApiError {
    return new ApiError(
      406,
      'NotAcceptable',
      `only the following media types are accepted: application/json, application/yaml (asked for ${accept})`,
    );
  },
  tooLarge(limitBytes: number): ApiError {
    return new ApiError(
      413,
      'RequestEntityTooLarge',
      `the request body is larger than the limit of ${limitBytes} bytes`,
    );
  },
  unsupportedMediaType(contentType: string, supported: readonly string[]): ApiError {
    return new ApiError(
      415,
      'UnsupportedMediaType',
      `the body of the request was in an unknown format - accepted media types include: ${supported.join(', ')} (got ${contentType || 'none'})`,
    );
  },
  tooManyRequests(message: string, retryAfterSeconds: number): ApiError {
    return new ApiError(429, 'TooManyRequests', message, { retryAfterSeconds });
  },
  internal(message: string): ApiError {
    return new ApiError(500, 'InternalError', `Internal error occurred: ${message}`, {
      causes: [{ reason: '', message }],
    });
  },
  /**
   * A list or watch at a resourceVersion the store has not reached: client-go's reflector knows it
   * by the ResourceVersionTooLarge cause (IsTooLargeResourceVersion) and waits instead of failing.
   */
  tooLargeResourceVersion(requested: number, current: number): ApiError {
    return new ApiError(504, 'Timeout', `Timeout: Too large resource version: ${requested}, current: ${current}`, {
      causes: [{ reason: 'ResourceVersionTooLarge', message: 'Too large resource version' }],
      retryAfterSeconds: 1,
    });
  },
  unavailable(message: string): ApiError {
    return new ApiError(503, 'ServiceUnavailable', message);
  },
  /**
   * The datastore did not complete the request (etcd electing a leader, a lost member, the
   * datastore thread gone): nothing wrong with the request, so not a 500; another try, here or on
   * another server, may succeed.
   */
  datastoreUnavailable(reason: string): ApiError {
    return new ApiError(503, 'ServiceUnavailable', `the datastore did not complete the request; try again: ${reason}`, {
      retryAfterSeconds: 1,
    });
  },
};
