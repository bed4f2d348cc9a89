import os from 'node:os';
import path from 'node:path';
import { DEFAULT_FENCING_TIMEOUT_MS, DEFAULT_NODE_LEASE_RENEW_INTERVAL_MS, DEFAULT_NODE_MONITOR_GRACE_PERIOD_MS } from '../node-protocol/fencing.js';
import type { Taint } from '../node-protocol/taints.js';

/**
 * Every setting of `drover server` and `drover agent`, in one table. Flags, environment
 * variables, config-file keys, `drover config show` and docs/configuration.md are all generated
 * from it, so they cannot disagree.
 *
 * Scope says where a value may come from:
 * - `cluster`: must be identical on every server, and is checked against the cluster's record at
 *   every server start. These are the settings whose effect depends on which server leads (the
 *   controllers run on one leader at a time): if they differed, behaviour would change whenever
 *   leadership moved. Agents never set them; they receive them from the server.
 * - `node`: taken only from this node's own local config; may differ per node, and is never taken
 *   from another server.
 */

export type Command = 'server' | 'agent';
export type Scope = 'cluster' | 'node';
export type SettingType = 'string' | 'bool' | 'port' | 'count' | 'percent' | 'duration' | 'enum' | 'list' | 'labels' | 'taints';

export interface Setting {
  name: string;
  type: SettingType;
  help: string;
  commands: readonly Command[];
  scope: Scope;
  /** The typed default, or a function for defaults that depend on the machine. */
  default?: unknown | (() => unknown);
  secret?: boolean;
  choices?: readonly string[];
  /** Why a cluster-scoped setting is cluster-scoped (docs). */
  why?: string;
  /** Shown as the default in help and docs when the default is computed. */
  defaultText?: string;
}

export const LOG_LEVEL_CHOICES = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
/** K3s's names for the pod network between nodes (`none` = no pod network at all). */
export const FLANNEL_BACKENDS = ['vxlan', 'host-gw', 'none'] as const;
export type FlannelBackend = (typeof FLANNEL_BACKENDS)[number];
export const ROLE_CHOICES = ['all', 'etcd', 'control-plane'] as const;

function defaultDataDir(): string {
  return process.getuid?.() === 0 ? '/var/lib/drover' : path.join(os.homedir(), '.drover');
}

/**
 * The table itself, `as const` so that each setting's name, type, commands and choices are known
 * to the type checker: the typed settings objects below are derived from it.
 */
