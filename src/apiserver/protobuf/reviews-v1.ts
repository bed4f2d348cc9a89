/**
 * The access reviews kubectl 1.32 sends as protobuf (k8s.io/api/authorization/v1 and
 * authentication/v1 generated.proto): `auth can-i` (SelfSubjectAccessReview), `auth can-i --list`
 * (SelfSubjectRulesReview), `auth whoami` (SelfSubjectReview), and SubjectAccessReview. A review's
 * status is the server's answer, so a status in the body is ignored.
 */

import { inOrder, type Json, listOrUndefined, nonEmpty } from './go-json.js';
import { decodeObjectMeta } from './meta.js';
import { bytes, embedded, type Field, parseMessage, str } from './reader.js';

const AUTHORIZATION = 'authorization.k8s.io/v1';

/**
 * ResourceAttributes {1 namespace, 2 verb, 3 group, 4 version, 5 resource, 6 subresource, 7 name,
 * 8 fieldSelector, 9 labelSelector}. The selectors only narrow a request, and RBAC ignores them,
 * as kube's does; they are not decoded.
 */
function decodeResourceAttributes(buf: Uint8Array): Json {
  const m = 'ResourceAttributes';
  const names = ['', 'namespace', 'verb', 'group', 'version', 'resource', 'subresource', 'name'];
  const values: Json = {};
  for (const f of parseMessage(buf, m)) {
    const name = names[f.field];
    if (name) values[name] = nonEmpty(str(f, m));
  }
  return inOrder(values, names.slice(1));
}

/** NonResourceAttributes {1 path, 2 verb}. */
function decodeNonResourceAttributes(buf: Uint8Array): Json {
  const m = 'NonResourceAttributes';
  const values: Json = {};
  for (const f of parseMessage(buf, m)) {
    if (f.field === 1) values.path = nonEmpty(str(f, m));
    else if (f.field === 2) values.verb = nonEmpty(str(f, m));
  }
  return inOrder(values, ['path', 'verb']);
}

/** {1 resourceAttributes, 2 nonResourceAttributes}: the part both access review specs share. */
function decodeAttributes(fields: Field[], m: string): Json {
  const resource = embedded(fields, 1, m);
  const nonResource = embedded(fields, 2, m);
  return {
    ...(resource ? { resourceAttributes: decodeResourceAttributes(resource) } : {}),
    ...(nonResource ? { nonResourceAttributes: decodeNonResourceAttributes(nonResource) } : {}),
  };
}

/** SelfSubjectAccessReview {1 metadata, 2 spec {1 resourceAttributes, 2 nonResourceAttributes}, 3 status}. */
export function decodeSelfSubjectAccessReview(raw: Uint8Array): Json {
  const kind = 'SelfSubjectAccessReview';
  const fields = parseMessage(raw, kind);
  const spec = embedded(fields, 2, kind);
  return {
    apiVersion: AUTHORIZATION,
    kind,
    metadata: decodeObjectMeta(embedded(fields, 1, kind)),
    spec: spec ? decodeAttributes(parseMessage(spec, 'SelfSubjectAccessReviewSpec'), 'SelfSubjectAccessReviewSpec') : {},
  };
}

/**
 * SubjectAccessReview {1 metadata, 2 spec, 3 status}; spec {1 resourceAttributes,
 * 2 nonResourceAttributes, 3 user, 4 groups, 5 extra map<string, ExtraValue {1 items}>, 6 uid}.
 */
export function decodeSubjectAccessReview(raw: Uint8Array): Json {
  const kind = 'SubjectAccessReview';
  const fields = parseMessage(raw, kind);
  const specBytes = embedded(fields, 2, kind);
  const spec: Json = {};
  if (specBytes) {
    const m = 'SubjectAccessReviewSpec';
    const specFields = parseMessage(specBytes, m);
    Object.assign(spec, decodeAttributes(specFields, m));
    const groups: string[] = [];
    const extra: Record<string, string[]> = {};
    for (const f of specFields) {
      if (f.field === 3) spec.user = nonEmpty(str(f, m));
      else if (f.field === 4) groups.push(str(f, m));
      else if (f.field === 6) spec.uid = nonEmpty(str(f, m));
      else if (f.field === 5) {
        let key = '';
        const items: string[] = [];
        for (const e of parseMessage(bytes(f, m), 'SubjectAccessReviewSpec.extra entry')) {
          if (e.field === 1) key = str(e, 'SubjectAccessReviewSpec.extra entry');
          else if (e.field === 2) {
            for (const v of parseMessage(bytes(e, 'ExtraValue'), 'ExtraValue')) if (v.field === 1) items.push(str(v, 'ExtraValue'));
          }
        }
        extra[key] = items;
      }
    }
    spec.groups = listOrUndefined(groups);
    if (Object.keys(extra).length) spec.extra = extra;
  }
  return {
    apiVersion: AUTHORIZATION,
    kind,
    metadata: decodeObjectMeta(embedded(fields, 1, kind)),
    spec: inOrder(spec, ['resourceAttributes', 'nonResourceAttributes', 'user', 'groups', 'extra', 'uid']),
  };
}

/** SelfSubjectRulesReview {1 metadata, 2 spec {1 namespace}, 3 status}. */
export function decodeSelfSubjectRulesReview(raw: Uint8Array): Json {
  const kind = 'SelfSubjectRulesReview';
  const fields = parseMessage(raw, kind);
  const specBytes = embedded(fields, 2, kind);
  let namespace = '';
  if (specBytes) for (const f of parseMessage(specBytes, 'SelfSubjectRulesReviewSpec')) if (f.field === 1) namespace = str(f, 'SelfSubjectRulesReviewSpec');
  return {
    apiVersion: AUTHORIZATION,
    kind,
    metadata: decodeObjectMeta(embedded(fields, 1, kind)),
    spec: namespace ? { namespace } : {},
  };
}

/** authentication.k8s.io/v1 SelfSubjectReview {1 metadata, 2 status}: kubectl sends empty metadata only. */
export function decodeSelfSubjectReview(raw: Uint8Array): Json {
  const kind = 'SelfSubjectReview';
  const fields = parseMessage(raw, kind);
  return { apiVersion: 'authentication.k8s.io/v1', kind, metadata: decodeObjectMeta(embedded(fields, 1, kind)) };
}
