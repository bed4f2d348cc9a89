import { errors } from './errors.js';

/**
 * Label and field selectors in the Kubernetes query syntax. The server must filter: kubectl
 * sends `?labelSelector=` and `?fieldSelector=` and prints whatever comes back.
 */

export type LabelRequirement =
  | { key: string; op: 'eq' | 'neq'; value: string }
  | { key: string; op: 'in' | 'notin'; values: string[] }
  | { key: string; op: 'exists' | 'notexists' };

export type LabelSelector = LabelRequirement[];

export function parseLabelSelector(text: string | null | undefined): LabelSelector {
  if (!text || !text.trim()) return [];
  const requirements: LabelSelector = [];
  let pos = 0;
  const fail = (why: string): never => {
    throw errors.badRequest(`unable to parse requirement: invalid label selector "${text}": ${why}`);
  };
  const skipSpace = (): void => {
    while (pos < text.length && text[pos] === ' ') pos++;
  };
  const readWord = (): string => {
    skipSpace();
    const start = pos;
    while (pos < text.length && !' ,()=!'.includes(text[pos]!)) pos++;
    return text.slice(start, pos);
  };
  while (pos < text.length) {
    skipSpace();
    if (text[pos] === '!') {
      pos++;
      const key = readWord();
      if (!key) fail('missing key after "!"');
      requirements.push({ key, op: 'notexists' });
    } else {
      const key = readWord();
      if (!key) fail(`expected a key at position ${pos}`);
      skipSpace();
      if (text.startsWith('!=', pos)) {
        pos += 2;
        requirements.push({ key, op: 'neq', value: readWord() });
      } else if (text.startsWith('==', pos)) {
        pos += 2;
        requirements.push({ key, op: 'eq', value: readWord() });
      } else if (text[pos] === '=') {
        pos += 1;
        requirements.push({ key, op: 'eq', value: readWord() });
      } else if (text.startsWith('in ', pos) || text.startsWith('in(', pos)) {
        pos += 2;
        requirements.push({ key, op: 'in', values: readSet() });
      } else if (text.startsWith('notin ', pos) || text.startsWith('notin(', pos)) {
        pos += 5;
        requirements.push({ key, op: 'notin', values: readSet() });
      } else {
        requirements.push({ key, op: 'exists' });
      }
    }
    skipSpace();
    if (pos < text.length) {
      if (text[pos] !== ',') fail(`unexpected "${text[pos]}" at position ${pos}`);
      pos++;
    }
  }
  return requirements;

  function readSet(): string[] {
    skipSpace();
    if (text![pos] !== '(') fail('expected "(" after set operator');
    pos++;
    const values: string[] = [];
    for (;;) {
      values.push(readWord());
      skipSpace();
      if (text![pos] === ',') {
        pos++;
        continue;
      }
      if (text![pos] === ')') {
        pos++;
        return values;
      }
      fail('unterminated set: expected ")"');
    }
  }
}

export function matchesLabels(
  selector: LabelSelector,
  labels: Readonly<Record<string, string>> | undefined,
): boolean {
  for (const req of selector) {
    const value = labels?.[req.key];
    switch (req.op) {
      case 'eq':
        if (value !== req.value) return false;
        break;
      case 'neq':
        if (value === req.value) return false;
        break;
      case 'in':
        if (value === undefined || !req.values.includes(value)) return false;
        break;
      case 'notin':
        if (value !== undefined && req.values.includes(value)) return false;
        break;
      case 'exists':
        if (value === undefined) return false;
        break;
      case 'notexists':
        if (value !== undefined) return false;
        break;
    }
  }
  return true;
}

export interface FieldRequirement {
  field: string;
  op: 'eq' | 'neq';
  value: string;
}

export type FieldSelector = FieldRequirement[];

/** Splits on unescaped commas; `\,` `\=` `\\` escape as in Kubernetes' fields package. */
function splitEscaped(text: string, separator: string): string[] {
  const parts: string[] = [];
  let current = '';
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (ch === '\\' && i + 1 < text.length) {
      current += ch + text[i + 1];
      i++;
    } else if (ch === separator) {
      parts.push(current);
      current = '';
    } else {
      current += ch;
    }
  }
  parts.push(current);
  return parts;
}

function unescape(text: string): string {
  return text.replace(/\\(.)/g, '$1');
}

export function parseFieldSelector(
  text: string | null | undefined,
  supported: ReadonlySet<string>,
  resourceLabel: string,
): FieldSelector {
  if (!text || !text.trim()) return [];
  const requirements: FieldSelector = [];
  for (const part of splitEscaped(text, ',')) {
    if (!part.trim()) continue;
    const match = /^(.*?)(!=|==|=)(.*)$/s.exec(part);
    if (!match) throw errors.badRequest(`invalid selector: '${text}'; can't understand '${part}'`);
    const field = match[1]!.trim();
    if (!supported.has(field)) {
      throw errors.badRequest(`field label not supported: ${field} (for ${resourceLabel})`);
    }
    requirements.push({ field, op: match[2] === '!=' ? 'neq' : 'eq', value: unescape(match[3]!) });
  }
  return requirements;
}

export function matchesFields(selector: FieldSelector, fields: (field: string) => string): boolean {
  for (const req of selector) {
    const value = fields(req.field);
    if (req.op === 'eq' ? value !== req.value : value === req.value) return false;
  }
  return true;
}

/** A metav1.LabelSelector as written in objects (`spec.selector` of workloads). */
export interface LabelSelectorObject {
  matchLabels?: Record<string, string>;
  matchExpressions?: { key: string; operator: string; values?: string[] }[];
}

const EXPRESSION_OPS: Record<string, 'in' | 'notin' | 'exists' | 'notexists'> = {
  In: 'in',
  NotIn: 'notin',
  Exists: 'exists',
  DoesNotExist: 'notexists',
};

/**
 * The requirements of a LabelSelector object, sorted by key as Kubernetes' LabelSelectorAsSelector
 * sorts them. Unknown operators are dropped (validation reports them where objects are written).
 */
export function labelSelectorFromObject(selector: LabelSelectorObject | undefined): LabelSelector {
  const requirements: LabelSelector = [];
  for (const [key, value] of Object.entries(selector?.matchLabels ?? {})) {
    requirements.push({ key, op: 'eq', value: String(value) });
  }
  for (const expression of selector?.matchExpressions ?? []) {
    const op = EXPRESSION_OPS[expression.operator];
    if (!op) continue;
    if (op === 'in' || op === 'notin') {
      requirements.push({ key: expression.key, op, values: [...(expression.values ?? [])].map(String).sort() });
    } else {
      requirements.push({ key: expression.key, op });
    }
  }
  return requirements.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/** The query-string form (`app=web,tier in (a,b)`), as Kubernetes' labels.Selector prints it. */
export function formatLabelSelector(selector: LabelSelector): string {
  return selector
    .map((req) => {
      switch (req.op) {
        case 'eq':
          return `${req.key}=${req.value}`;
        case 'neq':
          return `${req.key}!=${req.value}`;
        case 'in':
          return `${req.key} in (${req.values.join(',')})`;
        case 'notin':
          return `${req.key} notin (${req.values.join(',')})`;
        case 'exists':
          return req.key;
        case 'notexists':
          return `!${req.key}`;
      }
    })
    .join(',');
}
