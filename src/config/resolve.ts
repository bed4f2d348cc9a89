import fs from 'node:fs';
import path from 'node:path';
import { isMap, isNode, isScalar, LineCounter, parseDocument } from 'yaml';
import { timingProblems } from './timings.js';
import { issuerProblem } from '../security/service-account-tokens.js';
import { parseServiceNetwork } from '../node-protocol/service-network.js';
import { runtimeClassNameProblem } from '../node-protocol/runtime-classes.js';
import { parseReservation } from '../node-protocol/node-resources.js';
import { readTokenFile, TokenFileError } from './token-file.js';
import {
  type Command,
  defaultValue,
  envName,
  fieldName,
  type Setting,
  type SettingNameFor,
  type Settings,
  type SettingValue,
  SETTINGS,
  SETTINGS_BY_NAME,
  settingsFor,
} from './schema.js';
import {
  describeValue,
  expectedType,
  parseText,
  parseYamlValue,
  suggest,
  ValueError,
} from './values.js';

/**
 * The one resolver every command uses (server, agent, config show): defaults < config file <
 * drop-ins (lexical order) < environment < flags, with where each value came from.
 */

export const DEFAULT_CONFIG_FILE = '/etc/drover/config.yaml';
export const CONFIG_FILE_ENV = 'DROVER_CONFIG_FILE';
export const EXIT_CONFIG = 78;

export type Source =
  | { kind: 'default' }
  | { kind: 'file' | 'drop-in'; file: string; line: number }
  | { kind: 'env'; name: string }
  | { kind: 'flag'; name: string }
  /** The token's value read from the file named by token-file. */
  | { kind: 'token-file'; file: string };

export function formatSource(source: Source): string {
  switch (source.kind) {
    case 'default':
      return 'default';
    case 'file':
    case 'drop-in':
      return `${source.kind}:${source.file}:${source.line}`;
    case 'env':
      return `env:${source.name}`;
    case 'flag':
      return `flag:--${source.name}`;
    case 'token-file':
      return `token-file:${source.file}`;
  }
}

/** Bad configuration: every problem found, one a line. Exit code 78 (EX_CONFIG). */
export class ConfigError extends Error {
  override name = 'ConfigError';
  readonly exitCode = EXIT_CONFIG;
  constructor(readonly problems: string[]) {
    super(problems.join('\n'));
  }
}

/** Raw flag values by setting name, as text: repeated list flags as arrays. */
export type FlagValues = Record<string, string | string[] | boolean | undefined>;

export interface ResolveInput<C extends Command = Command> {
  command: C;
  flags: FlagValues;
  env: NodeJS.ProcessEnv;
  /** `--config`, when given. */
  configFlag?: string;
}

export interface ResolvedSetting {
  setting: Setting;
  value: unknown;
  /** Every source that contributed, in order (several when a file appended with `key+`). */
  sources: Source[];
}

export class ResolvedConfig<C extends Command = Command> {
  constructor(
    readonly command: C,
    readonly settings: ReadonlyMap<string, ResolvedSetting>,
    readonly warnings: readonly string[],
    readonly configFile: string,
    readonly filesRead: readonly string[],
  ) {}

  /** Every setting of the command as one typed object (see `Settings` in schema.ts). */
  get values(): Settings<C> {
    const values: Record<string, unknown> = {};
    for (const { setting, value } of this.settings.values()) values[fieldName(setting)] = value;
    return values as Settings<C>;
  }

  isFor<K extends Command>(command: K): this is ResolvedConfig<K> {
    return (this.command as Command) === command;
  }

  /** One setting by key, typed. */
  get<N extends SettingNameFor<C>>(name: N): SettingValue<N> {
    return this.rawValue(name) as SettingValue<N>;
  }

  /** One setting by key, for code that walks the schema table (the cluster record, drift). */
  rawValue(name: string): unknown {
    const resolved = this.settings.get(name);
    if (!resolved) throw new Error(`setting ${name} is not a ${this.command} setting`);
    return resolved.value;
  }

  source(name: string): string {
    return (this.settings.get(name)?.sources ?? []).map(formatSource).join(', ');
  }
}

interface FileEntry {
  setting: Setting;
  value: unknown;
  append: boolean;
  source: Source;
}

function configFiles(input: ResolveInput, problems: string[]): { main: string; files: { file: string; kind: 'file' | 'drop-in' }[] } {
  const explicit = input.configFlag ?? input.env[CONFIG_FILE_ENV];
  const main = path.resolve(explicit ?? DEFAULT_CONFIG_FILE);
  const files: { file: string; kind: 'file' | 'drop-in' }[] = [];
  if (fs.existsSync(main)) files.push({ file: main, kind: 'file' });
  else if (explicit) problems.push(`config file ${main} does not exist (named by ${input.configFlag ? '--config' : CONFIG_FILE_ENV})`);
  const dropInDir = `${main}.d`;
  if (fs.existsSync(dropInDir) && fs.statSync(dropInDir).isDirectory()) {
    for (const name of fs.readdirSync(dropInDir).sort()) {
      const file = path.join(dropInDir, name);
      if (/\.ya?ml$/i.test(name) && fs.statSync(file).isFile()) files.push({ file, kind: 'drop-in' });
    }
  }
  return { main, files };
}

