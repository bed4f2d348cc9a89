/**
 * A small decoder for Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`).
 *
 * kubectl's generator commands (`kubectl create namespace`, `create pdb`, `create configmap`,
 * `create secret`, `create serviceaccount`, `create token` and `create deployment` in kubectl
 * 1.32; 1.20 sends them as JSON) send their
 * POST body as protobuf. Drover stores JSON, so this decodes the envelope and the few kinds those
 * commands create (plus Pod, which shares the PodSpec) into the JSON shape the JSON API accepts. Everything else is refused
 * with a message telling the user to send JSON or YAML.
 *
 * Wire format: the 4 magic bytes `k8s\0`, then a `runtime.Unknown` message
 * (k8s.io/apimachinery/pkg/runtime/generated.proto):
 *   1 typeMeta { 1 apiVersion, 2 kind }, 2 raw (the object's own message), 3 contentEncoding,
 *   4 contentType.
 * Go's gogo-protobuf writes every non-pointer field, so empty strings and zero integers are on the
 * wire; they are dropped here where Go's JSON encoding (`omitempty`) would drop them.
 *
 * This file reads the envelope and picks the kind's decoder. The wire format is
 * ./protobuf/reader.ts, the shared apimachinery messages ./protobuf/meta.ts, and each API group's
 * kinds have their own file (./protobuf/core-v1.ts, core-v1-config.ts, apps-v1.ts, policy-v1.ts).
 */

import { decodeDeployment } from './protobuf/apps-v1.js';
import { decodeCronJob, decodeJob } from './protobuf/batch-v1.js';
import { decodeNamespace, decodePod } from './protobuf/core-v1.js';
import { decodeConfigMap, decodeSecret } from './protobuf/core-v1-config.js';
import { jsonHint, ProtobufDecodeError, ProtobufUnsupportedError } from './protobuf/errors.js';
import { decodeDeleteOptions } from './protobuf/meta.js';
import { decodePodDisruptionBudget } from './protobuf/policy-v1.js';
import { decodeRbacClusterRole, decodeRbacClusterRoleBinding, decodeRbacRole, decodeRbacRoleBinding } from './protobuf/rbac-v1.js';
import {
  decodeSelfSubjectAccessReview,
  decodeSelfSubjectReview,
  decodeSelfSubjectRulesReview,
  decodeSubjectAccessReview,
} from './protobuf/reviews-v1.js';
import { embedded, parseMessage, str } from './protobuf/reader.js';
import { decodeServiceAccount, decodeTokenRequest } from './protobuf/service-accounts.js';
import { decodeService } from './protobuf/services-v1.js';

export { ProtobufDecodeError, ProtobufUnsupportedError } from './protobuf/errors.js';

export interface DecodedProtobuf {
  apiVersion: string;
  kind: string;
  /** The object in its JSON shape, apiVersion and kind included. */
  object: Record<string, unknown>;
}

const MAGIC = Buffer.from([0x6b, 0x38, 0x73, 0x00]); // "k8s\0"

const SUPPORTED =
  'v1 Namespace, v1 Pod, v1 ConfigMap, v1 Secret, v1 Service, v1 ServiceAccount, authentication.k8s.io/v1 TokenRequest, apps/v1 Deployment, batch/v1 Job and CronJob, policy/v1 PodDisruptionBudget, the rbac.authorization.k8s.io/v1 kinds and the access reviews';

