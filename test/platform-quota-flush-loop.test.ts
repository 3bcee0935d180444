import { describe, expect, it } from 'vitest';
import { ManualClock } from '../src/time/clock.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { MemoryQuotaCounters, quotaMember } from '../src/coordination/quota-counters.js';
import { PlatformQuota } from '../src/areas/usage/platform-quota.js';
import { QuotaFlushLoop } from '../src/areas/usage/quota-flush-loop.js';
import type { QuotaRow, QuotaUsage } from '../src/areas/usage/store/quota-usage.js';
import type { DeadLetters } from '../src/store/dead-letters.js';
import { Deadline } from '../src/time/deadline.js';

/** The quota flush on the loop block (issue 26): asleep while nothing is dirty, one flush per delay after an increment. */
function setup(o: { failUpserts?: number } = {}) {
  const clock = new ManualClock();
  const counters = new MemoryQuotaCounters();
  const calls = { get: 0, upsert: 0, dirtyCount: 0, upserted: [] as QuotaRow[] };
  let failures = o.failUpserts ?? 0;
  const store = {
    get: async () => {
      calls.get++;
      return null;
    },
    upsert: async (rows: QuotaRow[]) => {
      calls.upsert++;
      if (failures-- > 0) throw new Error('database down');
      calls.upserted.push(...rows);
      return rows.length;
    },
    list: async () => [],
  } as unknown as QuotaUsage;
  const dirtyCount = counters.dirtyCount.bind(counters);
  counters.dirtyCount = async () => {
    calls.dirtyCount++;
    return dirtyCount();
  };
  const quota = new PlatformQuota(counters, store, 1000, new Metrics({ defaultMetrics: false }), silentLogger(), {} as DeadLetters);
  const loop = new QuotaFlushLoop(quota, { clock, log: silentLogger(), delayMs: 5000, backstopMs: 30_000 });
  quota.onDirty = () => loop.dirtied();
  return { clock, counters, calls, quota, loop };
}

describe('QuotaFlushLoop', () => {
  it('idle: touches no store at all, and the counters only once per backstop (one dirty-set size read)', async () => {
    const s = setup();
    s.loop.start();
    await s.clock.advance(0);
    await s.clock.advance(5 * 60_000);
    expect(s.calls.get + s.calls.upsert).toBe(0);
    // One look at start, then one per 30 s backstop.
    expect(s.calls.dirtyCount).toBe(1 + 10);
    await s.loop.stop(Deadline.within(s.clock, 1000));
  });

  it('an increment is flushed flush_delay later, once however many increments came meanwhile', async () => {
    const s = setup();
    s.loop.start();
    await s.clock.advance(0);
    await s.quota.increment('u1', 'openai', 5); // first sight: seeded (one get, one zero upsert)
    await s.clock.advance(1000);
    await s.quota.increment('u1', 'openai', 2);
    await s.quota.increment('u2', 'openai', 1);
    const seedUpserts = s.calls.upsert;
    await s.clock.advance(3999);
    expect(s.calls.upsert).toBe(seedUpserts); // not yet: 5 s after the first increment
    await s.clock.advance(1);
    expect(s.calls.upsert).toBe(seedUpserts + 1); // one upsert for both counters
    expect(s.calls.upserted.filter((r) => r.used > 0).sort((a, b) => a.user_id.localeCompare(b.user_id))).toEqual([
      { user_id: 'u1', platform: 'openai', used: 7, epoch: 0 },
      { user_id: 'u2', platform: 'openai', used: 1, epoch: 0 },
    ]);
    expect(await s.counters.dirtyCount()).toBe(0);
    // Then asleep again: nothing until the next increment or the backstop.
    const after = s.calls.upsert;
    await s.clock.advance(29_000);
    expect(s.calls.upsert).toBe(after);
    await s.loop.stop(Deadline.within(s.clock, 1000));
  });

  it('keys another replica left dirty (it crashed before its flush) are flushed at the backstop', async () => {
    const s = setup();
    s.loop.start();
    await s.clock.advance(0);
    await s.counters.seed(quotaMember('u9', 'claude'), 40, 0);
    await s.counters.increment(quotaMember('u9', 'claude'), 2); // not through this replica: no wake-up
    await s.clock.advance(29_999);
    expect(s.calls.upsert).toBe(0);
    await s.clock.advance(1);
    expect(s.calls.upserted).toEqual([{ user_id: 'u9', platform: 'claude', used: 42, epoch: 0 }]);
    await s.loop.stop(Deadline.within(s.clock, 1000));
  });

  it('a flush PostgreSQL refused keeps its keys dirty and is tried again flush_delay later', async () => {
    const s = setup({ failUpserts: 1 }); // the first flush fails
    s.loop.start();
    await s.clock.advance(0);
    await s.counters.seed(quotaMember('u1', 'openai'), 0, 0);
    await s.quota.increment('u1', 'openai', 3);
    s.calls.upsert = 0;
    await s.clock.advance(5000);
    expect(s.calls.upsert).toBe(1); // refused
    expect(await s.counters.dirtyCount()).toBe(1);
    await s.clock.advance(5000);
    expect(s.calls.upserted).toEqual([{ user_id: 'u1', platform: 'openai', used: 3, epoch: 0 }]);
    expect(await s.counters.dirtyCount()).toBe(0);
    await s.loop.stop(Deadline.within(s.clock, 1000));
  });
});
