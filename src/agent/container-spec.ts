import fs from 'node:fs';
import path from 'node:path';
import type { KubeObject } from '../apiserver/objects.js';
import { bytesOf, cpuMillis } from '../apiserver/quantity.js';
import type { Image } from '../images/store.js';
import type { ContainerResources, ContainerRunSpec, ContainerSecurity, ImageRunConfig, ResolvedImage } from './pods/run-spec.js';
import { containerArgv, containerCwd, containerEnv, parseGroup, parsePasswd, resolveUser } from './pods/runtime/command.js';

/**
 * The agent's side of a runc container, from its Pod: the image as the run spec carries it, and the container's process (Kubernetes' command rules,
 * environment, working directory, user from the image's own /etc/passwd), securityContext and
 * resources. Errors are CommandErrors naming kubelet's waiting reason.
 */

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The image store's view of an image as the run spec carries it. */
export function resolvedImage(image: Image, layerDirs: string[]): ResolvedImage {
  const run = image.config.config ?? {};
  const config: ImageRunConfig = {};
  if (run.Entrypoint) config.entrypoint = [...run.Entrypoint];
  if (run.Cmd) config.cmd = [...run.Cmd];
  if (run.Env) config.env = [...run.Env];
  if (run.WorkingDir) config.workingDir = run.WorkingDir;
  if (run.User) config.user = run.User;
  if (run.StopSignal) config.stopSignal = run.StopSignal;
  return { ref: image.ref, digest: image.manifestDigest, layerDirs, config };
}

/**
 * A file of the image as its merged root file system shows it (topmost layer first), for the
 * user database; undefined when a layer deletes it or none has it. Only regular files are read:
 * a symlink could point anywhere on the host.
 */
export function readImageFile(layerDirs: readonly string[], file: string): string | undefined {
  for (let i = layerDirs.length - 1; i >= 0; i--) {
    const candidate = path.join(layerDirs[i]!, file);
    const stat = fs.lstatSync(candidate, { throwIfNoEntry: false });
    if (!stat) continue;
    if (!stat.isFile()) return undefined;
    return fs.readFileSync(candidate, 'utf8');
  }
  return undefined;
}

/** A pod's hostname as Kubernetes gives it: spec.hostname, else its name, at most 63 characters. */
export function podHostname(pod: KubeObject): string {
  const spec = isObject(pod.spec) ? pod.spec : {};
  const name = typeof spec.hostname === 'string' && spec.hostname ? spec.hostname : String(pod.metadata.name);
  return name.slice(0, 63).replace(/[-.]+$/, '');
}

function numberOr(value: unknown): number | undefined {
  return Number.isInteger(value) && (value as number) >= 0 ? (value as number) : undefined;
}

/** Container fields over pod fields, as Kubernetes merges PodSecurityContext into SecurityContext. */
function security(pod: Json, container: Json): { fields: ContainerSecurity; runAsUser?: number; runAsGroup?: number; supplementalGroups: number[] } {
  const podSc = isObject(pod.securityContext) ? pod.securityContext : {};
  const sc = isObject(container.securityContext) ? container.securityContext : {};
  const fields: ContainerSecurity = {};
  for (const key of ['privileged', 'readOnlyRootFilesystem', 'allowPrivilegeEscalation'] as const) if (typeof sc[key] === 'boolean') fields[key] = sc[key] as boolean;
  const nonRoot = typeof sc.runAsNonRoot === 'boolean' ? sc.runAsNonRoot : podSc.runAsNonRoot;
  if (typeof nonRoot === 'boolean') fields.runAsNonRoot = nonRoot;
  const caps = isObject(sc.capabilities) ? sc.capabilities : undefined;
  if (caps) {
    fields.capabilities = {};
    if (Array.isArray(caps.add)) fields.capabilities.add = caps.add.map(String);
    if (Array.isArray(caps.drop)) fields.capabilities.drop = caps.drop.map(String);
  }
  const seccomp = isObject(sc.seccompProfile) ? sc.seccompProfile : isObject(podSc.seccompProfile) ? podSc.seccompProfile : undefined;
  if (seccomp?.type === 'Unconfined') fields.seccompUnconfined = true;
  const supplementalGroups = [...(Array.isArray(podSc.supplementalGroups) ? podSc.supplementalGroups : []), podSc.fsGroup].flatMap((g) => {
    const id = numberOr(g);
    return id === undefined ? [] : [id];
  });
  const runAsUser = numberOr(sc.runAsUser) ?? numberOr(podSc.runAsUser);
  const runAsGroup = numberOr(sc.runAsGroup) ?? numberOr(podSc.runAsGroup);
  return { fields, ...(runAsUser !== undefined ? { runAsUser } : {}), ...(runAsGroup !== undefined ? { runAsGroup } : {}), supplementalGroups };
}

function resources(container: Json): ContainerResources | undefined {
  const r = isObject(container.resources) ? container.resources : {};
  const requests = isObject(r.requests) ? r.requests : {};
  const limits = isObject(r.limits) ? r.limits : {};
  const result: ContainerResources = {};
  const set = (key: keyof ContainerResources, value: number | undefined): void => {
    if (value !== undefined && value > 0) result[key] = value;
  };
  set('cpuRequestMilli', cpuMillis(requests.cpu));
  set('cpuLimitMilli', cpuMillis(limits.cpu));
  set('memoryRequestBytes', bytesOf(requests.memory));
  set('memoryLimitBytes', bytesOf(limits.memory));
  return Object.keys(result).length ? result : undefined;
}

/**
 * A runc container's run spec from its Pod, its image and its resolved environment (`podEnv`:
 * env, envFrom, downward API). Throws CommandError when Kubernetes' rules leave nothing to run or
 * the user cannot be resolved.
 */
export function runcContainerSpec(pod: KubeObject, container: Json, image: ResolvedImage, podEnv: Record<string, string>): ContainerRunSpec {
  const spec = isObject(pod.spec) ? pod.spec : {};
  const strings = (value: unknown): string[] | undefined => (Array.isArray(value) ? value.map(String) : undefined);
  const argv = containerArgv(image.config, strings(container.command), strings(container.args), podEnv);
  const sc = security(spec, container);
  const passwd = readImageFile(image.layerDirs, 'etc/passwd');
  const group = readImageFile(image.layerDirs, 'etc/group');
  const user = resolveUser({
    ...(image.config.user !== undefined ? { imageUser: image.config.user } : {}),
    ...(sc.runAsUser !== undefined ? { runAsUser: sc.runAsUser } : {}),
    ...(sc.runAsGroup !== undefined ? { runAsGroup: sc.runAsGroup } : {}),
    ...(sc.fields.runAsNonRoot !== undefined ? { runAsNonRoot: sc.fields.runAsNonRoot } : {}),
    supplementalGroups: sc.supplementalGroups,
    ...(passwd !== undefined ? { passwd: parsePasswd(passwd) } : {}),
    ...(group !== undefined ? { group: parseGroup(group) } : {}),
  });
  const limits = resources(container);
  return {
    name: String(container.name),
    command: argv.command,
    args: argv.args,
    env: containerEnv(image.config.env, podHostname(pod), podEnv),
    workingDir: containerCwd(typeof container.workingDir === 'string' ? container.workingDir : undefined, image.config),
    image,
    user,
    ...(Object.keys(sc.fields).length ? { securityContext: sc.fields } : {}),
    ...(limits ? { resources: limits } : {}),
  };
}
