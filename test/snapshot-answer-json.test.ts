import { describe, expect, it } from 'vitest';
import { answerJson } from '../src/areas/scheduler-snapshot/scheduler-routes.js';
import { availableOf, type SchedulerAccounts } from '../src/areas/scheduler-snapshot/scheduler-snapshot-service.js';
import type { RoutingEntry } from '../src/areas/scheduler-snapshot/store/routing-accounts.js';

// The hot path's body is composed around a list serialised once (issue 53): it must be the very
// bytes the generic serialiser gave, and the list must change exactly when a cooldown ends.
const entry = (id: number, until: string | null, group: string | null = null): RoutingEntry => ({
  id,
  platform: 'openai',
  group,
  priority: 50,
  concurrency: 3,
  proxy_id: id % 2 ? null : 7,
  status: 'active',
  temp_unschedulable_until: until,
  token_expires_at: '2026-12-05T12:00:00.000Z',
});

describe('scheduler snapshot answer', () => {
  it('is byte for byte JSON.stringify({ ...answer, count }), whatever the strings hold', () => {
    for (const a of [
      { platform: 'openai', group: '', source: 'snapshot', epoch: 12_345, age_seconds: 1.234, accounts: [entry(1, null), entry(2, null, 'vip "gold" \u2028 \\ ✓')] },
      { platform: 'we"ird\n', group: 'g', source: 'postgres', epoch: 0, age_seconds: 0, accounts: [] },
    ] satisfies SchedulerAccounts[]) {
      expect(answerJson(a)).toBe(JSON.stringify({ ...a, count: a.accounts.length }));
      expect(answerJson(a), 'the second time, from the kept list JSON').toBe(JSON.stringify({ ...a, count: a.accounts.length }));
    }
  });

  it('serves one frozen list until the next cooldown in the bucket ends, then a new one with that account back', () => {
    const now = Date.parse('2026-12-05T10:00:00.000Z');
    const ok = {
      state: 'ok' as const,
      head: { gen: 'g1', rev: 1 },
      epoch: 9,
      builtAt: now,
      writtenAt: now,
      entries: [entry(1, null), entry(2, new Date(now + 1000).toISOString()), entry(3, new Date(now + 5000).toISOString()), entry(4, new Date(now - 1).toISOString())],
    };
    const first = availableOf(ok, now);
    expect(first.map((e) => e.id)).toEqual([1, 4]);
    expect(Object.isFrozen(first)).toBe(true);
    expect(availableOf(ok, now + 999), 'the same array while nothing ended').toBe(first);
    const second = availableOf(ok, now + 1000);
    expect(second.map((e) => e.id)).toEqual([1, 2, 4]);
    expect(availableOf(ok, now + 4999)).toBe(second);
    expect(availableOf(ok, now + 5000).map((e) => e.id)).toEqual([1, 2, 3, 4]);
  });
});
