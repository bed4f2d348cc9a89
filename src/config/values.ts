import { z } from 'zod';
import type { Taint } from '../node-protocol/taints.js';
import { formatDuration, parseDuration } from './duration.js';
import type { NodeLabel, Setting } from './schema.js';

/**
 * Setting values: each type of the schema has one parser for text (flags, env), one check for
 * YAML values, and one way to print; plus "did you mean" for unknown keys.
 */

export class ValueError extends Error {
  override name = 'ValueError';
  constructor(
    readonly expected: string,
    message: string,
  ) {
    super(message);
  }
}

const LABEL_PATTERN = /^([^=\s]+)=(.*)$/;
const TAINT_PATTERN = /^([^=:\s]+)(?:=([^:]*))?:(NoSchedule|PreferNoSchedule|NoExecute)$/;

export function expectedType(setting: Setting): string {
  switch (setting.type) {
    case 'string':
      return 'a string';
    case 'bool':
      return 'a boolean (true or false)';
    case 'port':
      return 'a port number (0-65535)';
    case 'count':
      return 'a whole number of at least 1';
    case 'percent':
      return 'a whole percentage (0-100)';
    case 'duration':
      return 'a duration such as 500ms, 4s or 1m30s';
    case 'enum':
      return `one of ${setting.choices!.join(', ')}`;
    case 'list':
      return 'a list of strings';
    case 'labels':
      return 'a list of key=value strings';
    case 'taints':
      return 'a list of key[=value]:Effect strings (Effect: NoSchedule, PreferNoSchedule or NoExecute)';
  }
}

export function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a map';
  return `${typeof value} ${JSON.stringify(value)}`;
}

function parseItem(setting: Setting, item: string): unknown {
  if (setting.type === 'labels') {
    const match = LABEL_PATTERN.exec(item.trim());
    if (!match) throw new ValueError(expectedType(setting), `expected key=value, got "${item}"`);
    return { key: match[1]!, value: match[2]! } satisfies NodeLabel;
  }
  if (setting.type === 'taints') {
    const match = TAINT_PATTERN.exec(item.trim());
    if (!match) throw new ValueError(expectedType(setting), `expected key[=value]:Effect, got "${item}"`);
    return { key: match[1]!, ...(match[2] ? { value: match[2] } : {}), effect: match[3] as Taint['effect'] } satisfies Taint;
  }
  return item;
}

/** From a flag or environment variable. Lists are comma-separated there. */
export function parseText(setting: Setting, text: string): unknown {
  switch (setting.type) {
    case 'string':
      return text;
    case 'bool': {
      const lowered = text.trim().toLowerCase();
      if (['true', '1', 'yes', ''].includes(lowered)) return true;
      if (['false', '0', 'no'].includes(lowered)) return false;
      throw new ValueError(expectedType(setting), `expected true or false, got "${text}"`);
    }
    case 'port': {
      const port = Number(text);
      if (!/^\d+$/.test(text.trim()) || port > 65535) {
        throw new ValueError(expectedType(setting), `expected a port number (0-65535), got "${text}"`);
      }
      return port;
    }
    case 'count': {
      const count = Number(text.trim());
      if (!/^\d+$/.test(text.trim()) || count < 1 || !Number.isSafeInteger(count)) {
        throw new ValueError(expectedType(setting), `expected a whole number of at least 1, got "${text}"`);
      }
      return count;
    }
    case 'percent': {
      const percent = Number(text.trim().replace(/%$/, ''));
      if (!/^\d+%?$/.test(text.trim()) || percent > 100) {
        throw new ValueError(expectedType(setting), `expected a whole percentage (0-100), got "${text}"`);
      }
      return percent;
    }
    case 'duration':
      try {
        return parseDuration(text);
      } catch (error) {
        throw new ValueError(expectedType(setting), (error as Error).message);
      }
    case 'enum':
      if (!setting.choices!.includes(text)) {
        throw new ValueError(expectedType(setting), `expected one of ${setting.choices!.join(', ')}, got "${text}"`);
      }
      return text;
    case 'list':
    case 'labels':
    case 'taints':
      return text
        .split(',')
        .map((item) => item.trim())
        .filter(Boolean)
        .map((item) => parseItem(setting, item));
  }
}

const scalarText = z.union([z.string(), z.number(), z.boolean()]);

/** From a YAML value. Strictly typed: `port: "6443"` is fine, `port: [1]` is not. */
export function parseYamlValue(setting: Setting, value: unknown): unknown {
  const wrong = (): never => {
    throw new ValueError(expectedType(setting), `expected ${expectedType(setting)}, got ${describeValue(value)}`);
  };
  switch (setting.type) {
    case 'bool':
      if (typeof value === 'boolean') return value;
      return wrong();
    case 'port':
      if (typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= 65535) return value;
      if (typeof value === 'string') return parseText(setting, value);
      return wrong();
    case 'count':
      if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 1) return value;
      if (typeof value === 'string') return parseText(setting, value);
      return wrong();
    case 'percent':
      if (typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= 100) return value;
      if (typeof value === 'string') return parseText(setting, value);
      return wrong();
    case 'duration':
      if (typeof value !== 'string') return wrong();
      return parseText(setting, value);
    case 'string':
    case 'enum':
      if (!scalarText.safeParse(value).success || typeof value === 'boolean') return wrong();
      return parseText(setting, String(value));
    case 'list':
    case 'labels':
    case 'taints': {
      const items = typeof value === 'string' ? [value] : value;
      if (!Array.isArray(items) || !items.every((i) => typeof i === 'string')) return wrong();
      return (items as string[]).map((item) => parseItem(setting, item));
    }
  }
}

/** How a value prints in `config show`, in errors, and in the cluster record. */
export function formatValue(setting: Setting, value: unknown): string {
  if (value === undefined) return '(unset)';
  if (setting.secret) return '[redacted]';
  switch (setting.type) {
    case 'duration':
      return formatDuration(value as number);
    case 'labels':
      return (value as NodeLabel[]).map((l) => `${l.key}=${l.value}`).join(',') || '[]';
    case 'taints':
      return (value as Taint[]).map((t) => `${t.key}${t.value ? `=${t.value}` : ''}:${t.effect}`).join(',') || '[]';
    case 'list':
      return (value as string[]).join(',') || '[]';
    default:
      return String(value);
  }
}

/** Levenshtein distance, for "did you mean". */
export function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let previous = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const current = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, previous + (a[i - 1] === b[j - 1] ? 0 : 1));
      previous = current;
    }
  }
  return row[b.length]!;
}

export function suggest(name: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of candidates) {
    const distance = editDistance(name, candidate);
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best !== undefined && bestDistance <= Math.max(2, Math.floor(name.length / 3)) ? best : undefined;
}
