import { ConflictError, type Datastore, KeyExistsError } from '../datastore/types.js';
import type { Logger } from '../logging/logger.js';
import { parseDuration } from './duration.js';
import { ConfigError, type ResolvedConfig } from './resolve.js';
import { defaultValue, type Setting, SETTINGS, SETTINGS_BY_NAME } from './schema.js';
import { formatValue, parseText, ValueError } from './values.js';
import { timingProblems } from './timings.js';
import { parseServiceNetwork } from '../node-protocol/service-network.js';

/** The settings of the Service network, checked together (src/node-protocol/service-network.ts). */
const NETWORK_KEYS: readonly string[] = ['cluster-cidr', 'service-cidr', 'service-node-port-range', 'cluster-dns', 'cluster-domain'];

/**
 * The cluster's record of its cluster-scoped settings, in the datastore. The first server writes
 * it; every server start (first bootstrap, join, restart with data on disk, any role) compares
 * its own local values with it before starting anything, and refuses to start on a mismatch.
 * It never fails open: if the datastore cannot be read, the server waits and retries; if the
 * record itself is corrupt, the server refuses to start (a corrupt record is not "no record").
 */

export const CLUSTER_RECORD_KEY = '/drover/cluster/config';

export interface RecordedValue {
  /** The value as `config show` prints it (durations as 4s), which is what is compared. */
  value: string;
  setBy: string;
  setAt: string;
  /** Where the setter's value came from (file:..., flag:..., `drover cluster config set`). */
  source: string;
  /** When changed on a live cluster: what it was before. */
  previous?: { value: string; changedAt: string };
}

export interface ClusterRecord {
  values: Record<string, RecordedValue>;
}

const CLUSTER_SETTINGS: readonly Setting[] = SETTINGS.filter((s) => s.scope === 'cluster');

function localValues(config: ResolvedConfig, nodeName: string): Record<string, RecordedValue> {
  const now = new Date().toISOString();
  const values: Record<string, RecordedValue> = {};
  for (const setting of CLUSTER_SETTINGS) {
    if (!config.settings.has(setting.name)) continue;
    values[setting.name] = {
      value: formatValue(setting, config.rawValue(setting.name)),
      setBy: nodeName,
      setAt: now,
      source: config.source(setting.name),
    };
  }
  return values;
}

