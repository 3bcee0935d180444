import { Cron } from 'croner';

/**
 * A test plan's cron in its time zone. `check` rejects an expression or zone croner cannot read
 * and a cron that never fires (e.g. 30 February); `after` is the first occurrence strictly after t.
 */
export function nextOccurrence(cron: string, timezone: string, afterMs: number): Date | null {
  const c = new Cron(cron, { timezone, paused: true });
  return c.nextRun(new Date(afterMs));
}

/**
 * The closest two firings of a cron, over its next `runs` occurrences from `afterMs` (enough to
 * see every pattern of a minute/hour/day field; a cron that fires faster than the floor anywhere
 * in them is refused).
 */
export function closestFirings(cron: string, timezone: string, afterMs: number, runs = 400): number | null {
  const c = new Cron(cron, { timezone, paused: true });
  const times = c.nextRuns(runs, new Date(afterMs)).map((d) => d.getTime());
  let min: number | null = null;
  for (let i = 1; i < times.length; i++) min = Math.min(min ?? Infinity, times[i]! - times[i - 1]!);
  return min;
}

/**
 * `minIntervalMs` is the floor account tests share with channel monitors (`channel_monitor.min_interval`):
 * a plan spends a real upstream completion with the account's token every time it fires.
 */
export function checkPlanSchedule(cron: string, timezone: string, nowMs: number, minIntervalMs = 0): { field: 'cron' | 'timezone'; message: string } | null {
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
  const gap = minIntervalMs > 0 ? closestFirings(cron, timezone, nowMs) : null;
  if (gap !== null && gap < minIntervalMs)
    return {
      field: 'cron',
      message: `cron ${JSON.stringify(cron)} fires ${gap / 1000}s apart at its closest: account tests must be at least ${minIntervalMs / 1000}s apart (channel_monitor.min_interval)`,
    };
  return null;
}
