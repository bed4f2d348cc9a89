/** apps/v1 kinds (k8s.io/api/apps/v1/generated.proto): Deployment. */

import { decodePodTemplateSpec } from './core-v1.js';
import { inOrder, type Json, nonZero, orUndefined } from './go-json.js';
import { decodeIntOrString, decodeLabelSelector, decodeObjectMeta } from './meta.js';
import { bool, embedded, int32, parseMessage, str } from './reader.js';

/** apps/v1 DeploymentStrategy {1 type, 2 rollingUpdate {1 maxUnavailable, 2 maxSurge}}. */
function decodeDeploymentStrategy(buf: Uint8Array, kind: string): Json {
  const m = 'DeploymentStrategy';
  const fields = parseMessage(buf, m);
  let type = '';
  for (const f of fields) if (f.field === 1) type = str(f, m);
  const out: Json = {};
  if (type) out.type = type;
  const rolling = embedded(fields, 2, m);
  if (rolling) {
    const r = 'RollingUpdateDeployment';
    const rollingFields = parseMessage(rolling, r);
    const rollingUpdate: Json = {};
    const maxUnavailable = embedded(rollingFields, 1, r);
    if (maxUnavailable) rollingUpdate.maxUnavailable = decodeIntOrString(maxUnavailable, kind);
    const maxSurge = embedded(rollingFields, 2, r);
    if (maxSurge) rollingUpdate.maxSurge = decodeIntOrString(maxSurge, kind);
    out.rollingUpdate = rollingUpdate;
  }
  return out;
}

/**
 * apps/v1 Deployment {1 metadata, 2 spec, 3 status (ignored: the controller's)}. Spec {1 replicas,
 * 2 selector, 3 template, 4 strategy, 5 minReadySeconds, 6 revisionHistoryLimit, 7 paused,
 * 9 progressDeadlineSeconds, 10 podReplacementPolicy}; replicas, revisionHistoryLimit,
 * progressDeadlineSeconds and podReplacementPolicy are pointers, so an explicit zero is kept.
 */
export function decodeDeployment(raw: Uint8Array): Json {
  const kind = 'Deployment';
  const fields = parseMessage(raw, kind);
  const metadata = decodeObjectMeta(embedded(fields, 1, kind));
  const m = 'DeploymentSpec';
  const specFields = parseMessage(embedded(fields, 2, kind) ?? new Uint8Array(0), m);
  const v: Json = {};
  for (const f of specFields) {
    switch (f.field) {
      case 1: v.replicas = int32(f, m); break;
      case 5: v.minReadySeconds = nonZero(int32(f, m)); break;
      case 6: v.revisionHistoryLimit = int32(f, m); break;
      case 7: v.paused = orUndefined(bool(f, m)); break;
      case 9: v.progressDeadlineSeconds = int32(f, m); break;
      case 10: v.podReplacementPolicy = str(f, m); break;
      default: break; // 2-4 are messages, merged below; others are newer than this decoder
    }
  }
  const selector = embedded(specFields, 2, m);
  if (selector) v.selector = decodeLabelSelector(selector, kind);
  v.template = decodePodTemplateSpec(embedded(specFields, 3, m), { kind, path: 'spec.template' });
  const strategy = embedded(specFields, 4, m);
  v.strategy = strategy ? decodeDeploymentStrategy(strategy, kind) : {};
  const spec = inOrder(v, [
    'replicas', 'selector', 'template', 'strategy', 'minReadySeconds', 'revisionHistoryLimit', 'paused',
    'progressDeadlineSeconds', 'podReplacementPolicy',
  ]);
  return { apiVersion: 'apps/v1', kind, metadata, spec };
}
