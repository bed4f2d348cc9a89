/**
 * The two ways a protobuf request body fails, and the hint that tells a kubectl user what to send
 * instead.
 */

import { ApiError } from '../errors.js';

/** A malformed protobuf body (bad magic, truncated varint or length, wrong wire type): 400. */
export class ProtobufDecodeError extends ApiError {
  override name = 'ProtobufDecodeError';
  constructor(detail: string) {
    super(400, 'BadRequest', `error decoding protobuf request body: ${detail}`);
  }
}

/** A well-formed protobuf body that Drover cannot decode (another kind, an unknown field): 415. */
export class ProtobufUnsupportedError extends ApiError {
  override name = 'ProtobufUnsupportedError';
  constructor(message: string) {
    super(415, 'UnsupportedMediaType', message);
  }
}

/** kubectl's generator subcommand for a kind, where it has one. */
const GENERATORS = new Map<string, string>(Object.entries({
  Namespace: 'namespace',
  PodDisruptionBudget: 'pdb',
  ConfigMap: 'configmap',
  Secret: 'secret generic',
  ServiceAccount: 'serviceaccount',
  Deployment: 'deployment',
  Job: 'job',
  CronJob: 'cronjob',
  Service: 'service clusterip',
  Ingress: 'ingress',
  Role: 'role',
  RoleBinding: 'rolebinding',
  ClusterRole: 'clusterrole',
  ClusterRoleBinding: 'clusterrolebinding',
  ResourceQuota: 'quota',
  PriorityClass: 'priorityclass',
}));

export function jsonHint(kind: string): string {
  const generator = GENERATORS.get(kind);
  return generator
    ? `send JSON or YAML instead, e.g. kubectl create ${generator} ... --dry-run=client -o yaml | kubectl apply -f -`
    : 'send JSON or YAML instead, e.g. write the object to a YAML file and kubectl apply -f it';
}

export function unsupportedField(kind: string, message: string, field: number): ProtobufUnsupportedError {
  return new ProtobufUnsupportedError(
    `Drover cannot decode field ${field} of ${message} in a protobuf request body; ${jsonHint(kind)}`,
  );
}
