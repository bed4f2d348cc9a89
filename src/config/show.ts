import { formatSource, type ResolvedConfig } from './resolve.js';
import { settingsFor } from './schema.js';
import { formatValue } from './values.js';

/** `drover config show`: every setting, its effective value (secrets redacted) and its source. */

export interface ShownSetting {
  key: string;
  value: string;
  source: string;
  scope: string;
}

export function shownSettings(config: ResolvedConfig): ShownSetting[] {
  // In schema order (cluster-scoped first), whatever order the sources were read in.
  const resolved = settingsFor(config.command).map((s) => config.settings.get(s.name)!);
  return resolved.map(({ setting, value, sources }) => ({
    key: setting.name,
    value: formatValue(setting, value),
    source: sources.map(formatSource).join(', '),
    scope: setting.scope,
  }));
}

export function showConfig(config: ResolvedConfig, json: boolean): string {
  const rows = shownSettings(config);
  if (json) {
    return `${JSON.stringify({ command: config.command, configFile: config.configFile, filesRead: config.filesRead, warnings: config.warnings, settings: rows }, null, 2)}\n`;
  }
  const header = { key: 'KEY', value: 'VALUE', source: 'SOURCE', scope: 'SCOPE' };
  const widths = {
    key: Math.max(...[header, ...rows].map((r) => r.key.length)),
    value: Math.max(...[header, ...rows].map((r) => r.value.length)),
    scope: Math.max(...[header, ...rows].map((r) => r.scope.length)),
  };
  const line = (r: ShownSetting): string =>
    `${r.key.padEnd(widths.key)}  ${r.value.padEnd(widths.value)}  ${r.scope.padEnd(widths.scope)}  ${r.source}`.trimEnd();
  const lines = [
    `# drover ${config.command}: config file ${config.configFile}${config.filesRead.length ? '' : ' (not present)'}`,
    ...config.warnings.map((w) => `# warning: ${w}`),
    line(header),
    ...rows.map(line),
  ];
  return `${lines.join('\n')}\n`;
}
