import { defaultValue, envName, type Setting, SETTINGS } from './schema.js';
import { expectedType, formatValue } from './values.js';

/**
 * The settings reference in docs/configuration.md, generated from the schema. A test compares the
 * committed doc with this output, so the doc cannot drift from the code; `npm run docs` rewrites it.
 */

export const BEGIN_MARKER = '<!-- BEGIN GENERATED SETTINGS (npm run docs) -->';
export const END_MARKER = '<!-- END GENERATED SETTINGS -->';

function shownDefault(setting: Setting): string {
  if (setting.defaultText) return setting.defaultText;
  if (setting.default === undefined) return '—';
  const text = formatValue(setting, defaultValue(setting));
  return text === '' ? '""' : text;
}

function escape(text: string): string {
  return text.replace(/\|/g, '\\|');
}

function table(settings: readonly Setting[]): string {
  const rows = settings.map(
    (s) =>
      `| \`${s.name}\` | ${s.commands.join(', ')} | ${escape(expectedType(s))} | ${escape(shownDefault(s))} | \`${envName(s)}\` | ${escape(s.help)}${s.secret ? ' (secret: redacted in output)' : ''} |`,
  );
  return ['| key / flag | commands | type | default | environment | meaning |', '|---|---|---|---|---|---|', ...rows].join('\n');
}

export function renderSettingsReference(): string {
  const cluster = SETTINGS.filter((s) => s.scope === 'cluster');
  const node = SETTINGS.filter((s) => s.scope === 'node');
  return [
    BEGIN_MARKER,
    '',
    '### Cluster-wide settings (scope `cluster`)',
    '',
    'Identical on every server; checked against the cluster record at every server start.',
    '',
    table(cluster),
    '',
    'Why each is cluster-wide:',
    '',
    ...cluster.map((s) => `- \`${s.name}\`: ${s.why ?? ''}`),
    '',
    '### Node settings (scope `node`)',
    '',
    "Taken only from the node's own local configuration; may differ per node.",
    '',
    table(node),
    '',
    END_MARKER,
  ].join('\n');
}

/** Replace the generated section of a document. */
export function withGeneratedSection(document: string): string {
  const start = document.indexOf(BEGIN_MARKER);
  const end = document.indexOf(END_MARKER);
  if (start < 0 || end < 0) throw new Error('docs/configuration.md lacks the generated-section markers');
  return document.slice(0, start) + renderSettingsReference() + document.slice(end + END_MARKER.length);
}
