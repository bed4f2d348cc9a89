import { createHash } from 'node:crypto';
import type { Datastore } from '../datastore/types.js';
import type { ClusterRecord } from './cluster-record.js';
import type { ResolvedConfig } from './resolve.js';
import { type Command, formatValue, SETTINGS_BY_NAME } from './schema.js';

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
  const header = ['SEVERITY', 'KEY', 'SCOPE', ...columns.map((c) => c.toUpperCase())];
  const lines = report.rows.map((r) => [r.severity.toUpperCase(), r.key, r.scope, ...columns.map((c) => r.values[c] ?? '-')]);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const render = (cells: string[]): string => cells.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd();
  return `${[render(header), ...lines.map(render)].join('\n')}\n`;
}
