import { randomInt } from 'node:crypto';
import type { KindContext } from '../definition.js';
import { ApiError, errors } from '../errors.js';
import { isJsonObject } from '../json.js';
import type { KubeObject } from '../objects.js';
import { dnsSubdomainProblem } from '../validation.js';

/**
 * What Kubernetes' ServiceAccount admission plug-in does to a pod being created (by any caller,
 * the in-process controllers included), so stock manifests and in-cluster clients work unchanged:
 *
 * - `spec.serviceAccountName` defaults to `default` (`spec.serviceAccount`, its deprecated alias,
 *   is read when the name is absent and kept in step);
 * - the account must exist, else 403 `error looking up service account <ns>/<name>: …`, as
 *   kube-apiserver words it; the `default` account is looked up a few more times first, since its
 *   controller creates it asynchronously in a namespace just made (kube-apiserver waits the same
 *   way);
 * - unless `automountServiceAccountToken: false` on the pod, or on the account with the pod not
 *   saying `true`, a projected volume `kube-api-access-<5 random characters>` (a bound token, the
 *   `kube-root-ca.crt` ConfigMap's `ca.crt`, the namespace) is mounted read-only at
 *   /var/run/secrets/kubernetes.io/serviceaccount in every container and init container that
 *   mounts nothing there itself;
 * - a pod without imagePullSecrets gets the account's.
 *
 * Mirror pods (annotation `kubernetes.io/config.mirror`) are left alone. Create only: a pod whose
 * volumes or mounts change later is not touched again.
 */

type Json = Record<string, unknown>;

export const DEFAULT_SERVICE_ACCOUNT_NAME = 'default';
export const SERVICE_ACCOUNT_MOUNT_PATH = '/var/run/secrets/kubernetes.io/serviceaccount';
/** The ConfigMap the root-CA publisher keeps in every namespace (src/controllers/root-ca-publisher.ts). */
export const ROOT_CA_CONFIG_MAP = 'kube-root-ca.crt';
export const ROOT_CA_KEY = 'ca.crt';
/** The prefix of the volume's name; an existing volume with it is reused (a manifest exported from a pod). */
export const API_ACCESS_VOLUME_PREFIX = 'kube-api-access-';
/** kubelet's token lifetime: the API server then issues its extended token (see token-request.ts). */
export const API_ACCESS_TOKEN_SECONDS = 3607;
const MIRROR_POD_ANNOTATION = 'kubernetes.io/config.mirror';
/** The characters of generated names in Kubernetes (no vowels, no look-alikes). */
const NAME_ALPHABET = 'bcdfghjklmnpqrstvwxz2456789';
/** How often the `default` account is looked up before the pod is refused, and the pause between. */
const DEFAULT_ACCOUNT_ATTEMPTS = 10;
const RETRY_MIN_MS = 100;
const RETRY_SPREAD_MS = 100;

const isObject = (value: unknown): value is Json => isJsonObject(value);
const list = (value: unknown): Json[] => (Array.isArray(value) ? value.filter(isObject) : []);

function randomSuffix(length: number): string {
  let out = '';
  for (let i = 0; i < length; i++) out += NAME_ALPHABET[randomInt(NAME_ALPHABET.length)];
  return out;
}

/** The projected volume Kubernetes calls kube-api-access: token, cluster CA, namespace. */
export function apiAccessVolume(name: string): Json {
  return {
    name,
    projected: {
      defaultMode: 0o644,
      sources: [
        { serviceAccountToken: { expirationSeconds: API_ACCESS_TOKEN_SECONDS, path: 'token' } },
        { configMap: { name: ROOT_CA_CONFIG_MAP, items: [{ key: ROOT_CA_KEY, path: 'ca.crt' }] } },
        { downwardAPI: { items: [{ path: 'namespace', fieldRef: { apiVersion: 'v1', fieldPath: 'metadata.namespace' } }] } },
      ],
    },
  };
}

const samePath = (a: unknown, b: string): boolean => typeof a === 'string' && a.replace(/\/+$/, '') === b;

/**
 * Mounts the API access volume in every container and init container that mounts nothing at the
 * service account path, and adds the volume if one of them needed it (reusing a
 * `kube-api-access-*` volume the pod already has).
 */
export function mountApiAccess(spec: Json): void {
  const volumes = list(spec.volumes);
  const names = new Set(volumes.map((v) => v.name));
  const existing = volumes.find((v) => typeof v.name === 'string' && v.name.startsWith(API_ACCESS_VOLUME_PREFIX));
  let name = existing?.name as string | undefined;
  while (name === undefined || (!existing && names.has(name))) name = API_ACCESS_VOLUME_PREFIX + randomSuffix(5);
  let needed = false;
  for (const field of ['initContainers', 'containers']) {
    for (const container of list(spec[field])) {
      const mounts = Array.isArray(container.volumeMounts) ? container.volumeMounts : [];
      if (mounts.some((m: unknown) => isObject(m) && samePath(m.mountPath, SERVICE_ACCOUNT_MOUNT_PATH))) continue;
      container.volumeMounts = [...mounts, { name, readOnly: true, mountPath: SERVICE_ACCOUNT_MOUNT_PATH }];
      needed = true;
    }
  }
  if (needed && !existing) spec.volumes = [...(Array.isArray(spec.volumes) ? spec.volumes : []), apiAccessVolume(name)];
}

