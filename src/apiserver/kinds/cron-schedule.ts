import { CronExpressionParser } from 'cron-parser';

/**
 * CronJob schedules: the standard five-field cron syntax and the `@hourly`-style descriptors kube
 * accepts (robfig/cron's standard parser), read by cron-parser, in a time zone. Shared by the API's
 * validation and the CronJob controller, so a schedule the API accepted always parses.
 */

const DESCRIPTORS: Readonly<Record<string, string>> = {
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *',
};

export class ScheduleError extends Error {}

/** A parsed schedule: the times it fires, in its zone. */
export interface Schedule {
  /** The first firing time strictly after `afterMs`. */
  next(afterMs: number): number;
  /** The last firing time at or before `atMs`, if any after `floorMs` (exclusive); and how many fired in (floorMs, atMs]. */
  mostRecent(floorMs: number, atMs: number, limit?: number): { time: number | undefined; missed: number };
}

/** Validates a time zone as kube does: an IANA name, not `Local`. */
export function timeZoneProblem(timeZone: string): string | undefined {
  if (timeZone.trim() === '' || timeZone.toLowerCase() === 'local') {
    return 'timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones';
  }
  try {
    new Intl.DateTimeFormat('en-US', { timeZone });
    return undefined;
  } catch {
    return `unknown time zone ${timeZone}`;
  }
}

/** Five fields (minute hour day-of-month month day-of-week) or a descriptor; throws ScheduleError. */
export function parseSchedule(schedule: string, timeZone?: string): Schedule {
  const text = schedule.trim();
  if (/^(CRON_)?TZ=/.test(text)) throw new ScheduleError('cannot use TZ or CRON_TZ in schedule, use timeZone field instead');
  let expression: string;
  if (text.startsWith('@')) {
    const mapped = DESCRIPTORS[text.toLowerCase()];
    if (!mapped) throw new ScheduleError(`unrecognized descriptor: ${text}`);
    expression = mapped;
  } else {
    const fields = text.split(/\s+/);
    if (fields.length !== 5) throw new ScheduleError(`expected exactly 5 fields, found ${fields.length}: ${text}`);
    expression = fields.join(' ');
  }
  if (timeZone !== undefined) {
    const problem = timeZoneProblem(timeZone);
    if (problem) throw new ScheduleError(problem);
  }
  const tz = timeZone ?? 'UTC';
  const iterate = (fromMs: number) => {
    try {
      return CronExpressionParser.parse(expression, { currentDate: new Date(fromMs), tz });
    } catch (error) {
      throw new ScheduleError(error instanceof Error ? error.message : String(error));
    }
  };
  iterate(0); // parse errors now, not at the first use
  const next = (afterMs: number): number => iterate(afterMs).next().getTime();
  return {
    next,
    mostRecent(floorMs, atMs, limit = 100) {
      // Walk forward from the floor: kube's own way (getMostRecentScheduleTime), counting the misses.
      let time: number | undefined;
      let missed = 0;
      let t = next(floorMs);
      while (t <= atMs) {
        time = t;
        missed++;
        if (missed > limit) {
          // Too many to walk: jump to the last one before now.
          const previous = iterate(atMs + 1).prev().getTime();
          return { time: previous, missed };
        }
        t = next(t);
      }
      return { time, missed };
    },
  };
}
