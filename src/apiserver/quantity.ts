/**
 * Kubernetes resource quantities (`500m`, `1.5`, `64Mi`, `1e3`, `2G`) as numbers: enough for
 * CPU (millicores) and memory (bytes) requests and limits. Written from the documented format:
 * a signed decimal number followed by a binary-SI suffix (Ki…Ei), a decimal-SI suffix (n u m k M
 * G T P E) or a decimal exponent (e3, E-2).
 */

const BINARY: Record<string, number> = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };
const DECIMAL: Record<string, number> = { n: 1e-9, u: 1e-6, m: 1e-3, '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18 };
const FORM = /^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$/;

export class QuantityError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'QuantityError';
  }
}

/** The quantity's value in base units, or undefined when it is not a quantity. */
export function parseQuantity(value: unknown): number | undefined {
  if (typeof value === 'number') return Number.isFinite(value) ? value : undefined;
  if (typeof value !== 'string' || value.length === 0 || value.length > 64) return undefined;
  const match = FORM.exec(value);
  if (!match) return undefined;
  const number = Number(match[1]);
  const suffix = match[2] ?? '';
  let factor: number;
  if (suffix in BINARY) factor = BINARY[suffix]!;
  else if (suffix in DECIMAL) factor = DECIMAL[suffix]!;
  else factor = 10 ** Number(suffix.slice(1));
  const result = number * factor;
  return Number.isFinite(result) ? result : undefined;
}

/** CPU in millicores, rounded up as Kubernetes rounds a quantity to its milli-value. */
export function cpuMillis(value: unknown): number | undefined {
  const cores = parseQuantity(value);
  return cores === undefined ? undefined : Math.ceil(Math.round(cores * 1e9) / 1e6);
}

/** Memory (or any byte quantity) in whole bytes, rounded up. */
export function bytesOf(value: unknown): number | undefined {
  const bytes = parseQuantity(value);
  return bytes === undefined ? undefined : Math.ceil(bytes);
}