const TABLE = [
  // --- cluster-scoped -------------------------------------------------------------------------
  {
    name: 'cluster-name',
    type: 'string',
    help: 'name of the cluster (the cluster and context name in kubeconfigs)',
    commands: ['server'],
    scope: 'cluster',
    default: 'drover',
    why: 'names the cluster in every kubeconfig the servers write; two servers disagreeing would hand out kubeconfigs for two differently named clusters',
  },
  {
    name: 'node-lease-renew-interval',
    type: 'duration',
    help: 'how often agents renew their node lease',
    commands: ['server'],
    scope: 'cluster',
    default: DEFAULT_NODE_LEASE_RENEW_INTERVAL_MS,
    why: 'agents learn it from whichever server they join; the leader judges silence against it',
  },
  {
    name: 'node-monitor-grace-period',
    type: 'duration',
    help: 'silence after which a node is declared lost (at least 3 renew intervals)',
    commands: ['server'],
    scope: 'cluster',
    default: DEFAULT_NODE_MONITOR_GRACE_PERIOD_MS,
    why: 'the controller leader uses it to mark nodes Unavailable, and every server derives the controller lease from it (duration 3/4 of it, step-down at half of it); a different value on another server would change verdicts when leadership moves, and let two servers disagree on when the lease has expired',
  },
  {
    name: 'fencing-timeout',
    type: 'duration',
    help: 'silence after which a node stops its singleton pods on its own (shorter than node-monitor-grace-period)',
    commands: ['server'],
    scope: 'cluster',
    default: DEFAULT_FENCING_TIMEOUT_MS,
    why: 'agents fence singletons after it and the controller leader replaces them only after it plus a margin; servers disagreeing would let a replacement start before the original is fenced',
  },
  {
    name: 'default-unavailable-toleration',
    type: 'duration',
    help: 'how long pods without their own toleration stay on an Unavailable node before they are replaced (Kubernetes: 300s)',
    commands: ['server'],
    scope: 'cluster',
    default: 0,
    why: 'the controller leader evicts pods from lost nodes after it; a different value on another server would change failover when leadership moves',
  },
  {
    name: 'secrets-encryption',
    type: 'bool',
    help: 'store Secrets encrypted (AES-256-GCM) in the datastore; turning it on later encrypts the Secrets already stored, turning it off decrypts them (docs/security.md#encryption-at-rest)',
    commands: ['server'],
    scope: 'cluster',
    default: false,
    why: 'every server reads and writes the same Secrets: one writing plaintext while the others encrypt would leave Secrets unprotected at rest behind the cluster’s back',
  },
  {
    name: 'service-account-issuer',
    type: 'string',
    help: 'issuer (iss) of ServiceAccount tokens, an https URL; changing it invalidates every token issued before (docs/security.md#serviceaccount-tokens)',
    commands: ['server'],
    scope: 'cluster',
    default: 'https://kubernetes.default.svc.cluster.local',
    why: 'a token issued by one server must verify on every other, which accepts only its own issuer',
  },
  {
    name: 'default-runtime-class',
    type: 'string',
    help: 'RuntimeClass of pods created without spec.runtimeClassName (written into the pod at creation): runc (containers) or process (local processes), or a class of your own (docs/workloads.md#scheduling-and-runtime-classes)',
    commands: ['server'],
    scope: 'cluster',
    default: 'runc',
    why: 'every server writes it into the pods it admits; servers disagreeing would run the same manifest under different runtimes depending on which server took the request',
  },
  {
    name: 'cluster-cidr',
    type: 'string',
    help: 'IPv4 network pod addresses come from (docs/networking.md)',
    commands: ['server'],
    scope: 'cluster',
    default: '10.42.0.0/16',
    why: 'every node’s pods take addresses from it; servers disagreeing would hand out overlapping or unreachable pod networks',
  },
  {
    name: 'service-cidr',
    type: 'string',
    help: 'IPv4 network Service ClusterIPs are allocated from; its first address is the kubernetes Service’s (docs/networking.md#services)',
    commands: ['server'],
    scope: 'cluster',
    default: '10.43.0.0/16',
    why: 'every server allocates ClusterIPs from it; servers disagreeing would allocate from two ranges and refuse each other’s addresses',
  },
  {
    name: 'service-node-port-range',
    type: 'string',
    help: 'ports NodePort Services are allocated from, first-last (docs/networking.md#services)',
    commands: ['server'],
    scope: 'cluster',
    default: '30000-32767',
    why: 'every server allocates and checks node ports against it; servers disagreeing would accept a port on one server that another refuses',
  },
  {
    name: 'cluster-dns',
    type: 'string',
    help: 'the cluster DNS Service’s address, inside service-cidr (docs/networking.md)',
    commands: ['server'],
    scope: 'cluster',
    default: '10.43.0.10',
    why: 'every pod’s resolv.conf names it; servers disagreeing would point pods at two different resolvers',
  },
  {
    name: 'cluster-domain',
    type: 'string',
    help: 'the cluster’s DNS domain (<service>.<namespace>.svc.<cluster-domain>)',
    commands: ['server'],
    scope: 'cluster',
    default: 'cluster.local',
    why: 'Service names are answered under it and pods search it; servers disagreeing would give the same Service two names',
  },
  {
    name: 'flannel-backend',
    type: 'enum',
    help: 'the pod network between nodes: vxlan (an overlay, any network), host-gw (routes, nodes on one L2 segment), or none (no pod network: pods share their node’s network, and nodes run no Service datapath and no cluster DNS) (docs/networking.md)',
    commands: ['server'],
    scope: 'cluster',
    default: 'vxlan',
    choices: FLANNEL_BACKENDS,
    why: 'every node wires its pods and its routes to the other nodes by it; nodes disagreeing cannot reach each other’s pods',
  },
  // --- node-scoped, server -----------------------------------------------------------------------
  {
    name: 'https-listen-port',
    type: 'port',
    help: 'HTTPS port of the API server and of Drover’s own /drover/v1 endpoints (0 picks a free port)',
    commands: ['server'],
    scope: 'node',
    default: 6443,
  },
  {
    name: 'bind-address',
    type: 'string',
    help: 'address the API server listens on',
    commands: ['server'],
    scope: 'node',
    default: '0.0.0.0',
  },
  {
    name: 'tls-san',
    type: 'list',
    help: 'extra host name or IP for the serving certificate (repeatable)',
    commands: ['server'],
    scope: 'node',
    default: [],
  },
  {
    name: 'watch-bookmark-interval',
    type: 'duration',
    help: 'how often a watch that allows bookmarks (allowWatchBookmarks) gets a BOOKMARK with the latest resourceVersion, when it moved (kube-apiserver: about 1m; at least 100ms)',
    commands: ['server'],
    scope: 'node',
    default: 15_000,
  },
  {
    name: 'write-kubeconfig',
    type: 'string',
    help: 'also write the admin kubeconfig to this path (mode 0600)',
    commands: ['server'],
    scope: 'node',
  },
  {
    name: 'disable-agent',
    type: 'bool',
    help: 'do not run an agent for this server’s own node',
    commands: ['server'],
    scope: 'node',
    default: false,
  },
  {
    name: 'https-header-timeout',
    type: 'duration',
    help: 'time a client has to finish its TLS handshake, then each request’s headers (kube-apiserver: 32s)',
    commands: ['server'],
    scope: 'node',
    default: 32_000,
  },
  {
    name: 'https-request-timeout',
    type: 'duration',
    help: 'time a client has to send a whole request, body included (watches are not cut by it)',
    commands: ['server'],
    scope: 'node',
    default: 60_000,
  },
  {
    name: 'https-idle-timeout',
    type: 'duration',
    help: 'time an idle keep-alive connection stays open between requests (kube-apiserver: 90s)',
    commands: ['server'],
    scope: 'node',
    default: 90_000,
  },
  {
    name: 'max-watches-per-user',
    type: 'count',
    help: 'watches and followed logs one user may hold open on this server at once; more are refused with 429',
    commands: ['server'],
    scope: 'node',
    default: 100,
  },
  {
    name: 'max-watches',
    type: 'count',
    help: 'watches and followed logs this server holds open at once, all users together; more are refused with 429',
    commands: ['server'],
    scope: 'node',
    default: 1000,
  },
  {
    name: 'max-requests-inflight',
    type: 'count',
    help: 'API requests this server works on at once, split between priority levels (node heartbeats, leader election, controllers, writes, reads); more wait in fair queues, and are refused with 429 when those are full (watches and the admin are not counted; docs/flow-control.md)',
    commands: ['server'],
    scope: 'node',
    default: 200,
  },
  // --- node-scoped, agent ------------------------------------------------------------------------
  {
    name: 'server',
    type: 'string',
    help: 'URL of a Drover server to join, e.g. https://10.0.0.1:6443 (a server joins its managed etcd)',
    commands: ['server', 'agent'],
    scope: 'node',
  },
  {
    name: 'role',
    type: 'enum',
    help: 'what this server runs: all (etcd member when managed, API server, controllers), etcd (an etcd member and its agent only), control-plane (API server and controllers, no etcd member)',
    commands: ['server'],
    scope: 'node',
    default: 'all',
    choices: ROLE_CHOICES,
  },
  {
    name: 'cluster-init',
    type: 'bool',
    help: 'start a new cluster on a managed etcd member (instead of the embedded SQLite datastore)',
    commands: ['server'],
    scope: 'node',
    default: false,
  },
  {
    name: 'etcd-client-port',
    type: 'port',
    help: 'client port of the managed etcd member',
    commands: ['server'],
    scope: 'node',
    default: 2379,
  },
  {
    name: 'etcd-peer-port',
    type: 'port',
    help: 'peer port of the managed etcd member',
    commands: ['server'],
    scope: 'node',
    default: 2380,
  },
  {
    name: 'etcd-learner-timeout',
    type: 'duration',
    help: 'a joining server’s etcd member is a learner (no vote) until it is promoted, and etcd takes one learner at a time: once a learner has stood in the way of another join this long, this server removes it if its member does not run (its server died while joining), or promotes it if it runs',
    commands: ['server'],
    scope: 'node',
    default: 120_000,
  },
  {
    name: 'token',
    type: 'string',
    help: 'cluster token (drover token show on a server): agents join with it; a server needs it to share an existing datastore. A flag shows in ps to every local user: prefer token-file or the environment',
    commands: ['server', 'agent'],
    scope: 'node',
    secret: true,
  },
  {
    name: 'token-file',
    type: 'string',
    help: 'file holding the cluster token (what token takes, read at start; unlike a flag it does not show in ps); must not be readable by others',
    commands: ['server', 'agent'],
    scope: 'node',
  },
  {
    name: 'datastore-endpoint',
    type: 'string',
    help: 'external datastore, e.g. etcd://10.0.0.1:2379,10.0.0.2:2379 (default: embedded SQLite in the data dir)',
    commands: ['server'],
    scope: 'node',
  },
  {
    name: 'datastore-cafile',
    type: 'string',
    help: 'CA certificate file for the external datastore (TLS)',
    commands: ['server'],
    scope: 'node',
  },
  {
    name: 'datastore-certfile',
    type: 'string',
    help: 'client certificate file for the external datastore (mutual TLS)',
    commands: ['server'],
    scope: 'node',
  },
  {
    name: 'datastore-keyfile',
    type: 'string',
    help: 'client key file for the external datastore (mutual TLS)',
    commands: ['server'],
    scope: 'node',
  },
  // --- node-scoped, both -------------------------------------------------------------------------
  {
    name: 'data-dir',
    type: 'string',
    help: 'folder for state, certificates and credentials',
    commands: ['server', 'agent'],
    scope: 'node',
    default: defaultDataDir,
    defaultText: '/var/lib/drover as root, else ~/.drover',
  },
  {
    name: 'node-name',
    type: 'string',
    help: 'name of this node',
    commands: ['server', 'agent'],
    scope: 'node',
    default: () => os.hostname().toLowerCase(),
    defaultText: 'the host name',
  },
  {
    name: 'node-label',
    type: 'labels',
    help: 'label for this node, key=value (repeatable)',
    commands: ['server', 'agent'],
    scope: 'node',
    default: [],
  },
  {
    name: 'node-taint',
    type: 'taints',
    help: 'taint this node registers with, key[=value]:Effect (repeatable)',
    commands: ['server', 'agent'],
    scope: 'node',
    default: [],
  },
  {
    name: 'node-ip',
    type: 'string',
    help: 'address other nodes reach this one at',
    commands: ['server', 'agent'],
    scope: 'node',
    defaultText: 'the first non-loopback IPv4 address',
  },
  {
    name: 'agent-port',
    type: 'port',
    help: "port of the agent's own HTTPS endpoint (0 picks a free port)",
    commands: ['server', 'agent'],
    scope: 'node',
    default: 10250,
  },
  {
    name: 'private-registry',
    type: 'string',
    help: 'registries.yaml (K3s’s format) with the mirrors, credentials and TLS this node pulls images with; a missing file means none (docs/images.md#registries)',
    commands: ['server', 'agent'],
    scope: 'node',
    default: '/etc/drover/registries.yaml',
  },
  {
    name: 'shutdown-grace-period',
    type: 'duration',
    help: 'how long a planned shutdown may take',
    commands: ['server', 'agent'],
    scope: 'node',
    default: 10_000,
  },
  {
    name: 'supervisor-metrics',
    type: 'bool',
    help: 'serve Prometheus metrics on /metrics (server: its API port; agent: its agent port)',
    commands: ['server', 'agent'],
    scope: 'node',
    default: false,
  },
  {
    name: 'embedded-registry',
    type: 'bool',
    help: 'serve this node’s image store read-only to the other nodes over the OCI Distribution API (/v2/ on its agent port, for other nodes’ and administrators’ certificates only); taken from this node’s own config only (docs/registry.md)',
    commands: ['server', 'agent'],
    scope: 'node',
    default: false,
  },
  {
    name: 'image-gc-high-threshold',
    type: 'percent',
    help: 'disk usage (percent of the filesystem holding the image store) at which images no pod on this node uses are removed, least recently used first (100 turns image garbage collection off; kubelet: 85)',
    commands: ['server', 'agent'],
    scope: 'node',
    default: 85,
  },
  {
    name: 'image-gc-low-threshold',
    type: 'percent',
    help: 'disk usage image garbage collection frees down to, once it runs (below image-gc-high-threshold; kubelet: 80)',
    commands: ['server', 'agent'],
    scope: 'node',
    default: 80,
  },
  {
    name: 'system-reserved',
    type: 'string',
    help: 'resources held back from pods on this node, as kubelet\'s --system-reserved: cpu=500m,memory=512Mi,ephemeral-storage=1Gi; allocatable is capacity minus these',
    commands: ['server', 'agent'],
    scope: 'node',
    default: '',
  },
  {
    name: 'log-level',
    type: 'enum',
    help: 'log verbosity',
    commands: ['server', 'agent'],
    scope: 'node',
    default: 'info',
    choices: LOG_LEVEL_CHOICES,
  },
] as const satisfies readonly Setting[];

