import { describe, expect, it } from 'vitest';
import { WarnSampler } from '../src/telemetry/warn-sampler.js';
import { checkPlanSchedule, closestFirings } from '../src/areas/probes/plan-schedule.js';

describe('repeated warnings are sampled with a count (issue 23, item 6)', () => {
  it('5,000 occurrences in 10 s at a 1 s interval: the first logged at once, then one line a second carrying what it suppressed', () => {
    let now = 0;
    const s = new WarnSampler(1000, () => now);
    const logged: number[] = [];
    for (let i = 0; i < 5000; i++) {
      now = i * 2; // one every 2 ms
      const r = s.take('fakepay');
      if (r) logged.push(r.suppressed);
    }
    expect(logged.length).toBe(10);
    expect(logged[0]).toBe(0);
    // Every occurrence is either a line or counted in the next line's `suppressed`.
    expect(logged.length + logged.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(5000);
    expect(logged.slice(1).every((n) => n === 499)).toBe(true);
    // Keys are independent.
    expect(s.take('other')).toEqual({ suppressed: 0 });
  });
});

describe('account-test schedules have the monitors floor (issue 23, item 6)', () => {
  it('a per-second cron is refused naming the field and the key; a minutely one passes', () => {
    expect(closestFirings('* * * * * *', 'UTC', Date.UTC(2026, 0, 1))).toBe(1000);
    expect(checkPlanSchedule('* * * * * *', 'UTC', Date.UTC(2026, 0, 1), 15_000)).toEqual({
      field: 'cron',
      message: 'cron "* * * * * *" fires 1s apart at its closest: account tests must be at least 15s apart (channel_monitor.min_interval)',
    });
    // Two firings a second apart once an hour are still too close.
    expect(checkPlanSchedule('0,1 0 * * * *', 'UTC', Date.UTC(2026, 0, 1), 15_000)?.field).toBe('cron');
    expect(checkPlanSchedule('*/5 * * * *', 'UTC', Date.UTC(2026, 0, 1), 15_000)).toBeNull();
  });
});