const DECODERS = new Map<string, (raw: Uint8Array) => Record<string, unknown>>([
  ['v1/Namespace', decodeNamespace],
  ['policy/v1/PodDisruptionBudget', decodePodDisruptionBudget],
  ['v1/Pod', decodePod],
  ['v1/ConfigMap', decodeConfigMap],
  ['v1/Secret', decodeSecret],
  ['v1/Service', decodeService],
  ['v1/ServiceAccount', decodeServiceAccount],
  ['authentication.k8s.io/v1/TokenRequest', decodeTokenRequest],
  ['apps/v1/Deployment', decodeDeployment],
  ['batch/v1/Job', decodeJob],
  ['batch/v1/CronJob', decodeCronJob],
  ['rbac.authorization.k8s.io/v1/Role', decodeRbacRole],
  ['rbac.authorization.k8s.io/v1/ClusterRole', decodeRbacClusterRole],
  ['rbac.authorization.k8s.io/v1/RoleBinding', decodeRbacRoleBinding],
  ['rbac.authorization.k8s.io/v1/ClusterRoleBinding', decodeRbacClusterRoleBinding],
  ['authorization.k8s.io/v1/SelfSubjectAccessReview', decodeSelfSubjectAccessReview],
  ['authorization.k8s.io/v1/SubjectAccessReview', decodeSubjectAccessReview],
  ['authorization.k8s.io/v1/SelfSubjectRulesReview', decodeSelfSubjectRulesReview],
  ['authentication.k8s.io/v1/SelfSubjectReview', decodeSelfSubjectReview],
  ['v1/DeleteOptions', decodeDeleteOptions],
  ['meta.k8s.io/v1/DeleteOptions', decodeDeleteOptions],
]);

// ---------------------------------------------------------------------------------------------
// Envelope

/** True when a body starts with the Kubernetes protobuf magic `k8s\0`. */
export function isKubernetesProtobuf(body: Uint8Array): boolean {
  return body.length >= MAGIC.length && MAGIC.equals(body.subarray(0, MAGIC.length));
}

/**
 * Decode a Kubernetes protobuf request body into the object's JSON form.
 *
 * Throws ProtobufDecodeError (an ApiError: 400 BadRequest) for malformed input and
 * ProtobufUnsupportedError (an ApiError: 415 UnsupportedMediaType) for kinds, encodings and
 * fields Drover does not decode; both messages are fit to show to a kubectl user.
 */
export function decodeKubernetesProtobuf(body: Buffer): DecodedProtobuf {
  if (!isKubernetesProtobuf(body)) {
    throw new ProtobufDecodeError('the body does not start with the Kubernetes protobuf magic "k8s\\0"');
  }
  const m = 'runtime.Unknown';
  const fields = parseMessage(body.subarray(MAGIC.length), m);
  let apiVersion = '';
  let kind = '';
  let contentEncoding = '';
  let contentType = '';
  for (const f of fields) {
    if (f.field === 3) contentEncoding = str(f, m);
    else if (f.field === 4) contentType = str(f, m);
  }
  const typeMeta = embedded(fields, 1, m);
  if (typeMeta) {
    for (const f of parseMessage(typeMeta, 'runtime.TypeMeta')) {
      if (f.field === 1) apiVersion = str(f, 'runtime.TypeMeta');
      else if (f.field === 2) kind = str(f, 'runtime.TypeMeta');
    }
  }
  const raw = embedded(fields, 2, m) ?? new Uint8Array(0);

  const decoder = DECODERS.get(`${apiVersion}/${kind}`);
  if (!decoder) {
    const got = kind ? `${apiVersion ? `${apiVersion} ` : ''}${kind}` : 'an object without a kind';
    throw new ProtobufUnsupportedError(
      `Drover accepts protobuf request bodies only for ${SUPPORTED} (got ${got}); ${jsonHint(kind)}`,
    );
  }
  if (contentEncoding) {
    throw new ProtobufUnsupportedError(
      `Drover does not accept protobuf request bodies with content encoding "${contentEncoding}"; ${jsonHint(kind)}`,
    );
  }
  if (contentType && !contentType.toLowerCase().startsWith('application/vnd.kubernetes.protobuf')) {
    throw new ProtobufUnsupportedError(
      `Drover does not accept protobuf envelopes carrying ${contentType}; ${jsonHint(kind)}`,
    );
  }
  return { apiVersion, kind, object: decoder(raw) };
}