export const SETTINGS: readonly Setting[] = TABLE;

export const SETTINGS_BY_NAME: ReadonlyMap<string, Setting> = new Map(SETTINGS.map((s) => [s.name, s]));

export function settingsFor(command: Command): Setting[] {
  return SETTINGS.filter((s) => s.commands.includes(command));
}

// ---------------------------------------------------------------------------------------------
// Typed settings, derived from the table: a resolved configuration is an object with one field
// per setting of its command, so no consumer looks a setting up by string and casts it.
//
// Field names are the keys in camelCase, with the unit or number in the name where the key leaves
// it implicit: durations (milliseconds) end in `Ms` (`node-lease-renew-interval` →
// `nodeLeaseRenewIntervalMs`), lists end in `s` (`tls-san` → `tlsSans`). A setting without a
// default may be undefined.

export interface NodeLabel {
  key: string;
  value: string;
}

type Entry = (typeof TABLE)[number];
export type SettingName = Entry['name'];

interface ValueByType {
  string: string;
  bool: boolean;
  port: number;
  count: number;
  percent: number;
  duration: number;
  enum: string;
  list: string[];
  labels: NodeLabel[];
  taints: Taint[];
}

type BaseValue<E extends Entry> = E extends { type: 'enum'; choices: readonly (infer C)[] } ? C : ValueByType[E['type']];
type EntryValue<E extends Entry> = E extends { default: unknown } ? BaseValue<E> : BaseValue<E> | undefined;
export type SettingValue<N extends SettingName> = EntryValue<Extract<Entry, { name: N }>>;

