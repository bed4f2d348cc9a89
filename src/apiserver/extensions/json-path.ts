import { isJsonObject } from '../json.js';

/**
 * The JSONPath subset additionalPrinterColumns use in practice: field steps (`.spec.replicas`,
 * `['a.b']`), indexes (`[0]`), `[*]`, and the equality filter charts use for conditions
 * (`.status.conditions[?(@.type=="Ready")].status`). Anything else is refused when the CRD is
 * written (docs/api.md says so), rather than printed wrong.
 */

type Step =
  | { type: 'field'; name: string }
  | { type: 'index'; index: number }
  | { type: 'all' }
  | { type: 'filter'; path: string[]; value: string };

/** `{.spec.x}` is also accepted, as kubectl's custom-columns write it. */
function strip(expression: string): string {
  const trimmed = expression.trim();
  return trimmed.startsWith('{') && trimmed.endsWith('}') ? trimmed.slice(1, -1) : trimmed;
}

export function parseJsonPath(expression: string): Step[] {
  const text = strip(expression);
  const steps: Step[] = [];
  let i = 0;
  if (text[0] !== '.' && text[0] !== '[') throw new Error('must start with "." or "["');
  while (i < text.length) {
    if (text[i] === '.') {
      const match = /^\.([A-Za-z0-9_-]+)/.exec(text.slice(i));
      if (!match) throw new Error(`expected a field name at offset ${i}`);
      steps.push({ type: 'field', name: match[1]! });
      i += match[0].length;
      continue;
    }
    const rest = text.slice(i);
    let match = /^\[(\d+)\]/.exec(rest);
    if (match) {
      steps.push({ type: 'index', index: Number(match[1]) });
      i += match[0].length;
      continue;
    }
    match = /^\[\*\]/.exec(rest);
    if (match) {
      steps.push({ type: 'all' });
      i += match[0].length;
      continue;
    }
    match = /^\['([^']+)'\]/.exec(rest);
    if (match) {
      steps.push({ type: 'field', name: match[1]! });
      i += match[0].length;
      continue;
    }
    match = /^\[\?\(@((?:\.[A-Za-z0-9_-]+)+)\s*==\s*(?:"([^"]*)"|'([^']*)')\)\]/.exec(rest);
    if (match) {
      steps.push({ type: 'filter', path: match[1]!.slice(1).split('.'), value: match[2] ?? match[3] ?? '' });
      i += match[0].length;
      continue;
    }
    throw new Error(`unsupported JSONPath at offset ${i} (Drover supports field steps, [n], [*] and [?(@.field=="value")])`);
  }
  return steps;
}

export function jsonPathProblem(expression: string): string | undefined {
  try {
    parseJsonPath(expression);
    return undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

/** Every value the path reaches (none when it reaches nothing). */
export function evaluateJsonPath(steps: readonly Step[], root: unknown): unknown[] {
  let values: unknown[] = [root];
  for (const step of steps) {
    const next: unknown[] = [];
    for (const value of values) {
      if (step.type === 'field') {
        if (isJsonObject(value) && value[step.name] !== undefined) next.push(value[step.name]);
      } else if (step.type === 'index') {
        if (Array.isArray(value) && step.index < value.length) next.push(value[step.index]);
      } else if (step.type === 'all') {
        if (Array.isArray(value)) next.push(...value);
        else if (isJsonObject(value)) next.push(...Object.values(value));
      } else if (Array.isArray(value)) {
        for (const item of value) {
          let field: unknown = item;
          for (const key of step.path) field = isJsonObject(field) ? field[key] : undefined;
          if (field !== undefined && String(field) === step.value) next.push(item);
        }
      }
    }
    values = next;
  }
  return values;
}