function readFile(
  file: string,
  kind: 'file' | 'drop-in',
  command: Command,
  problems: string[],
  warnings: string[],
): FileEntry[] {
  const text = fs.readFileSync(file, 'utf8');
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { lineCounter, uniqueKeys: true, prettyErrors: false });
  if (doc.errors.length) {
    for (const error of doc.errors) {
      const pos = lineCounter.linePos(error.pos[0]);
      const what = error.code === 'DUPLICATE_KEY' ? 'duplicate key' : 'YAML syntax error';
      problems.push(`${file}:${pos.line}:${pos.col}: ${what}: ${error.message.split('\n')[0]}`);
    }
    return [];
  }
  if (doc.contents === null) return [];
  if (!isMap(doc.contents)) {
    problems.push(`${file}:1:1: expected a map of settings (key: value), got ${describeValue(doc.toJS())}`);
    return [];
  }
  const entries: FileEntry[] = [];
  for (const pair of doc.contents.items) {
    const keyNode = pair.key;
    const offset = isScalar(keyNode) && keyNode.range ? keyNode.range[0] : 0;
    const line = lineCounter.linePos(offset).line;
    const where = `${file}:${line}`;
    const rawKey = isScalar(keyNode) ? String(keyNode.value) : String(keyNode);
    const append = rawKey.endsWith('+');
    const name = append ? rawKey.slice(0, -1) : rawKey;
    const setting = SETTINGS_BY_NAME.get(name);
    if (!setting) {
      const hint = suggest(name, SETTINGS.map((s) => s.name));
      problems.push(`${where}: unknown key "${rawKey}"${hint ? ` (did you mean "${hint}"?)` : ''}`);
      continue;
    }
    if (!setting.commands.includes(command)) {
      warnings.push(`${where}: "${name}" is a ${setting.commands.join('/')}-only setting, ignored by ${command}`);
      continue;
    }
    if (append && !['list', 'labels', 'taints'].includes(setting.type)) {
      problems.push(`${where}: "${rawKey}" appends to a list, but "${name}" is ${expectedType(setting)}`);
      continue;
    }
    const raw: unknown = isNode(pair.value) ? pair.value.toJSON() : pair.value;
    try {
      entries.push({ setting, value: parseYamlValue(setting, raw), append, source: { kind, file, line } });
    } catch (error) {
      if (!(error instanceof ValueError)) throw error;
      problems.push(`${where}: "${name}": ${error.message}`);
    }
  }
  return entries;
}

function flagText(value: string | string[] | boolean): string {
  if (typeof value === 'boolean') return String(value);
  return Array.isArray(value) ? value.join(',') : value;
}

export function resolveConfig<C extends Command>(input: ResolveInput<C>): ResolvedConfig<C> {
  const problems: string[] = [];
  const warnings: string[] = [];
  const { main, files } = configFiles(input, problems);
  const resolved = new Map<string, ResolvedSetting>();
  const filesRead: string[] = [];

  // Files: the last value wins, `key+` appends.
  for (const { file, kind } of files) {
    filesRead.push(file);
    for (const entry of readFile(file, kind, input.command, problems, warnings)) {
      const previous = resolved.get(entry.setting.name);
      if (entry.append && previous) {
        previous.value = [...(previous.value as unknown[]), ...(entry.value as unknown[])];
        previous.sources.push(entry.source);
      } else {
        resolved.set(entry.setting.name, { setting: entry.setting, value: entry.value, sources: [entry.source] });
      }
    }
  }

  for (const setting of settingsFor(input.command)) {
    // Environment, then flags: each replaces whatever came before, lists included.
    const env = input.env[envName(setting)];
    if (env !== undefined) {
      try {
        resolved.set(setting.name, { setting, value: parseText(setting, env), sources: [{ kind: 'env', name: envName(setting) }] });
      } catch (error) {
        problems.push(`${envName(setting)}: ${(error as Error).message}`);
      }
    }
    const flag = input.flags[setting.name];
    if (flag !== undefined) {
      try {
        resolved.set(setting.name, { setting, value: parseText(setting, flagText(flag)), sources: [{ kind: 'flag', name: setting.name }] });
      } catch (error) {
        problems.push(`--${setting.name}: ${(error as Error).message}`);
      }
    }
    if (!resolved.has(setting.name)) {
      resolved.set(setting.name, { setting, value: defaultValue(setting), sources: [{ kind: 'default' }] });
    }
  }

  const config = new ResolvedConfig(input.command, resolved, warnings, main, filesRead);
  if (!problems.length) problems.push(...tokenFromFile(config, resolved, warnings));
  if (!problems.length) problems.push(...combinationProblems(config));
  if (problems.length) throw new ConfigError(problems);
  return config;
}

/**
 * With token-file set, the token is what that file holds (source `token-file:<path>`), so every
 * consumer of `token` and `config show` see it as they would a token given directly. Giving both
 * is refused rather than ranked: two sources of one secret are a mistake waiting to surprise.
 */
