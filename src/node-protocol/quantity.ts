/**
 * Kubernetes resource quantities (`100m`, `0.5`, `256Mi`, `1G`, `1e3`), as the API writes
 * requests, limits, overhead, capacity and allocatable, read into plain numbers of the base unit
 * (cores, bytes, pods). The grammar is apimachinery's Quantity: a signed decimal number, then
 * either a binary suffix (Ki … Ei), a decimal suffix (n u m "" k M G T P E) or a decimal exponent
 * (e3, E-2). Doubles hold every value a node or pod can have exactly enough: a byte count stays
 * exact up to 8 PiB.
 */

export class QuantityError extends Error {
  override name = 'QuantityError';
}

const SUFFIXES: Readonly<Record<string, number>> = {
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
  // The small ones divide (below): 100 * 1e-9 is not exactly 1e-7 in doubles, 100 / 1e9 is.
  n: -1e9,
  u: -1e6,
  m: -1e3,
  '': 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
};

// An exponent needs digits after its e/E, so a lone trailing `E` is the exa suffix, as in Go.
const QUANTITY = /^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$/;

/** The quantity's value in its base unit; a QuantityError says why a text is not one. */
export function parseQuantity(text: string): number {
  if (typeof text !== 'string') throw new QuantityError(`quantities must be strings (got ${JSON.stringify(text)})`);
  const match = QUANTITY.exec(text);
  if (!match) {
    throw new QuantityError(`quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'`);
  }
  const number = Number(match[1]);
  if (match[2]) return Number(`${match[1]}${match[2]}`);
  const scale = SUFFIXES[match[3] ?? '']!;
  return scale < 0 ? number / -scale : number * scale;
}

/** A JSON value that is a quantity: a string in the grammar, or a number (the API accepts both). */
export function quantityValue(value: unknown): number {
  if (typeof value === 'number' && Number.isFinite(value)) return value;
  return parseQuantity(value as string);
}

/** CPU in whole millicores, rounded up as Kubernetes' MilliValue() does. */
export function milliCpu(value: unknown): number {
  return Math.ceil(quantityValue(value) * 1000 - 1e-9);
}

/** A count of bytes (or pods), rounded up to a whole number as Kubernetes' Value() does. */
export function wholeValue(value: unknown): number {
  return Math.ceil(quantityValue(value) - 1e-9);
}

/** CPU as Kubernetes prints a milli value: `2` for whole cores, else `1500m`. */
export function formatMilliCpu(millicores: number): string {
  const m = Math.max(0, Math.round(millicores));
  return m % 1000 === 0 ? String(m / 1000) : `${m}m`;
}

/** Bytes as kubelet reports memory: `Ki` when they divide evenly, else plain bytes. */
export function formatBytes(bytes: number): string {
  const b = Math.max(0, Math.floor(bytes));
  return b % 1024 === 0 ? `${b / 1024}Ki` : String(b);
}
