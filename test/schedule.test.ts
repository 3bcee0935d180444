import { describe, expect, it } from 'vitest';
import { Schedule } from '../src/scheduler/schedule.js';

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
