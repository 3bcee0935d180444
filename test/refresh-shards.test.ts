import { describe, expect, it } from 'vitest';
import { RefreshShards } from '../src/areas/accounts/refresh-shards.js';
import { TokenRefreshService } from '../src/areas/accounts/token-refresh-service.js';
import type { Refresher } from '../src/areas/accounts/refresher.js';
import type { Accounts } from '../src/areas/accounts/store/accounts.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { createLogger } from '../src/telemetry/logger.js';
import { ManualClock } from '../src/time/clock.js';
import { refreshSettings } from './helpers/refresh-settings.js';

const IDS = Array.from({ length: 30_000 }, (_, i) => i + 1);

function owners(members: string[]): Map<number, string> {
  const s = new RefreshShards('x');
  s.update(members);
  return new Map(IDS.map((id) => [id, s.owner(id)!]));
}

describe('RefreshShards (rendezvous hashing over the live replicas)', () => {
  it('every replica computes the same owner, whatever order it saw the members in', () => {
    const a = new RefreshShards('r1');
    const b = new RefreshShards('r3');
    a.update(['r1', 'r2', 'r3']);
    b.update(['r3', 'r1', 'r2', 'r2']);
    for (const id of IDS.slice(0, 2000)) expect(a.owner(id)).toBe(b.owner(id));
    // Exactly one member owns each account.
    const c = new RefreshShards('r2');
    c.update(['r2', 'r3', 'r1']);
    for (const id of IDS.slice(0, 2000)) expect([a, b, c].filter((s) => s.owns(id))).toHaveLength(1);
  });

  it('spreads the accounts evenly at 3 and at 9 replicas', () => {
    for (const n of [3, 9]) {
      const members = Array.from({ length: n }, (_, i) => `replica-${i}`);
      const counts = new Map<string, number>();
      for (const o of owners(members).values()) counts.set(o, (counts.get(o) ?? 0) + 1);
      expect(counts.size).toBe(n);
      for (const c of counts.values()) expect(Math.abs(c / IDS.length - 1 / n), `${n} replicas: share ${c / IDS.length}`).toBeLessThan(0.02);
    }
  });

  it('a replica leaving moves only its own accounts; one joining takes only what it gains', () => {
    const before = owners(['a', 'b', 'c']);
    const after = owners(['a', 'b']);
    for (const id of IDS) if (before.get(id) !== 'c') expect(after.get(id)).toBe(before.get(id));
    const joined = owners(['a', 'b', 'c', 'd']);
    let moved = 0;
    for (const id of IDS) {
      if (joined.get(id) !== before.get(id)) {
        expect(joined.get(id)).toBe('d');
        moved++;
      }
    }
    expect(Math.abs(moved / IDS.length - 0.25)).toBeLessThan(0.02);
  });

  it('owns everything until the first member list, and tells listeners only of real changes', async () => {
    const s = new RefreshShards('me');
    expect(s.owns(42)).toBe(true);
    let changes = 0;
    s.onChange(() => changes++);
    const known = s.whenKnown(60_000);
    expect(s.update(['me', 'other'])).toBe(true);
    await known;
    expect(s.update(['other', 'me'])).toBe(false);
    expect(changes).toBe(1);
    // A replica that does not refresh is in no list: it owns nothing once the list is known.
    s.update(['other']);
    expect(IDS.slice(0, 100).some((id) => s.owns(id))).toBe(false);
  });
});

describe('TokenRefreshService with refresh sharding', () => {
  const BACKSTOP = 120_000;
  function service(self: string) {
    const clock = new ManualClock(Date.UTC(2026, 10, 30, 12));
    const shards = new RefreshShards(self);
    // Only afterOutcome and the queue are used here: nothing reaches the store or the provider.
    const svc = new TokenRefreshService(
      {} as Accounts,
      {} as Refresher,
      refreshSettings({ marginMs: 60_000, shardsWaitMs: 0, backstopMs: BACKSTOP }),
      clock,
      () => 0.5,
      createLogger({ level: 'silent', instanceId: 'a', env: 'test' }),
      new Metrics(),
      shards,
    );
    return { clock, shards, svc };
  }

  it('fires owned accounts when due, keeps the others as a backstop, and takes a dead owner’s accounts over at once', () => {
    const { shards, svc } = service('a');
    shards.update(['a', 'b', 'c']);
    const expiry = new Date(Date.UTC(2026, 10, 30, 12) + 600_000);
    for (const id of IDS.slice(0, 900)) svc.afterOutcome(id, 1, { result: 'refreshed', version: 2, tokenExpiresAt: expiry });
    const due = new Map([...svc.queue.entries()].map((e) => [e.id, e.due!]));
    const check = () => {
      for (const e of svc.queue.entries()) expect(e.at, `account ${e.id} owned by ${shards.owner(e.id)}`).toBe(shards.owner(e.id) === 'a' ? due.get(e.id) : due.get(e.id)! + BACKSTOP);
    };
    check();
    const ownedBefore = IDS.slice(0, 900).filter((id) => shards.owns(id)).length;
    expect(ownedBefore).toBeGreaterThan(200);
    // c dies: its accounts are re-placed; the ones a now owns are due at their own time again.
    const cAccounts = IDS.slice(0, 900).filter((id) => shards.owner(id) === 'c');
    shards.update(['a', 'b']);
    check();
    expect(cAccounts.filter((id) => shards.owns(id)).length).toBeGreaterThan(100);
    // Alone: every account at its own due time (an overdue one fires at once), none a backstop later.
    shards.update(['a']);
    for (const e of svc.queue.entries()) expect(e.at).toBe(due.get(e.id));
  });
});
