import { describe, expect, it } from 'vitest';
import { Cron } from 'croner';
import { cronZone, isKnownTimeZone, isUtcZone } from '../src/time/zones.js';
import { wholeHourZone } from '../src/areas/usage/rollup-rebuild.js';

/**
 * UTC without ICU's zone data (time/zones.ts): the same cron instants as croner's own `timezone:
 * 'UTC'`, and the same answers from the zone checks, with the data loaded only for other zones.
 */
describe('time zones', () => {
  it("croner's utcOffset 0 (what cronZone gives for UTC) fires at the instants of timezone 'UTC', across a year and DST dates elsewhere", () => {
    expect(cronZone('UTC')).toEqual({ utcOffset: 0 });
    expect(cronZone('Etc/UTC')).toEqual({ utcOffset: 0 });
    expect(cronZone('Asia/Shanghai')).toEqual({ timezone: 'Asia/Shanghai' });
    for (const expr of ['*/5 * * * *', '0 2 * * *', '30 1 * * 1', '0 0 1 * *', '15 */3 * * *', '0 30 2 * * *', '0 0 29 2 *']) {
      const fixed = new Cron(expr, { ...cronZone('UTC'), paused: true });
      const named = new Cron(expr, { timezone: 'UTC', paused: true });
      let a: Date | null = new Date(Date.UTC(2026, 0, 1));
      let b: Date | null = a;
      for (let i = 0; i < 500 && a && b; i++) {
        a = fixed.nextRun(a);
        b = named.nextRun(b);
        expect(a?.toISOString(), `${expr}, occurrence ${i}`).toBe(b?.toISOString());
      }
    }
  });

  it('zone checks: UTC known and whole-hour; other zones as ICU says; an unknown name refused', () => {
    expect([isUtcZone('UTC'), isUtcZone('Etc/UTC'), isUtcZone('utc'), isUtcZone('Europe/London')]).toEqual([true, true, false, false]);
    expect([isKnownTimeZone('UTC'), isKnownTimeZone('Asia/Shanghai'), isKnownTimeZone('Mars/Olympus_Mons')]).toEqual([true, true, false]);
    expect([wholeHourZone('UTC'), wholeHourZone('Asia/Shanghai'), wholeHourZone('Asia/Kolkata')]).toEqual([true, true, false]);
  });
});
