/**
 * core/v1 kinds (k8s.io/api/core/v1/generated.proto): Namespace, and Pod with its PodSpec,
 * Container and PodTemplateSpec (which apps/v1 Deployment embeds).
 */

import { unsupportedField } from './errors.js';
import {
  at,
  type Ctx,
  inOrder,
  type Json,
  listOrUndefined,
  nonEmpty,
  nonZero,
  orUndefined,
  refuseUndecoded,
} from './go-json.js';
import { decodeObjectMeta, decodeStrictObject, decodeStringMap } from './meta.js';
import { bool, bytes, embedded, type Field, int32, int64, parseMessage, str } from './reader.js';

/** core/v1 Namespace {1 metadata, 2 spec {1 finalizers}, 3 status {1 phase, 2 conditions}}. */
export function decodeNamespace(raw: Uint8Array): Record<string, unknown> {
  const kind = 'Namespace';
  const { fields, metadata } = decodeStrictObject(raw, kind);

  const spec: Record<string, unknown> = {};
  const specBytes = embedded(fields, 2, kind);
  if (specBytes) {
    const finalizers: string[] = [];
    for (const f of parseMessage(specBytes, 'NamespaceSpec')) {
      if (f.field === 1) finalizers.push(str(f, 'NamespaceSpec'));
      else throw unsupportedField(kind, 'NamespaceSpec', f.field);
    }
    if (finalizers.length) spec.finalizers = finalizers;
  }

  const status: Record<string, unknown> = {};
  const statusBytes = embedded(fields, 3, kind);
  if (statusBytes) {
    for (const f of parseMessage(statusBytes, 'NamespaceStatus')) {
      if (f.field === 1) {
        const phase = str(f, 'NamespaceStatus');
        if (phase) status.phase = phase;
        else delete status.phase;
      } else {
        // 2 conditions: server-owned and never sent by kubectl; refused rather than guessed at.
        throw unsupportedField(kind, 'NamespaceStatus', f.field);
      }
    }
  }

  return {
    apiVersion: 'v1',
    kind,
    metadata,
    spec,
    ...(Object.keys(status).length ? { status } : {}),
  };
}


/** resource.Quantity {1 string}: its canonical string, kept as sent. */
function decodeQuantity(f: Field, message: string): string {
  let value = '';
  for (const q of parseMessage(bytes(f, message), 'Quantity')) if (q.field === 1) value = str(q, 'Quantity');
  return value;
}

/** core/v1 ResourceRequirements {1 limits, 2 requests, 3 claims (refused)}; JSON `{}` when empty. */
function decodeResources(buf: Uint8Array, ctx: Ctx): Json {
  const m = 'ResourceRequirements';
  const limits: Field[] = [];
  const requests: Field[] = [];
  for (const f of parseMessage(buf, m)) {
    if (f.field === 1) limits.push(f);
    else if (f.field === 2) requests.push(f);
    else refuseUndecoded(f, { 3: 'claims' }, ctx);
  }
  const out: Json = {};
  if (limits.length) out.limits = decodeStringMap(limits, 'ResourceRequirements.limits', decodeQuantity);
  if (requests.length) out.requests = decodeStringMap(requests, 'ResourceRequirements.requests', decodeQuantity);
  return out;
}

/** core/v1 ContainerPort {1 name, 2 hostPort, 3 containerPort, 4 protocol, 5 hostIP}. */
function decodeContainerPort(buf: Uint8Array): Json {
  const m = 'ContainerPort';
  let name = '';
  let hostPort = 0;
  let containerPort = 0;
  let protocol = '';
  let hostIP = '';
  for (const f of parseMessage(buf, m)) {
    switch (f.field) {
      case 1: name = str(f, m); break;
      case 2: hostPort = int32(f, m); break;
      case 3: containerPort = int32(f, m); break;
      case 4: protocol = str(f, m); break;
      case 5: hostIP = str(f, m); break;
      default: break;
    }
  }
  // containerPort has no omitempty in Go: it is always in the JSON.
  return inOrder(
    { name: nonEmpty(name), hostPort: nonZero(hostPort), containerPort, protocol: nonEmpty(protocol), hostIP: nonEmpty(hostIP) },
    ['name', 'hostPort', 'containerPort', 'protocol', 'hostIP'],
  );
}