function tokenFromFile(config: ResolvedConfig, resolved: Map<string, ResolvedSetting>, warnings: string[]): string[] {
  const file = config.get('token-file');
  if (file === undefined) return [];
  if (!file) return [`token-file (${config.source('token-file')}) is empty: name the file that holds the token`];
  const token = resolved.get('token')!;
  if (token.value) {
    return [
      `token (${config.source('token')}) and token-file (${config.source('token-file')}) are both set: give the token one way (token-file keeps it off the command line)`,
    ];
  }
  try {
    const read = readTokenFile(file, config.source('token-file'));
    warnings.push(...read.warnings);
    resolved.set('token', { setting: token.setting, value: read.token, sources: [{ kind: 'token-file', file: path.resolve(file) }] });
    return [];
  } catch (error) {
    if (error instanceof TokenFileError) return [error.message];
    throw error;
  }
}

/** Rules across settings, each naming every key involved. */
function combinationProblems(config: ResolvedConfig): string[] {
  if (config.isFor('server')) return [...serverProblems(config), ...nodeProblems(config)];
  if (config.isFor('agent')) return [...agentProblems(config), ...nodeProblems(config)];
  return [];
}

/** Rules on node-scoped settings that servers and agents share. */
function nodeProblems(config: ResolvedConfig<'server'> | ResolvedConfig<'agent'>): string[] {
  const c = config as ResolvedConfig<'agent'>;
  const high = c.get('image-gc-high-threshold');
  const low = c.get('image-gc-low-threshold');
  // As the kubelet: the low threshold is where collection stops, so it must lie below where it starts.
  if (low >= high) {
    return [`image-gc-low-threshold ${low} (${c.source('image-gc-low-threshold')}) must be below image-gc-high-threshold ${high} (${c.source('image-gc-high-threshold')})`];
  }
  return [];
}

function serverProblems(config: ResolvedConfig<'server'>): string[] {
  const problems = timingProblems(
    {
      renewMs: config.get('node-lease-renew-interval'),
      graceMs: config.get('node-monitor-grace-period'),
      fencingMs: config.get('fencing-timeout'),
    },
    (key) => config.source(key),
  );
  const issuer = issuerProblem(config.get('service-account-issuer'));
  if (issuer) problems.push(`service-account-issuer (${config.source('service-account-issuer')}): ${issuer}`);
  const runtimeClass = runtimeClassNameProblem(config.get('default-runtime-class'));
  if (runtimeClass) problems.push(`default-runtime-class (${config.source('default-runtime-class')}): ${runtimeClass}`);
  problems.push(...reservationProblems(config));
  problems.push(
    ...parseServiceNetwork(
      {
        clusterCidr: config.get('cluster-cidr'),
        serviceCidr: config.get('service-cidr'),
        serviceNodePortRange: config.get('service-node-port-range'),
        clusterDns: config.get('cluster-dns'),
        clusterDomain: config.get('cluster-domain'),
      },
      (key) => config.source(key),
    ).problems,
  );
  const role = config.get('role');
  const clusterInit = config.get('cluster-init');
  const joins = Boolean(config.get('server'));
  const external = Boolean(config.get('datastore-endpoint'));
  if (role === 'etcd' && external) {
    problems.push(`role etcd (${config.source('role')}) runs a managed etcd member, so it cannot use datastore-endpoint (${config.source('datastore-endpoint')})`);
  }
  if (role === 'etcd' && !clusterInit && !joins) {
    problems.push(`role etcd (${config.source('role')}) needs cluster-init (a new cluster) or server (join one)`);
  }
  if (role === 'control-plane' && clusterInit) {
    problems.push(`role control-plane (${config.source('role')}) runs no etcd member, so it cannot be the first server (cluster-init, ${config.source('cluster-init')}); start an etcd or all server first`);
  }
  if (role === 'control-plane' && !joins && !external) {
    problems.push(`role control-plane (${config.source('role')}) needs server (a server of the cluster to join) or datastore-endpoint (an external etcd)`);
  }
  if (clusterInit && external) {
    problems.push(`cluster-init (${config.source('cluster-init')}) starts a managed etcd; it cannot be combined with datastore-endpoint (${config.source('datastore-endpoint')})`);
  }
  return problems;
}

/** `system-reserved`, which servers (for their own agent) and agents both take. */
function reservationProblems(config: ResolvedConfig<'server'> | ResolvedConfig<'agent'>): string[] {
  const source = config.source('system-reserved');
  const entries = (config as ResolvedConfig<'agent'>).get('system-reserved');
  return parseReservation([entries]).problems.map((p) => `system-reserved (${source}): ${p}`);
}

function agentProblems(config: ResolvedConfig<'agent'>): string[] {
  const problems: string[] = reservationProblems(config);
  if (!config.get('server')) {
    problems.push(`the agent needs "server": pass --server, set ${envName({ name: 'server' })}, or put "server:" in the config file`);
  }
  if (!config.get('token')) {
    problems.push(
      `the agent needs "token": pass --token-file (or --token), set DROVER_TOKEN_FILE (or DROVER_TOKEN), or put "token-file:" (or "token:") in the config file`,
    );
  }
  return problems;
}
