import { Cron } from 'croner';

/** Croner, paused: occurrences only, in the report's time zone (DST handled by croner). */
export function reportCron(expr: string, timezone: string): Cron {
  return new Cron(expr, { timezone, paused: true });
}

/** Why a cron and zone cannot schedule a report, or null: unparsable, unknown zone, or never fires. */
export function cronProblem(expr: string, timezone: string, now: Date): string | null {
  const fields = expr.trim().split(/\s+/).length;
  if (fields !== 5 && fields !== 6) return `expected 5 fields (minute hour day month weekday), or 6 with seconds first; got ${fields}`;
  try {
    new Intl.DateTimeFormat('en', { timeZone: timezone });
  } catch {
    return `unknown time zone ${JSON.stringify(timezone)}`;
  }
  try {
    const next = reportCron(expr, timezone).nextRun(now);
    if (!next) return 'this cron never fires';
  } catch (err) {
    return (err as Error).message;
  }
  return null;
}

/**
 * Occurrences in (since, now], oldest first, at most `cap` (the newest ones). A report sends
 * only the newest; the older ones were missed while no replica ran and are recorded as
 * coalesced, so recovery sends one report, not one per missed occurrence.
 */
export function occurrencesBetween(expr: string, timezone: string, since: Date, now: Date, cap = 100): Date[] {
  const cron = reportCron(expr, timezone);
  const out: Date[] = [];
  let t: Date | null = since;
  for (let i = 0; i < 100_000; i++) {
    t = cron.nextRun(t);
    if (!t || t.getTime() > now.getTime()) break;
    out.push(t);
    if (out.length > cap) out.shift();
  }
  return out;
}

/** The occurrence before `occurrence` (the start of an error digest's period). */
export function previousOccurrence(expr: string, timezone: string, occurrence: Date): Date | null {
  return reportCron(expr, timezone).previousRuns(1, occurrence)[0] ?? null;
}