/** ConfigMapKeySelector and SecretKeySelector {1 LocalObjectReference {1 name}, 2 key, 3 optional *bool}. */
function decodeKeySelector(buf: Uint8Array, message: string): Json {
  let name = '';
  let key = '';
  let optional: boolean | undefined;
  for (const f of parseMessage(buf, message)) {
    if (f.field === 1) name = decodeLocalObjectReference(bytes(f, message));
    else if (f.field === 2) key = str(f, message);
    else if (f.field === 3) optional = bool(f, message);
  }
  return inOrder({ name: nonEmpty(name), key, optional }, ['name', 'key', 'optional']);
}

/** core/v1 LocalObjectReference {1 name}. */
function decodeLocalObjectReference(buf: Uint8Array): string {
  let name = '';
  for (const f of parseMessage(buf, 'LocalObjectReference')) if (f.field === 1) name = str(f, 'LocalObjectReference');
  return name;
}

/**
 * core/v1 EnvVarSource {1 fieldRef ObjectFieldSelector {1 apiVersion, 2 fieldPath},
 * 2 resourceFieldRef (refused), 3 configMapKeyRef, 4 secretKeyRef, 5 fileKeyRef (refused)}.
 */
function decodeEnvVarSource(buf: Uint8Array, ctx: Ctx): Json {
  const m = 'EnvVarSource';
  const fields = parseMessage(buf, m);
  const out: Json = {};
  for (const f of fields) refuseUndecoded(f, { 2: 'resourceFieldRef', 5: 'fileKeyRef' }, ctx);
  const fieldRef = embedded(fields, 1, m);
  if (fieldRef) {
    let apiVersion = '';
    let fieldPath = '';
    for (const f of parseMessage(fieldRef, 'ObjectFieldSelector')) {
      if (f.field === 1) apiVersion = str(f, 'ObjectFieldSelector');
      else if (f.field === 2) fieldPath = str(f, 'ObjectFieldSelector');
    }
    out.fieldRef = inOrder({ apiVersion: nonEmpty(apiVersion), fieldPath }, ['apiVersion', 'fieldPath']);
  }
  const configMapKeyRef = embedded(fields, 3, m);
  if (configMapKeyRef) out.configMapKeyRef = decodeKeySelector(configMapKeyRef, 'ConfigMapKeySelector');
  const secretKeyRef = embedded(fields, 4, m);
  if (secretKeyRef) out.secretKeyRef = decodeKeySelector(secretKeyRef, 'SecretKeySelector');
  return out;
}

/** core/v1 EnvVar {1 name, 2 value, 3 valueFrom}. */
function decodeEnvVar(buf: Uint8Array, ctx: Ctx): Json {
  const m = 'EnvVar';
  const fields = parseMessage(buf, m);
  let name = '';
  let value = '';
  for (const f of fields) {
    if (f.field === 1) name = str(f, m);
    else if (f.field === 2) value = str(f, m);
  }
  const source = embedded(fields, 3, m);
  const valueFrom = source ? decodeEnvVarSource(source, at(ctx, 'valueFrom')) : undefined;
  return inOrder({ name, value: nonEmpty(value), valueFrom }, ['name', 'value', 'valueFrom']);
}

/** Container fields the proto defines that Drover does not decode, by number. */
const CONTAINER_UNDECODED: Readonly<Record<number, string>> = {
  9: 'volumeMounts',
  10: 'livenessProbe',
  11: 'readinessProbe',
  12: 'lifecycle',
  15: 'securityContext',
  19: 'envFrom',
  21: 'volumeDevices',
  22: 'startupProbe',
  23: 'resizePolicy',
  25: 'restartPolicyRules',
};

const CONTAINER_ORDER = [
  'name', 'image', 'command', 'args', 'workingDir', 'ports', 'env', 'resources', 'restartPolicy',
  'terminationMessagePath', 'terminationMessagePolicy', 'imagePullPolicy', 'stdin', 'stdinOnce', 'tty',
] as const;

/**
 * core/v1 Container {1 name, 2 image, 3 command, 4 args, 5 workingDir, 6 ports, 7 env,
 * 8 resources, 13 terminationMessagePath, 14 imagePullPolicy, 16 stdin, 17 stdinOnce, 18 tty,
 * 20 terminationMessagePolicy, 24 restartPolicy}.
 */
