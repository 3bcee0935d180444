import { Cron } from 'croner';

/**
 * A test plan's cron in its time zone. `check` rejects an expression or zone croner cannot read
 * and a cron that never fires (e.g. 30 February); `after` is the first occurrence strictly after t.
 */
export function nextOccurrence(cron: string, timezone: string, afterMs: number): Date | null {
  const c = new Cron(cron, { timezone, paused: true });
  return c.nextRun(new Date(afterMs));
}

export function checkPlanSchedule(cron: string, timezone: string, nowMs: number): { field: 'cron' | 'timezone'; message: string } | null {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: timezone });
  } catch {
    return { field: 'timezone', message: `unknown time zone ${JSON.stringify(timezone)} (expected an IANA name such as UTC or Asia/Shanghai)` };
  }
  let next: Date | null;
  try {
    next = nextOccurrence(cron, timezone, nowMs);
  } catch (err) {
    return { field: 'cron', message: `not a cron expression: ${(err as Error).message}` };
  }
  if (!next) return { field: 'cron', message: `cron ${JSON.stringify(cron)} never fires` };
  return null;
}
