/**
 * API errors, rendered as Kubernetes `Status` objects so that kubectl and client libraries show
 * them the way users know (`Error from server (NotFound): nodes "x" not found`).
 */

export interface StatusCause {
  reason: string;
  message: string;
  field?: string;
}

export interface StatusDetails {
  name?: string;
  group?: string;
  kind?: string;
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
  status: 'Failure' | 'Success';
  message: string;
  reason?: StatusReason;
  details?: StatusDetails;
  code: number;
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
    return {
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: this.message,
      reason: this.reason,
      ...(this.details ? { details: this.details } : {}),
      code: this.code,
    };
  }
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
  forbidden(message: string): ApiError {
    return new ApiError(403, 'Forbidden', message);
  },
  notFound(resource: ResourceRef, name: string): ApiError {
    return new ApiError(404, 'NotFound', `${qualified(resource)} "${name}" not found`, {
      name,
      group: resource.group,
      kind: resource.plural,
    });
  },
  pathNotFound(path: string): ApiError {
    return new ApiError(404, 'NotFound', `the server could not find the requested resource (${path})`);
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
  invalid(kind: string, name: string, group: string, causes: StatusCause[]): ApiError {
    const summary = causes.map((c) => (c.field ? `${c.field}: ${c.message}` : c.message)).join(', ');
    return new ApiError(422, 'Invalid', `${kind} "${name}" is invalid: ${summary}`, {
      name,
      group,
      kind,
      causes,
    });
  },
  methodNotAllowed(method: string, what: string): ApiError {
    return new ApiError(405, 'MethodNotAllowed', `${method} is not supported on ${what}`);
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
    return new ApiError(500, 'InternalError', `Internal error occurred: ${message}`);
  },
  unavailable(message: string): ApiError {
    return new ApiError(503, 'ServiceUnavailable', message);
  },
};