function decodeContainer(buf: Uint8Array, ctx: Ctx): Json {
  const m = 'Container';
  const fields = parseMessage(buf, m);
  const v: Json = {};
  let name = '';
  const command: string[] = [];
  const args: string[] = [];
  const ports: Json[] = [];
  const env: Json[] = [];
  for (const f of fields) {
    switch (f.field) {
      case 1: name = str(f, m); break;
      case 2: v.image = nonEmpty(str(f, m)); break;
      case 3: command.push(str(f, m)); break;
      case 4: args.push(str(f, m)); break;
      case 5: v.workingDir = nonEmpty(str(f, m)); break;
      case 6: ports.push(decodeContainerPort(bytes(f, m))); break;
      case 7: env.push(decodeEnvVar(bytes(f, m), at(ctx, `env[${env.length}]`))); break;
      case 8: break; // resources: merged below
      case 13: v.terminationMessagePath = nonEmpty(str(f, m)); break;
      case 14: v.imagePullPolicy = nonEmpty(str(f, m)); break;
      case 16: v.stdin = orUndefined(bool(f, m)); break;
      case 17: v.stdinOnce = orUndefined(bool(f, m)); break;
      case 18: v.tty = orUndefined(bool(f, m)); break;
      case 20: v.terminationMessagePolicy = nonEmpty(str(f, m)); break;
      case 24: v.restartPolicy = str(f, m); break; // *string: kept when present
      default: refuseUndecoded(f, CONTAINER_UNDECODED, ctx);
    }
  }
  const resources = embedded(fields, 8, m);
  // name has no omitempty and resources is a struct: Go's JSON always carries both.
  return inOrder(
    {
      ...v,
      name,
      command: listOrUndefined(command),
      args: listOrUndefined(args),
      ports: listOrUndefined(ports),
      env: listOrUndefined(env),
      resources: resources ? decodeResources(resources, at(ctx, 'resources')) : {},
    },
    CONTAINER_ORDER,
  );
}

/** core/v1 Toleration {1 key, 2 operator, 3 value, 4 effect, 5 tolerationSeconds *int64}. */
function decodeToleration(buf: Uint8Array): Json {
  const m = 'Toleration';
  const v: Json = {};
  for (const f of parseMessage(buf, m)) {
    switch (f.field) {
      case 1: v.key = nonEmpty(str(f, m)); break;
      case 2: v.operator = nonEmpty(str(f, m)); break;
      case 3: v.value = nonEmpty(str(f, m)); break;
      case 4: v.effect = nonEmpty(str(f, m)); break;
      case 5: v.tolerationSeconds = int64(f, m); break;
      default: break;
    }
  }
  return inOrder(v, ['key', 'operator', 'value', 'effect', 'tolerationSeconds']);
}

/** PodSpec fields the proto defines that Drover does not decode, by number. */
const POD_SPEC_UNDECODED: Readonly<Record<number, string>> = {
  1: 'volumes',
  14: 'securityContext',
  18: 'affinity',
  23: 'hostAliases',
  26: 'dnsConfig',
  28: 'readinessGates',
  32: 'overhead',
  33: 'topologySpreadConstraints',
  34: 'ephemeralContainers',
  36: 'os',
  38: 'schedulingGates',
  39: 'resourceClaims',
  40: 'resources',
  42: 'workloadRef',
};

const POD_SPEC_ORDER = [
  'initContainers', 'containers', 'restartPolicy', 'terminationGracePeriodSeconds', 'activeDeadlineSeconds',
  'dnsPolicy', 'nodeSelector', 'serviceAccountName', 'serviceAccount', 'automountServiceAccountToken',
  'nodeName', 'hostNetwork', 'hostPID', 'hostIPC', 'shareProcessNamespace', 'imagePullSecrets', 'hostname',
  'subdomain', 'schedulerName', 'tolerations', 'priorityClassName', 'priority', 'runtimeClassName',
  'enableServiceLinks', 'preemptionPolicy', 'setHostnameAsFQDN', 'hostUsers', 'hostnameOverride',
] as const;

/**
 * core/v1 PodSpec. Decoded: 2 containers, 3 restartPolicy, 4 terminationGracePeriodSeconds,
 * 5 activeDeadlineSeconds, 6 dnsPolicy, 7 nodeSelector, 8 serviceAccountName, 9 serviceAccount,
 * 10 nodeName, 11 hostNetwork, 12 hostPID, 13 hostIPC, 15 imagePullSecrets, 16 hostname,
 * 17 subdomain, 19 schedulerName, 20 initContainers, 21 automountServiceAccountToken,
 * 22 tolerations, 24 priorityClassName, 25 priority, 27 shareProcessNamespace, 29 runtimeClassName,
 * 30 enableServiceLinks, 31 preemptionPolicy, 35 setHostnameAsFQDN, 37 hostUsers, 41 hostnameOverride.
 */
