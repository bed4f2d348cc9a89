import { Command, Option } from 'commander';
import { type Command as DroverCommand, defaultValue, envName, type Setting, SETTINGS, settingsFor } from './schema.js';
import { formatValue } from './values.js';
import type { FlagValues } from './resolve.js';

/**
 * Flags generated from the schema. They carry no defaults of their own: commander only reports
 * what the user typed, and the resolver fills in files, environment and defaults, so that every
 * value knows its source.
 */

function describe(setting: Setting): string {
  const shown = setting.defaultText ?? (setting.default !== undefined ? formatValue(setting, defaultValue(setting)) : undefined);
  const parts = [setting.help];
  if (shown !== undefined && shown !== '' && shown !== '[]') parts.push(`(default: ${shown})`);
  parts.push(`[env ${envName(setting)}]`);
  if (setting.scope === 'cluster') parts.push('[cluster-wide: must match on every server]');
  return parts.join(' ');
}

function repeatable(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

export function addSettingOptions(
  command: Command,
  which: DroverCommand | 'all',
  except: ReadonlySet<string> = new Set(),
): Map<string, string> {
  const attributes = new Map<string, string>();
  command.addOption(new Option('-c, --config <file>', `config file (default: /etc/drover/config.yaml) [env DROVER_CONFIG_FILE]`));
  for (const setting of which === 'all' ? SETTINGS : settingsFor(which)) {
    if (except.has(setting.name)) continue;
    let option: Option;
    if (setting.type === 'bool') {
      option = new Option(`--${setting.name} [true|false]`, describe(setting));
    } else if (['list', 'labels', 'taints'].includes(setting.type)) {
      option = new Option(`--${setting.name} <value>`, describe(setting)).argParser(repeatable);
    } else {
      // Choices are checked by the resolver (exit 78 like every other bad value), not commander.
      option = new Option(`--${setting.name} <value>`, `${describe(setting)}${setting.choices ? ` (one of ${setting.choices.join(', ')})` : ''}`);
    }
    command.addOption(option);
    attributes.set(setting.name, option.attributeName());
  }
  return attributes;
}

/** The user's flags by setting name. */
export function flagValues(command: Command, attributes: Map<string, string>): FlagValues {
  const opts = command.opts<Record<string, string | string[] | boolean | undefined>>();
  const values: FlagValues = {};
  for (const [name, attribute] of attributes) {
    const value = opts[attribute];
    if (value !== undefined) values[name] = value;
  }
  return values;
}
