import { describe, expect, it } from 'vitest';
import { faultSchedule, loadAt, prng, settingsFromEnv, FULL_LOAD } from '../bench/soak-schedule.js';

const DEFAULTS = { seed: 1, minutes: 20, replicas: 9, scale: 0.01 };

describe('soak plan (bench/soak-schedule.ts)', () => {
  it('the same seed gives the same fault schedule; another seed another one', () => {
    const a = faultSchedule({ seed: 53, minutes: 20, replicas: 9 });
    expect(faultSchedule({ seed: 53, minutes: 20, replicas: 9 })).toEqual(a);
    expect(faultSchedule({ seed: 54, minutes: 20, replicas: 9 })).not.toEqual(a);
    expect(prng(7)()).toBe(prng(7)());
  });

  it('every fault kind occurs, inside [10%, 70%] of the run, in time order, on an existing replica, the Redis restart before the failover', () => {
    for (const minutes of [3, 20]) {
      for (let seed = 0; seed < 50; seed++) {
        const f = faultSchedule({ seed, minutes, replicas: 9 });
        expect(new Set(f.map((x) => x.kind))).toEqual(new Set(['sigkill', 'sigstop', 'redis_restart', 'sentinel_failover', 'postgres_restart', 'pgbouncer_restart']));
        for (const [i, x] of f.entries()) {
          expect(x.atMs).toBeGreaterThanOrEqual(minutes * 6000);
          expect(x.atMs).toBeLessThanOrEqual(minutes * 42_000);
          if (i > 0) expect(x.atMs).toBeGreaterThan(f[i - 1]!.atMs);
          if (x.kind === 'sigkill' || x.kind === 'sigstop') expect(x.replica).toBeGreaterThanOrEqual(0);
          if (x.replica !== undefined) expect(x.replica).toBeLessThan(9);
        }
        expect(f.findIndex((x) => x.kind === 'redis_restart')).toBeLessThan(f.findIndex((x) => x.kind === 'sentinel_failover'));
      }
    }
    expect(faultSchedule({ seed: 1, minutes: 20, replicas: 9 }).filter((x) => x.kind === 'sigkill')).toHaveLength(4);
  });

  it('one factor scales every part of the load, none left out', () => {
    const l = loadAt({ scale: 0.00001, minutes: 3 });
    for (const v of [l.accounts, l.monitors, l.accountTestPlans, l.usageEventsPerSec, l.imageBatches]) expect(v).toBeGreaterThanOrEqual(1);
    expect(l.snapshotChangesPerSec).toBeGreaterThan(0);
    const full = loadAt({ scale: 1, minutes: 20 });
    expect(full.accounts).toBe(FULL_LOAD.accounts);
    expect(full.usageEventsPerSec).toBe(FULL_LOAD.usageEventsPerSec);
    // Every account's first refresh falls inside the run, before its last fifth.
    expect(full.refreshSpreadS).toBeLessThan(20 * 60);
  });

  it('bad settings are refused naming the variable', () => {
    expect(() => settingsFromEnv({ SOAK_SEED: 'x' }, DEFAULTS)).toThrow(/SOAK_SEED/);
    expect(() => settingsFromEnv({ SOAK_SCALE: '2' }, DEFAULTS)).toThrow(/SOAK_SCALE/);
    expect(() => settingsFromEnv({ SOAK_MINUTES: '-1' }, DEFAULTS)).toThrow(/SOAK_MINUTES/);
    expect(() => faultSchedule({ seed: 1, minutes: 3, replicas: 1 })).toThrow(/SOAK_REPLICAS/);
    expect(settingsFromEnv({ SOAK_SEED: '42', SOAK_MINUTES: '3' }, DEFAULTS)).toEqual({ ...DEFAULTS, seed: 42, minutes: 3 });
  });
});