function decodePodSpec(buf: Uint8Array | undefined, ctx: Ctx): Json {
  const m = 'PodSpec';
  const v: Json = {};
  const containers: Json[] = [];
  const initContainers: Json[] = [];
  const nodeSelector: Field[] = [];
  const imagePullSecrets: Json[] = [];
  const tolerations: Json[] = [];
  for (const f of buf ? parseMessage(buf, m) : []) {
    switch (f.field) {
      case 2: containers.push(decodeContainer(bytes(f, m), at(ctx, `containers[${containers.length}]`))); break;
      case 20: initContainers.push(decodeContainer(bytes(f, m), at(ctx, `initContainers[${initContainers.length}]`))); break;
      case 3: v.restartPolicy = nonEmpty(str(f, m)); break;
      case 4: v.terminationGracePeriodSeconds = int64(f, m); break;
      case 5: v.activeDeadlineSeconds = int64(f, m); break;
      case 6: v.dnsPolicy = nonEmpty(str(f, m)); break;
      case 7: nodeSelector.push(f); break;
      case 8: v.serviceAccountName = nonEmpty(str(f, m)); break;
      case 9: v.serviceAccount = nonEmpty(str(f, m)); break;
      case 10: v.nodeName = nonEmpty(str(f, m)); break;
      case 11: v.hostNetwork = orUndefined(bool(f, m)); break;
      case 12: v.hostPID = orUndefined(bool(f, m)); break;
      case 13: v.hostIPC = orUndefined(bool(f, m)); break;
      case 15: {
        const name = decodeLocalObjectReference(bytes(f, m));
        imagePullSecrets.push(name ? { name } : {});
        break;
      }
      case 16: v.hostname = nonEmpty(str(f, m)); break;
      case 17: v.subdomain = nonEmpty(str(f, m)); break;
      case 19: v.schedulerName = nonEmpty(str(f, m)); break;
      case 21: v.automountServiceAccountToken = bool(f, m); break;
      case 22: tolerations.push(decodeToleration(bytes(f, m))); break;
      case 24: v.priorityClassName = nonEmpty(str(f, m)); break;
      case 25: v.priority = int32(f, m); break;
      case 27: v.shareProcessNamespace = bool(f, m); break;
      case 29: v.runtimeClassName = str(f, m); break;
      case 30: v.enableServiceLinks = bool(f, m); break;
      case 31: v.preemptionPolicy = str(f, m); break;
      case 35: v.setHostnameAsFQDN = bool(f, m); break;
      case 37: v.hostUsers = bool(f, m); break;
      case 41: v.hostnameOverride = str(f, m); break;
      default: refuseUndecoded(f, POD_SPEC_UNDECODED, ctx);
    }
  }
  if (nodeSelector.length) {
    const map = decodeStringMap(nodeSelector, 'PodSpec.nodeSelector');
    if (Object.keys(map).length) v.nodeSelector = map;
  }
  // containers has no omitempty (Go writes null for none); [] keeps the type, and validation
  // refuses it either way.
  return inOrder(
    {
      ...v,
      initContainers: listOrUndefined(initContainers),
      containers,
      imagePullSecrets: listOrUndefined(imagePullSecrets),
      tolerations: listOrUndefined(tolerations),
    },
    POD_SPEC_ORDER,
  );
}

/** core/v1 PodTemplateSpec {1 metadata, 2 spec}: both always in Go's JSON. */
export function decodePodTemplateSpec(buf: Uint8Array | undefined, ctx: Ctx): Json {
  const m = 'PodTemplateSpec';
  const fields = buf ? parseMessage(buf, m) : [];
  return {
    metadata: decodeObjectMeta(embedded(fields, 1, m)),
    spec: decodePodSpec(embedded(fields, 2, m), at(ctx, 'spec')),
  };
}

/** core/v1 Pod {1 metadata, 2 spec, 3 status (ignored: the agent's)}. */
export function decodePod(raw: Uint8Array): Json {
  const kind = 'Pod';
  const fields = parseMessage(raw, kind);
  return {
    apiVersion: 'v1',
    kind,
    metadata: decodeObjectMeta(embedded(fields, 1, kind)),
    spec: decodePodSpec(embedded(fields, 2, kind), { kind, path: 'spec' }),
  };
}
