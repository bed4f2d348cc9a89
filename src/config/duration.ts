/**
 * Durations as Kubernetes and Go write them: `500ms`, `4s`, `1m30s`, `1h`. A bare number is
 * refused rather than guessed at (seconds? milliseconds?).
 */

const UNITS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

export class DurationError extends Error {
  override name = 'DurationError';
}

/** Milliseconds in a Go duration string. */
export function parseDuration(text: string): number {
  const input = text.trim();
  if (input === '0') return 0;
  const pattern = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/y;
  let total = 0;
  let pos = 0;
  while (pos < input.length) {
    pattern.lastIndex = pos;
    const match = pattern.exec(input);
    if (!match) {
      throw new DurationError(
        `invalid duration "${text}": expected a number with a unit (ms, s, m, h), e.g. 500ms, 4s or 1m30s`,
      );
    }
    total += Number(match[1]) * UNITS[match[2]!]!;
    pos = pattern.lastIndex;
  }
  if (!input) throw new DurationError('invalid duration "": expected e.g. 500ms, 4s or 1m30s');
  return Math.round(total);
}

/** The shortest Go-style spelling of a duration in milliseconds: 1500 → `1.5s`, 90000 → `1m30s`. */
export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  if (ms < 1000) return `${ms}ms`;
  const hours = Math.floor(ms / 3_600_000);
  const minutes = Math.floor((ms % 3_600_000) / 60_000);
  const seconds = (ms % 60_000) / 1000;
  return `${hours ? `${hours}h` : ''}${minutes ? `${minutes}m` : ''}${seconds ? `${seconds}s` : ''}`;
}
