import { describe, expect, it } from 'vitest';
import { Schedule } from '../src/scheduler/schedule.js';
import { defaultOffset, resolveJobSettings, stableHash } from '../src/config/job-settings.js';

const T = (iso: string) => Date.parse(iso);

describe('Schedule', () => {
  it('aligns `every` slots to the wall clock', () => {
    const s = new Schedule({ kind: 'every', everyMs: 3_600_000 });
    expect(s.next(T('2026-01-01T10:20:00Z'))).toBe(T('2026-01-01T11:00:00Z'));
    expect(s.prev(T('2026-01-01T10:20:00Z'))).toBe(T('2026-01-01T10:00:00Z'));
    expect(s.next(T('2026-01-01T11:00:00Z'))).toBe(T('2026-01-01T12:00:00Z'));
    expect(s.prev(T('2026-01-01T11:00:00Z'))).toBe(T('2026-01-01T11:00:00Z'));
  });

  it('computes cron slots in the job time zone', () => {
    const s = new Schedule({ kind: 'cron', expr: '0 2 * * *', timezone: 'Asia/Shanghai' });
    // 02:00 in Shanghai is 18:00 UTC the day before.
    expect(new Date(s.next(T('2026-01-01T12:00:00Z'))).toISOString()).toBe('2026-01-01T18:00:00.000Z');
    expect(new Date(s.prev(T('2026-01-01T12:00:00Z'))).toISOString()).toBe('2025-12-31T18:00:00.000Z');
    expect(s.prev(T('2026-01-01T18:00:00Z'))).toBe(T('2026-01-01T18:00:00Z'));
    expect(s.periodAt(T('2026-01-01T12:00:00Z'))).toBe(86_400_000);
  });

  it('runs a missed slot once, late, and never replays older ones', () => {
    const s = new Schedule({ kind: 'every', everyMs: 60_000 });
    const now = T('2026-01-01T10:05:30Z');
    // Down since 10:00: five slots missed, only the latest runs.
    expect(s.target(now, T('2026-01-01T10:00:00Z'))).toEqual({ slot: T('2026-01-01T10:05:00Z'), late: true });
    // Latest slot already claimed: wait for the next one.
    expect(s.target(now, T('2026-01-01T10:05:00Z'))).toEqual({ slot: T('2026-01-01T10:06:00Z'), late: false });
  });

  it('starts a never-run `every` job at once but waits for a never-run cron job', () => {
    const now = T('2026-01-01T10:05:30Z');
    expect(new Schedule({ kind: 'every', everyMs: 60_000 }).target(now, null)).toEqual({ slot: T('2026-01-01T10:05:00Z'), late: true });
    expect(new Schedule({ kind: 'cron', expr: '0 2 * * *', timezone: 'UTC' }).target(now, null)).toEqual({ slot: T('2026-01-02T02:00:00Z'), late: false });
  });

  it('missed-slot policy: run_late runs the latest missed slot once; skip lets it go unless within the tolerance', () => {
    const s = new Schedule({ kind: 'every', everyMs: 1000 });
    const last = T('2026-01-01T10:00:00Z');
    // Back after 3.6 s: slots 01, 02, 03 were missed.
    const back = last + 3600;
    expect(s.target(back, last)).toEqual({ slot: last + 3000, late: true });
    expect(s.target(back, last, 'run_late')).toEqual({ slot: last + 3000, late: true });
    expect(s.target(back, last, 'skip')).toEqual({ slot: last + 4000, late: false });
    // 200 ms after the slot is within the tolerance (a quarter of the period): on time, run it.
    expect(s.target(last + 3200, last, 'skip')).toEqual({ slot: last + 3000, late: true });
    // Jitter widens the tolerance; a job that never ran still starts at once.
    expect(s.target(back, last, 'skip', 500)).toEqual({ slot: last + 3000, late: true });
    expect(s.target(back, null, 'skip')).toEqual({ slot: last + 3000, late: true });
    expect(s.toleranceAt(last)).toBe(250);
    expect(new Schedule({ kind: 'every', everyMs: 3_600_000 }).toleranceAt(last)).toBe(5000);
  });
});