/** kube's shouldAutomount: the pod's word, else the account's, else yes. */
export function shouldAutomount(account: KubeObject, spec: Json): boolean {
  if (typeof spec.automountServiceAccountToken === 'boolean') return spec.automountServiceAccountToken;
  if (typeof account.automountServiceAccountToken === 'boolean') return account.automountServiceAccountToken;
  return true;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function getOrUndefined(context: KindContext, plural: string, namespace: string | undefined, name: string): Promise<KubeObject | undefined> {
  const def = context.kinds.lookup('', 'v1', plural);
  if (!def) return undefined;
  try {
    return await context.store.get(def, namespace, name);
  } catch (error) {
    if (error instanceof ApiError && error.code === 404) return undefined;
    throw error;
  }
}

/**
 * The account, or why there is none. As kube-apiserver, whose NamespaceLifecycle admission runs
 * first: a missing namespace is its 404, and a namespace being deleted is left to the store's
 * refusal (`unable to create new content…`), not blamed on its accounts (deleted with it).
 */
async function lookUpAccount(context: KindContext, namespace: string, name: string): Promise<KubeObject | 'namespace-terminating' | undefined> {
  const attempts = name === DEFAULT_SERVICE_ACCOUNT_NAME ? DEFAULT_ACCOUNT_ATTEMPTS : 1;
  const pause = RETRY_MIN_MS + randomInt(RETRY_SPREAD_MS);
  for (let i = 0; i < attempts; i++) {
    if (i > 0) await sleep(pause);
    const account = await getOrUndefined(context, 'serviceaccounts', namespace, name);
    if (account) return account;
    if (i === 0) {
      const ns = await getOrUndefined(context, 'namespaces', undefined, namespace);
      if (!ns) throw errors.notFound({ group: '', plural: 'namespaces' }, namespace);
      if (ns.metadata.deletionTimestamp || (ns.status as { phase?: string } | undefined)?.phase === 'Terminating') return 'namespace-terminating';
    }
  }
  return undefined;
}

export async function admitPodServiceAccount(context: KindContext, pod: KubeObject, namespace: string | undefined): Promise<void> {
  if (!isObject(pod.spec) || !namespace) return; // validation refuses a pod without a spec
  if (pod.metadata.annotations?.[MIRROR_POD_ANNOTATION] !== undefined) return;
  const spec = pod.spec;
  const podName = pod.metadata.name ?? pod.metadata.generateName ?? '';
  const given = spec.serviceAccountName ?? spec.serviceAccount;
  const name = given === undefined || given === null || given === '' ? DEFAULT_SERVICE_ACCOUNT_NAME : given;
  const problem = typeof name === 'string' ? dnsSubdomainProblem(name) : 'must be a string';
  if (problem) {
    throw errors.invalid('Pod', podName, '', [
      { reason: 'FieldValueInvalid', message: `Invalid value: ${JSON.stringify(name)}: ${problem}`, field: 'spec.serviceAccountName' },
    ]);
  }
  const accountName = name as string;
  spec.serviceAccountName = accountName;
  spec.serviceAccount = accountName;
  const account = await lookUpAccount(context, namespace, accountName);
  if (account === 'namespace-terminating') return;
  if (!account) {
    throw errors.forbidden(
      `pods "${podName}" is forbidden: error looking up service account ${namespace}/${accountName}: serviceaccount "${accountName}" not found`,
      { group: '', plural: 'pods' },
      podName,
    );
  }
  if (shouldAutomount(account, spec)) mountApiAccess(spec);
  const pullSecrets = list(account.imagePullSecrets);
  if ((!Array.isArray(spec.imagePullSecrets) || spec.imagePullSecrets.length === 0) && pullSecrets.length) {
    spec.imagePullSecrets = pullSecrets.map((ref) => ({ name: ref.name }));
  }
}

/**
 * An update that leaves out the account admission wrote at creation keeps it (a PUT of the
 * manifest as first written is not a change of account); the deprecated alias follows the name.
 */
export function keepPodServiceAccount(next: KubeObject, current: KubeObject): void {
  if (!isObject(next.spec) || !isObject(current.spec)) return;
  const spec = next.spec;
  if ((spec.serviceAccountName === undefined || spec.serviceAccountName === '') && current.spec.serviceAccountName !== undefined) {
    spec.serviceAccountName = spec.serviceAccount ?? current.spec.serviceAccountName;
  }
  if (spec.serviceAccountName !== undefined) spec.serviceAccount = spec.serviceAccountName;
}