type EntryFor<C extends Command> = Entry extends infer E ? (E extends { commands: readonly (infer X)[] } ? (C extends X ? E : never) : never) : never;
export type SettingNameFor<C extends Command> = EntryFor<C>['name'];

type CamelCase<S extends string> = S extends `${infer Head}-${infer Tail}` ? `${Head}${Capitalize<CamelCase<Tail>>}` : S;
type FieldName<E extends Entry> = E['type'] extends 'duration'
  ? `${CamelCase<E['name']>}Ms`
  : E['type'] extends 'list' | 'labels' | 'taints'
    ? `${CamelCase<E['name']>}s`
    : CamelCase<E['name']>;

/** Every setting of `command`, typed: what `ResolvedConfig.values` holds. */
export type Settings<C extends Command> = { readonly [E in EntryFor<C> as FieldName<E>]: EntryValue<E> };
export type ServerSettings = Settings<'server'>;
export type AgentSettings = Settings<'agent'>;
export type Role = (typeof ROLE_CHOICES)[number];
export type LogLevelSetting = (typeof LOG_LEVEL_CHOICES)[number];

/** The field of a setting in `Settings` (the same rule as the `FieldName` type above). */
export function fieldName(setting: Pick<Setting, 'name' | 'type'>): string {
  const camel = setting.name.replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase());
  if (setting.type === 'duration') return `${camel}Ms`;
  if (setting.type === 'list' || setting.type === 'labels' || setting.type === 'taints') return `${camel}s`;
  return camel;
}

/** A setting's default, typed (computed defaults computed now). */
export function defaultOf<N extends SettingName>(name: N): SettingValue<N> {
  return defaultValue(SETTINGS_BY_NAME.get(name)!) as SettingValue<N>;
}

/** `node-label` values as the Node's labels. */
export function labelRecord(labels: readonly NodeLabel[]): Record<string, string> {
  return Object.fromEntries(labels.map((l) => [l.key, l.value]));
}

export function envName(setting: Pick<Setting, 'name'>): string {
  return `DROVER_${setting.name.toUpperCase().replace(/-/g, '_')}`;
}

export function defaultValue(setting: Setting): unknown {
  return typeof setting.default === 'function' ? (setting.default as () => unknown)() : setting.default;
}