describe('per-job offsets (issue 24: cluster jobs of one cadence do not all start at :00)', () => {
  const MINUTE_JOBS = [
    'account_expiry',
    'proxy_expiry',
    'subscription_expiry',
    'payment_order_expiry',
    'usage_cleanup',
    'idempotency_cleanup',
    'dashboard_aggregation',
    'ops_metrics',
    'ops_alert_evaluator',
    'scheduled_reports',
    'channel_monitor',
    'scheduled_account_test',
  ];

  it('shifts every slot of a job by its offset, for `every` and `cron` alike', () => {
    const s = new Schedule({ kind: 'every', everyMs: 60_000, offsetMs: 7_000 });
    expect(s.next(T('2026-01-01T10:00:00Z'))).toBe(T('2026-01-01T10:00:07Z'));
    expect(s.next(T('2026-01-01T10:00:07Z'))).toBe(T('2026-01-01T10:01:07Z'));
    expect(s.prev(T('2026-01-01T10:00:06.999Z'))).toBe(T('2026-01-01T09:59:07Z'));
    expect(s.prev(T('2026-01-01T10:00:07Z'))).toBe(T('2026-01-01T10:00:07Z'));
    expect(s.target(T('2026-01-01T10:05:30Z'), T('2026-01-01T10:00:07Z'))).toEqual({ slot: T('2026-01-01T10:05:07Z'), late: true });
    const c = new Schedule({ kind: 'cron', expr: '0 2 * * *', timezone: 'UTC', offsetMs: 20_000 });
    expect(new Date(c.next(T('2026-01-01T02:00:10Z'))).toISOString()).toBe('2026-01-01T02:00:20.000Z');
    expect(c.periodAt(T('2026-01-01T12:00:00Z'))).toBe(86_400_000);
  });

  it('defaults to a stable hash of the name within a quarter of the period, the same on every replica', () => {
    const offsets = MINUTE_JOBS.map((n) => resolveJobSettings(n, { enabled: true, every: 60_000, timeout: 10_000 }, {}, 30_000).schedule.offsetMs!);
    for (const o of offsets) {
      expect(o).toBeGreaterThanOrEqual(0);
      expect(o).toBeLessThan(15_000);
    }
    // Twelve jobs of one cadence start at twelve different instants, never more than two in one second (the herd was twelve).
    expect(new Set(offsets).size).toBe(12);
    const perSecond = new Map<number, number>();
    for (const o of offsets) perSecond.set(Math.floor(o / 1000), (perSecond.get(Math.floor(o / 1000)) ?? 0) + 1);
    expect(Math.max(...perSecond.values())).toBeLessThanOrEqual(2);
    // Deterministic: the same name gives the same offset (a fixed hash, not the runtime's), and so the same slot everywhere.
    expect(defaultOffset('ops_metrics', 60_000, 30_000)).toBe(stableHash('ops_metrics') % 15_000);
    expect(stableHash('ops_metrics')).toBe(stableHash('ops_metrics'));
    expect(defaultOffset('canary', 1000, 30_000)).toBeLessThan(250);
    // A long period is bounded by offset_max.
    expect(resolveJobSettings('backup', { enabled: true, cron: '0 3 * * *', timeout: 60_000 }, {}, 30_000).schedule.offsetMs).toBeLessThan(30_000);
  });

  it('takes jobs.<name>.offset as given, 0 included; offset_max 0 turns the default off; an offset past the period is refused by name', () => {
    const d = { enabled: true, every: 60_000, timeout: 10_000 };
    expect(resolveJobSettings('ops_metrics', d, { offset: 0 }, 30_000).schedule.offsetMs).toBe(0);
    expect(resolveJobSettings('ops_metrics', d, { offset: 12_345 }, 30_000).schedule.offsetMs).toBe(12_345);
    expect(resolveJobSettings('ops_metrics', d, {}, 0).schedule.offsetMs).toBe(0);
    expect(() => resolveJobSettings('ops_metrics', d, { offset: 60_000 }, 30_000)).toThrow(/jobs\.ops_metrics\.offset \(1m\) must be shorter than the job's period \(1m\)/);
  });
});