export function mismatches(config: ResolvedConfig, record: ClusterRecord): string[] {
  const problems: string[] = [];
  for (const setting of CLUSTER_SETTINGS) {
    const recorded = record.values[setting.name];
    if (!recorded || !config.settings.has(setting.name)) continue;
    const local = formatValue(setting, config.rawValue(setting.name));
    if (local === recorded.value) continue;
    const changed = recorded.previous
      ? `; the cluster changed it from ${recorded.previous.value} to ${recorded.value} at ${recorded.previous.changedAt}, so update this server's config`
      : '';
    problems.push(
      `${setting.name}: this server has ${local} (${config.source(setting.name)}), but the cluster has ${recorded.value} (set by ${recorded.setBy} at ${recorded.setAt}, ${recorded.source})${changed}`,
    );
  }
  return problems;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function corrupt(why: string): ConfigError {
  return new ConfigError([
    `the cluster record (${CLUSTER_RECORD_KEY} in the datastore) is corrupt: ${why}; ` +
      'the cluster-wide settings cannot be checked against it, so this server does not start. ' +
      'Repair the record, or delete that key to have the next server start record its own values',
  ]);
}

/**
 * The stored record, checked for the shape this code writes. Anything else is refused: read
 * leniently, a damaged record (say `{"values": []}`) would look like a record with nothing in it,
 * and every server would then start with whatever values it has, unchecked.
 */
export function parseClusterRecord(raw: Buffer): ClusterRecord {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch (error) {
    throw corrupt(`not JSON (${(error as Error).message})`);
  }
  if (!isObject(parsed) || !isObject(parsed.values)) throw corrupt('it has no "values" object');
  for (const [name, entry] of Object.entries(parsed.values)) {
    const fields = isObject(entry) ? entry : {};
    const missing = ['value', 'setBy', 'setAt', 'source'].filter((f) => typeof fields[f] !== 'string');
    const previous = fields.previous;
    if (previous !== undefined && !(isObject(previous) && typeof previous.value === 'string' && typeof previous.changedAt === 'string')) {
      missing.push('previous');
    }
    if (missing.length) throw corrupt(`the entry for "${name}" lacks a valid ${missing.join(', ')}`);
  }
  return parsed as unknown as ClusterRecord;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Compare this server's cluster-scoped settings with the record (writing it on first bootstrap).
 * Throws ConfigError on a mismatch or a corrupt record; retries for as long as the datastore
 * cannot be read.
 */
export async function checkClusterRecord(
  datastore: Datastore,
  config: ResolvedConfig,
  nodeName: string,
  logger: Logger,
  retryMs = 1000,
): Promise<ClusterRecord> {
  let lastLog = 0;
  for (;;) {
    try {
      const existing = await datastore.get(CLUSTER_RECORD_KEY);
      if (!existing) {
        const record: ClusterRecord = { values: localValues(config, nodeName) };
        try {
          await datastore.create(CLUSTER_RECORD_KEY, Buffer.from(JSON.stringify(record)));
          logger.info({ settings: Object.keys(record.values) }, 'recorded the cluster-wide settings (first server of this cluster)');
          return record;
        } catch (error) {
          if (error instanceof KeyExistsError) continue; // another server was first: compare with theirs
          throw error;
        }
      }
      const record = parseClusterRecord(existing.value);
      const problems = mismatches(config, record);
      if (problems.length) {
        throw new ConfigError([
          'cluster-wide settings differ from the cluster record; every server must use the same values:',
          ...problems.map((p) => `  ${p}`),
        ]);
      }
      // Settings this version knows but the record does not (added by an upgrade): record them.
      const missing = CLUSTER_SETTINGS.filter((s) => !record.values[s.name] && config.settings.has(s.name));
      if (missing.length) {
        const additions = localValues(config, nodeName);
        for (const setting of missing) record.values[setting.name] = additions[setting.name]!;
        try {
          await datastore.update(CLUSTER_RECORD_KEY, Buffer.from(JSON.stringify(record)), existing.modRevision);
        } catch (error) {
          if (error instanceof ConflictError) continue;
          throw error;
        }
      }
      logger.info('cluster-wide settings match the cluster record');
      return record;
    } catch (error) {
      if (error instanceof ConfigError) throw error;
      if (Date.now() - lastLog > 5000) {
        lastLog = Date.now();
        logger.warn({ reason: (error as Error).message }, 'cannot read the cluster record yet; waiting (the check is never skipped)');
      }
      await sleep(retryMs);
    }
  }
}

/** `drover cluster config set`: change a cluster-wide value on a live cluster. */
export async function setClusterValue(
  datastore: Datastore,
  key: string,
  value: string,
  setBy: string,
): Promise<{ previous: string | undefined; value: string }> {
  const setting = SETTINGS_BY_NAME.get(key);
  if (!setting || setting.scope !== 'cluster') {
    const clusterKeys = CLUSTER_SETTINGS.map((s) => s.name).join(', ');
    throw new ConfigError([`"${key}" is not a cluster-wide setting; cluster-wide settings are: ${clusterKeys}`]);
  }
  let formatted: string;
  try {
    formatted = formatValue(setting, parseText(setting, value));
  } catch (error) {
    if (error instanceof ValueError) throw new ConfigError([`${key}: ${error.message}`]);
    throw error;
  }
  for (;;) {
    const existing = await datastore.get(CLUSTER_RECORD_KEY);
    if (!existing) throw new ConfigError(['the cluster has no record of its settings yet; start a server first']);
    const record = parseClusterRecord(existing.value);
    const now = new Date().toISOString();
    const old = record.values[key];
    checkCombination(record, key, formatted, setting);
    record.values[key] = {
      value: formatted,
      setBy,
      setAt: now,
      source: 'drover cluster config set',
      ...(old ? { previous: { value: old.value, changedAt: now } } : {}),
    };
    try {
      await datastore.update(CLUSTER_RECORD_KEY, Buffer.from(JSON.stringify(record)), existing.modRevision);
      return { previous: old?.value, value: formatted };
    } catch (error) {
      if (!(error instanceof ConflictError)) throw error;
    }
  }
}

/** The timing rules (renew, grace, fencing), checked against the record with the new value in place. */
function checkCombination(record: ClusterRecord, key: string, formatted: string, _setting: Setting): void {
  if (NETWORK_KEYS.includes(key)) {
    const text = (name: string): string => (name === key ? formatted : (record.values[name]?.value ?? String(defaultValue(SETTINGS_BY_NAME.get(name)!))));
    const { problems } = parseServiceNetwork(
      {
        clusterCidr: text('cluster-cidr'),
        serviceCidr: text('service-cidr'),
        serviceNodePortRange: text('service-node-port-range'),
        clusterDns: text('cluster-dns'),
        clusterDomain: text('cluster-domain'),
      },
      (name) => (name === key ? 'drover cluster config set' : (record.values[name]?.source ?? 'default')),
    );
    if (problems.length) throw new ConfigError(problems);
    return;
  }
  if (key !== 'node-monitor-grace-period' && key !== 'node-lease-renew-interval' && key !== 'fencing-timeout') return;
  const read = (name: string): number => {
    const text = name === key ? formatted : record.values[name]?.value;
    if (text) return parseDuration(text);
    return Number(defaultValue(SETTINGS_BY_NAME.get(name)!));
  };
  const problems = timingProblems({
    renewMs: read('node-lease-renew-interval'),
    graceMs: read('node-monitor-grace-period'),
    fencingMs: read('fencing-timeout'),
  });
  if (problems.length) throw new ConfigError(problems);
}
