import { createHash } from 'node:crypto';
import type { Datastore } from '../datastore/types.js';
import type { ClusterRecord } from './cluster-record.js';
import type { ResolvedConfig } from './resolve.js';
import { type Command, settingsFor, SETTINGS_BY_NAME } from './schema.js';
import { formatValue, parseText } from './values.js';

/**
 * The drift view: every node publishes its effective, non-secret configuration when it starts,
 * and `drover config drift` lays them side by side. Cluster-wide settings that differ (between
 * servers, or from the cluster record) are errors; node settings that differ are information,
 * since nodes are allowed to differ there.
 */

export const NODE_CONFIG_PREFIX = '/drover/config/nodes/';

export interface PublishedConfig {
  node: string;
  command: Command;
  values: Record<string, string>;
  hash: string;
  publishedAt: string;
}

export function publishedValues(config: ResolvedConfig): Record<string, string> {
  const values: Record<string, string> = {};
  for (const { setting, value } of config.settings.values()) values[setting.name] = formatValue(setting, value);
  return values;
}

/** Longest published value a node may send; real values are paths, names and short lists. */
const MAX_PUBLISHED_VALUE = 4096;
/** C0/C1 controls and the Unicode bidi overrides: what can repaint or reorder a terminal line. */
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/**
 * The configuration a node publishes about itself, checked against the schema as it comes in:
 * only the agent's own settings, each value as the agent itself prints it (so it parses and
 * prints back the same), no control characters. A node cannot fake a setting or a terminal.
 */
export function checkPublishedValues(values: Record<string, unknown>): { values: Record<string, string>; problems: string[] } {
  const allowed = new Map(settingsFor('agent').map((setting) => [setting.name, setting]));
  const checked: Record<string, string> = {};
  const problems: string[] = [];
  for (const [key, value] of Object.entries(values)) {
    const setting = allowed.get(key);
    if (!setting) {
      problems.push(`${escapeForTerminal(key.slice(0, 100))}: not a setting of drover agent`);
      continue;
    }
    if (typeof value !== 'string' || value.length > MAX_PUBLISHED_VALUE || new RegExp(UNPRINTABLE.source).test(value)) {
      problems.push(`${key}: expected printable text of at most ${MAX_PUBLISHED_VALUE} characters`);
      continue;
    }
    if (value === '(unset)' || (setting.secret && value === '[redacted]')) {
      checked[key] = value;
      continue;
    }
    if (setting.secret) {
      problems.push(`${key}: a secret setting is published only as [redacted]`);
      continue;
    }
    let canonical: string | undefined;
    try {
      canonical = value === '[]' ? value : formatValue(setting, parseText(setting, value));
    } catch (error) {
      problems.push(`${key}: ${(error as Error).message}`);
      continue;
    }
    if (canonical !== value) problems.push(`${key}: "${escapeForTerminal(value)}" is not how drover prints a ${setting.type} (expected "${canonical}")`);
    else checked[key] = value;
  }
  return { values: checked, problems };
}

/** Text safe to print on a terminal: control and bidi characters as \u escapes. */
export function escapeForTerminal(text: string): string {
  return text.replace(UNPRINTABLE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

export function hashValues(values: Record<string, string>): string {
  const sorted = Object.keys(values)
    .sort()
    .map((k) => [k, values[k]]);
  return createHash('sha256').update(JSON.stringify(sorted)).digest('hex').slice(0, 16);
}

export function publication(node: string, command: Command, values: Record<string, string>): PublishedConfig {
  return { node, command, values, hash: hashValues(values), publishedAt: new Date().toISOString() };
}

export async function publishConfig(datastore: Datastore, published: PublishedConfig): Promise<void> {
  const key = `${NODE_CONFIG_PREFIX}${published.node}/${published.command}`;
  const value = Buffer.from(JSON.stringify(published));
  for (let attempt = 0; attempt < 5; attempt++) {
    const existing = await datastore.get(key);
    try {
      if (existing) await datastore.update(key, value, existing.modRevision);
      else await datastore.create(key, value);
      return;
    } catch {
      // raced with ourselves (a restart); read again
    }
  }
}

export async function readPublished(datastore: Datastore): Promise<PublishedConfig[]> {
  const { items } = await datastore.list(NODE_CONFIG_PREFIX);
  return items.map((kv) => JSON.parse(kv.value.toString('utf8')) as PublishedConfig);
}

export interface DriftRow {
  key: string;
  scope: 'cluster' | 'node';
  severity: 'error' | 'info';
  /** `<node>/<command>` → value; `cluster record` for the record's value. */
  values: Record<string, string>;
}

export interface DriftReport {
  nodes: { id: string; hash: string; publishedAt: string }[];
  rows: DriftRow[];
}

export function computeDrift(published: readonly PublishedConfig[], record: ClusterRecord | undefined): DriftReport {
  const nodes = published.map((p) => ({ id: `${p.node}/${p.command}`, hash: p.hash, publishedAt: p.publishedAt }));
  const keys = new Set(published.flatMap((p) => Object.keys(p.values)));
  const rows: DriftRow[] = [];
  for (const key of [...keys].sort()) {
    const setting = SETTINGS_BY_NAME.get(key);
    if (!setting || setting.secret) continue;
    const values: Record<string, string> = {};
    for (const p of published) if (key in p.values) values[`${p.node}/${p.command}`] = p.values[key]!;
    if (setting.scope === 'cluster' && record?.values[key]) values['cluster record'] = record.values[key].value;
    if (new Set(Object.values(values)).size <= 1) continue;
    rows.push({ key, scope: setting.scope, severity: setting.scope === 'cluster' ? 'error' : 'info', values });
  }
  return { nodes, rows };
}

export function formatDrift(report: DriftReport): string {
  if (!report.rows.length) return `no drift: ${report.nodes.length} node configuration(s) agree\n`;
  const columns = [...new Set(report.rows.flatMap((r) => Object.keys(r.values)))];
  const header = ['SEVERITY', 'KEY', 'SCOPE', ...columns.map((c) => escapeForTerminal(c.toUpperCase()))];
  const lines = report.rows.map((r) => [r.severity.toUpperCase(), r.key, r.scope, ...columns.map((c) => r.values[c] ?? '-')]);
  // Publications are checked on the way in; escaping here also covers older stored ones.
  for (const line of lines) line.forEach((cell, i) => (line[i] = escapeForTerminal(cell)));
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const render = (cells: string[]): string => cells.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd();
  return `${[render(header), ...lines.map(render)].join('\n')}\n`;
}
