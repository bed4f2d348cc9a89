/**
 * The singleton's journal for bench/failover.ts: each copy of a singleton appends
 * "<its pod uid> <host uptime in seconds>" to a shared file every ~50 ms, and this reads back
 * when each copy wrote first and last and whether two copies ever wrote at the same time.
 *
 * The host's uptime (/proc/uptime, CLOCK_BOOTTIME, 10 ms resolution) is the clock because it is
 * the same inside a runc container (no time namespace) and in a process pod, and busybox's `date`
 * has no milliseconds. `bootEpochMs()` turns it into wall time for the trial records.
 */
import fs from 'node:fs';

export interface Copy {
  uid: string;
  /** Wall-clock ms (uptime + the boot epoch), first and last write. */
  firstMs: number;
  lastMs: number;
  lines: number;
}

/** Date.now() minus the host's uptime: wall ms of an uptime reading is `uptimeMs + bootEpochMs()`. */
export function bootEpochMs(): number {
  const uptime = Number(fs.readFileSync('/proc/uptime', 'utf8').split(' ')[0]);
  return Date.now() - Math.round(uptime * 1000);
}

/** A shell loop that appends "<$POD_UID> <uptime>" to `file` every 50 ms (busybox or host sh). */
export function journalScript(file: string): string {
  // The file path has no characters the shell would interpret (mkdtemp names are [A-Za-z0-9]).
  return `while :; do echo "$POD_UID $(cut -d' ' -f1 /proc/uptime)" >> ${file}; sleep 0.05; done`;
}

/** Each copy of the singleton (by uid) with its first and last write, in order of first write. */
export function readCopies(file: string, bootMs: number): { copies: Copy[]; malformed: number } {
  let text = '';
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch {
    return { copies: [], malformed: 0 };
  }
  const byUid = new Map<string, Copy>();
  let malformed = 0;
  for (const line of text.split('\n')) {
    if (!line) continue;
    const match = /^(\S+) (\d+\.\d+)$/.exec(line);
    if (!match) {
      malformed++;
      continue;
    }
    const uid = match[1]!;
    const ms = Math.round(Number(match[2]) * 1000) + bootMs;
    const copy = byUid.get(uid);
    if (!copy) byUid.set(uid, { uid, firstMs: ms, lastMs: ms, lines: 1 });
    else {
      copy.firstMs = Math.min(copy.firstMs, ms);
      copy.lastMs = Math.max(copy.lastMs, ms);
      copy.lines++;
    }
  }
  return { copies: [...byUid.values()].sort((a, b) => a.firstMs - b.firstMs), malformed };
}

export interface OverlapReport {
  copies: number;
  malformedLines: number;
  /** The longest time two copies both wrote, over every pair (must be 0). */
  maxOverlapMs: number;
  /** Successive copies: the shortest silence between the old one's last write and the new one's first. */
  minGapMs: number | null;
  pairs: { oldUid: string; newUid: string; overlapMs: number; gapMs: number }[];
}

export function overlapReport(file: string, bootMs: number): OverlapReport {
  const { copies, malformed } = readCopies(file, bootMs);
  let maxOverlapMs = 0;
  for (let i = 0; i < copies.length; i++) {
    for (let j = i + 1; j < copies.length; j++) {
      const a = copies[i]!;
      const b = copies[j]!;
      maxOverlapMs = Math.max(maxOverlapMs, Math.min(a.lastMs, b.lastMs) - Math.max(a.firstMs, b.firstMs));
    }
  }
  const pairs = copies.slice(1).map((next, i) => {
    const prev = copies[i]!;
    return { oldUid: prev.uid, newUid: next.uid, overlapMs: Math.max(0, prev.lastMs - next.firstMs), gapMs: next.firstMs - prev.lastMs };
  });
  return {
    copies: copies.length,
    malformedLines: malformed,
    maxOverlapMs,
    minGapMs: pairs.length ? Math.min(...pairs.map((p) => p.gapMs)) : null,
    pairs,
  };
}
