import { Cron } from 'croner';
import { cronZone, isKnownTimeZone } from '../../time/zones.js';

/** Croner, paused: occurrences only, in the report's time zone (DST handled by croner). */
export function reportCron(expr: string, timezone: string): Cron {
  return new Cron(expr, { ...cronZone(timezone), paused: true });
}

/** Why a cron and zone cannot schedule a report, or null: unparsable, unknown zone, or never fires. */
export function cronProblem(expr: string, timezone: string, now: Date): string | null {
  const fields = expr.trim().split(/\s+/).length;
  if (fields !== 5 && fields !== 6) return `expected 5 fields (minute hour day month weekday), or 6 with seconds first; got ${fields}`;
  if (!isKnownTimeZone(timezone)) return `unknown time zone ${JSON.stringify(timezone)}`;
  try {
    const next = reportCron(expr, timezone).nextRun(now);
    if (!next) return 'this cron never fires';
  } catch (err) {
    return (err as Error).message;
  }
  return null;
}

/**
 * Occurrences in (since, now], oldest first, the last one the newest. Only the newest is sent;
 * the older ones were missed while no replica ran and are recorded as coalesced (at most
 * `cap` − 1 of them, the oldest), so recovery sends one report, not one per missed occurrence.
 * The newest is found directly (croner's previous run), however long the downtime was.
 */
export function occurrencesBetween(expr: string, timezone: string, since: Date, now: Date, cap = 100): Date[] {
  const cron = reportCron(expr, timezone);
  const newest = cron.previousRuns(1, new Date(now.getTime() + 1))[0];
  if (!newest || newest.getTime() <= since.getTime()) return [];
  const missed: Date[] = [];
  for (let t: Date | null = since; missed.length < cap - 1;) {
    t = cron.nextRun(t);
    if (!t || t.getTime() >= newest.getTime()) break;
    missed.push(t);
  }
  return [...missed, newest];
}

/** The next `n` occurrences after `from`. */
export function nextOccurrences(expr: string, timezone: string, from: Date, n: number): Date[] {
  return reportCron(expr, timezone).nextRuns(n, from);
}

/** The occurrence before `occurrence` (the start of an error digest's period). */
export function previousOccurrence(expr: string, timezone: string, occurrence: Date): Date | null {
  return reportCron(expr, timezone).previousRuns(1, occurrence)[0] ?? null;
}
