import type { Toleration } from './taints.js';

/**
 * Runtime classes as the API server, the scheduler and the agents all read them: the built-in
 * classes, the runtime handlers a Drover agent can have, which class a pod runs under, and what
 * that means for a node (pure; this module imports no layer).
 *
 * A pod's class is `spec.runtimeClassName`. The API server writes the cluster's
 * `default-runtime-class` there when a pod is created without one (src/apiserver/kinds/
 * runtime-classes.ts), so a pod's class is fixed at creation and the scheduler and its agent
 * agree on it without knowing the setting. A pod stored by a version that had no runtime classes
 * has none: it ran as processes, the only runtime there was, and still does (LEGACY_RUNTIME_CLASS).
 */

export const RUNTIME_CLASS_GROUP = 'node.k8s.io';
export const RUNTIME_CLASS_API_VERSION = 'node.k8s.io/v1';

/** The runtime handlers a Drover agent may report: containers under runc, or local processes. */
export type RuntimeHandlerName = 'runc' | 'process';
export const RUNC_HANDLER: RuntimeHandlerName = 'runc';
export const PROCESS_HANDLER: RuntimeHandlerName = 'process';
export const RUNTIME_HANDLER_NAMES: readonly RuntimeHandlerName[] = [RUNC_HANDLER, PROCESS_HANDLER];

/** The class a pod without `runtimeClassName` runs under when nothing wrote one: see above. */
export const LEGACY_RUNTIME_CLASS = 'process';

/** The built-in classes, each named for its handler; created at every server start, never deleted. */
export const BUILT_IN_RUNTIME_CLASSES: readonly RuntimeHandlerName[] = [RUNC_HANDLER, PROCESS_HANDLER];

/** The parts of a node.k8s.io/v1 RuntimeClass these rules read. */
export interface RuntimeClassView {
  metadata: { name?: string };
  handler?: unknown;
  overhead?: { podFixed?: Record<string, unknown> } | null;
  scheduling?: { nodeSelector?: Record<string, string> | null; tolerations?: Toleration[] | null } | null;
}

/** A node.k8s.io/v1 NodeRuntimeHandler as nodes report it in `status.runtimeHandlers` (Kubernetes 1.30). */
export interface NodeRuntimeHandler {
  name: string;
  features?: { recursiveReadOnlyMounts?: boolean; userNamespaces?: boolean };
}

interface PodView {
  metadata?: unknown;
  spec?: unknown;
}

interface NodeView {
  metadata?: unknown;
  status?: unknown;
}

/** The built-in RuntimeClass of this name, as the server creates it; undefined for other names. */
export function builtInRuntimeClass(name: string): { apiVersion: string; kind: string; metadata: { name: string }; handler: string } | undefined {
  if (!(BUILT_IN_RUNTIME_CLASSES as readonly string[]).includes(name)) return undefined;
  return { apiVersion: RUNTIME_CLASS_API_VERSION, kind: 'RuntimeClass', metadata: { name }, handler: name };
}

/** The name of the class a pod runs under: its `spec.runtimeClassName`, else LEGACY_RUNTIME_CLASS. */
export function podRuntimeClassName(pod: PodView): string {
  const name = (pod.spec as { runtimeClassName?: unknown } | undefined)?.runtimeClassName;
  return typeof name === 'string' && name ? name : LEGACY_RUNTIME_CLASS;
}

/**
 * The runtime class a name means: the stored object when there is one, else the built-in of that
 * name (built-ins cannot be deleted, so an unstored one is only one the server has not created yet).
 */
export function effectiveRuntimeClass(name: string, stored: RuntimeClassView | undefined): RuntimeClassView | undefined {
  return stored ?? builtInRuntimeClass(name);
}

/** The handlers a node reports; a node that reports none (an agent older than runtime classes) runs processes only. */
export function nodeRuntimeHandlerNames(node: NodeView): string[] {
  const handlers = (node.status as { runtimeHandlers?: unknown } | undefined)?.runtimeHandlers;
  if (!Array.isArray(handlers)) return [PROCESS_HANDLER];
  return handlers.map((h) => (h as { name?: unknown } | null)?.name).filter((n): n is string => typeof n === 'string');
}

export type PodRuntime =
  | { ok: true; className: string; handler: RuntimeHandlerName }
  | { ok: false; className: string; reason: 'RuntimeClassNotFound' | 'RuntimeHandlerNotSupported'; message: string };

/**
 * What a pod runs under on this node: the handler of its class, if this node has it.
 * `storedClass` is the RuntimeClass named by podRuntimeClassName(pod) as read from the API (or
 * undefined when there is none); `nodeHandlers` what this node reports it can run. The agent calls
 * this before it writes a pod's run spec; a refusal's message says why, in words for an event.
 */
export function resolvePodRuntime(pod: PodView, storedClass: RuntimeClassView | undefined, nodeHandlers: readonly string[]): PodRuntime {
  const className = podRuntimeClassName(pod);
  const runtimeClass = effectiveRuntimeClass(className, storedClass);
  if (!runtimeClass) {
    return { ok: false, className, reason: 'RuntimeClassNotFound', message: `RuntimeClass "${className}" not found` };
  }
  const handler = typeof runtimeClass.handler === 'string' ? runtimeClass.handler : '';
  if (!(RUNTIME_HANDLER_NAMES as readonly string[]).includes(handler) || !nodeHandlers.includes(handler)) {
    return {
      ok: false,
      className,
      reason: 'RuntimeHandlerNotSupported',
      message: `RuntimeClass "${className}" needs the runtime handler "${handler}", which this node does not have (it has: ${nodeHandlers.join(', ') || 'none'})`,
    };
  }
  return { ok: true, className, handler: handler as RuntimeHandlerName };
}

/** Why a text cannot name a RuntimeClass (an RFC 1123 subdomain), or undefined when it can. */
export function runtimeClassNameProblem(name: string): string | undefined {
  if (!name) return 'must not be empty';
  if (name.length > 253) return 'must be no more than 253 characters';
  if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/.test(name)) {
    return 'must be a lowercase RFC 1123 subdomain (lower case alphanumeric characters, - or ., starting and ending with an alphanumeric character)';
  }
  return undefined;
}
