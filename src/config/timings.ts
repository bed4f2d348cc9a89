import { formatDuration } from './duration.js';

/**
 * The rules that tie the cluster's failure timings together, in one place: the CLI checks them
 * on the resolved config, `drover cluster config set` on the cluster record, and the server once
 * more on its options. Each problem names every key involved, with a source label when known.
 */

export interface ClusterTimingValues {
  renewMs: number;
  graceMs: number;
  fencingMs: number;
}

export type TimingKey = 'node-lease-renew-interval' | 'node-monitor-grace-period' | 'fencing-timeout';

export function timingProblems(values: ClusterTimingValues, sourceOf: (key: TimingKey) => string = () => ''): string[] {
  const named = (key: TimingKey, ms: number): string => {
    const source = sourceOf(key);
    return `${key} (${formatDuration(ms)}${source ? `, ${source}` : ''})`;
  };
  const { renewMs, graceMs, fencingMs } = values;
  if (!(renewMs > 0)) return [`node-lease-renew-interval must be positive${sourceOf('node-lease-renew-interval') ? ` (${sourceOf('node-lease-renew-interval')})` : ''}`];
  const problems: string[] = [];
  if (graceMs < 3 * renewMs) {
    problems.push(
      `${named('node-monitor-grace-period', graceMs)} must be at least 3 × ${named('node-lease-renew-interval', renewMs)}, so that one or two late renewals never mark a node lost`,
    );
  }
  if (fencingMs < 2 * renewMs) {
    problems.push(
      `${named('fencing-timeout', fencingMs)} must be at least 2 × ${named('node-lease-renew-interval', renewMs)}, so that one late renewal never stops a singleton`,
    );
  }
  if (fencingMs >= graceMs) {
    problems.push(
      `${named('fencing-timeout', fencingMs)} must be shorter than ${named('node-monitor-grace-period', graceMs)}: a node must have stopped its singletons before it is declared lost`,
    );
  }
  return problems;
}
