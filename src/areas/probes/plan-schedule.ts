import { Cron } from 'croner';
import { cronZone, isKnownTimeZone } from '../../time/zones.js';
import { spreadPhase } from './store/monitors.js';

/**
 * A test plan's cron in its time zone. `check` rejects an expression or zone croner cannot read
 * and a cron that never fires (e.g. 30 February); `after` is the first occurrence strictly after t.
 */
export function nextOccurrence(cron: string, timezone: string, afterMs: number): Date | null {
  const c = new Cron(cron, { ...cronZone(timezone), paused: true });
  return c.nextRun(new Date(afterMs));
}

/**
 * The closest two firings of a cron, over its next `runs` occurrences from `afterMs` (enough to
 * see every pattern of a minute/hour/day field; a cron that fires faster than the floor anywhere
 * in them is refused).
 */
export function closestFirings(cron: string, timezone: string, afterMs: number, runs = 400): number | null {
  const c = new Cron(cron, { ...cronZone(timezone), paused: true });
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
  if (!isKnownTimeZone(timezone)) return { field: 'timezone', message: `unknown time zone ${JSON.stringify(timezone)} (expected an IANA name such as UTC or Asia/Shanghai)` };
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

/**
 * A plan's phase slots (issue 24, as monitors spread): each cron firing `c` moves later by
 * `spreadPhase(plan id, gap)`, `gap` being the time to the firing after `c`. The phase is stable
 * (the same on every replica) and below the gap, so slots keep the cron's order and N plans of
 * one cron fire at N evenly spaced instants over its interval instead of all at `c`.
 */
export interface PlanSlot {
  slotMs: number;
  /** The interval the slot belongs to (0: the cron's last firing). */
  gapMs: number;
}

/**
 * A plan's phase is spread over its interval, but over five minutes at most: a plan written
 * `0 3 * * *` means "around 03:00", so a daily plan runs between 03:00 and 03:05, never at noon.
 */
export const PLAN_SPREAD_MAX_MS = 5 * 60_000;

function slotOf(id: number, c: Cron, firingMs: number): PlanSlot {
  const next = c.nextRun(new Date(firingMs));
  const gapMs = next ? next.getTime() - firingMs : 0;
  return { slotMs: firingMs + (gapMs > 0 ? spreadPhase(id, Math.min(gapMs, PLAN_SPREAD_MAX_MS)) : 0), gapMs };
}

/** The first slot of plan `id` at or after `atMs` (null: the cron never fires again). */
export function nextPlanSlot(id: number, cron: string, timezone: string, atMs: number): PlanSlot | null {
  const c = new Cron(cron, { ...cronZone(timezone), paused: true });
  // A slot precedes the next firing, so only the firing at or before atMs, and those after it, can qualify.
  let firing: Date | null = c.previousRuns(1, new Date(atMs + 1))[0] ?? c.nextRun(new Date(atMs));
  for (let i = 0; firing && i < 3; i++) {
    const s = slotOf(id, c, firing.getTime());
    if (s.slotMs >= atMs) return s;
    firing = c.nextRun(firing);
  }
  return null;
}

/** The latest slot of plan `id` at or before `atMs` (null: none). */
export function latestPlanSlot(id: number, cron: string, timezone: string, atMs: number): PlanSlot | null {
  const c = new Cron(cron, { ...cronZone(timezone), paused: true });
  for (const firing of c.previousRuns(2, new Date(atMs + 1))) {
    const s = slotOf(id, c, firing.getTime());
    if (s.slotMs <= atMs) return s;
  }
  return null;
}

/** What a claimed plan does: test `slotMs` (its latest slot passed, or the immediate test), or skip; and the slots missed before. */
export type PlanPlacement = { run: true; slotMs: number; missed: number } | { run: false; missed: number; nextMs: number | null };

/**
 * Places a claim made at `claimedAtMs` (database time) of a plan due at `dueMs`. The immediate
 * test of a create or edit runs whatever its delay. Otherwise the latest slot passed is tested
 * if it is at most half its interval late; else it is skipped too (a test now would crowd the
 * next slot), so two tests of one plan are never closer than half an interval. Slots passed
 * unrun are counted as missed.
 */
export function placeClaim(p: { id: number; cron: string; timezone: string; dueMs: number; dueNow: boolean; claimedAtMs: number }): PlanPlacement {
  if (p.dueNow) return { run: true, slotMs: p.dueMs, missed: 0 };
  const latest = latestPlanSlot(p.id, p.cron, p.timezone, p.claimedAtMs);
  if (!latest || latest.slotMs < p.dueMs) return { run: true, slotMs: p.dueMs, missed: 0 };
  const missed = countSlots(p, p.dueMs, latest.slotMs);
  if (latest.gapMs > 0 && p.claimedAtMs - latest.slotMs > latest.gapMs / 2) {
    return { run: false, missed: missed + 1, nextMs: nextPlanSlot(p.id, p.cron, p.timezone, p.claimedAtMs + 1)?.slotMs ?? null };
  }
  return { run: true, slotMs: latest.slotMs, missed };
}

/** Slots in [fromMs, toMs): counted one by one up to a bound, then estimated from the interval (a long outage of a per-second cron). */
function countSlots(p: { id: number; cron: string; timezone: string }, fromMs: number, toMs: number): number {
  let n = 0;
  let at = fromMs;
  while (n < 1000) {
    const s = nextPlanSlot(p.id, p.cron, p.timezone, at);
    if (!s || s.slotMs >= toMs) return n;
    n++;
    at = s.slotMs + 1;
    if (n === 1000 && s.gapMs > 0) return n + Math.floor((toMs - at) / s.gapMs);
  }
  return n;
}

/** Half the plan's interval after `atMs`: where the first phase slot after an immediate test may fall at the earliest. */
export function halfIntervalAfter(cron: string, timezone: string, atMs: number): number {
  const c = new Cron(cron, { ...cronZone(timezone), paused: true });
  const [a, b] = c.nextRuns(2, new Date(atMs));
  return a && b ? Math.ceil((b.getTime() - a.getTime()) / 2) : 0;
}
