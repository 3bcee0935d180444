import { describe, expect, it } from 'vitest';
import { LeaseKeeper, RENEW_GRID_MS } from '../src/coordination/lease-keeper.js';
import { RenewalBatch } from '../src/coordination/renewal-batch.js';
import { ManualClock } from '../src/time/clock.js';

function setup(renew: () => Promise<boolean>, renewLock?: () => Promise<boolean>) {
  const clock = new ManualClock();
  const lost: Array<{ at: number; reason: string }> = [];
  const lockFailures: string[] = [];
  let calls = 0;
  const keeper = new LeaseKeeper({
    clock,
    leaseMs: 3000,
    renewLease: async () => {
      calls++;
      return renew();
    },
    renewLock,
    onLost: (reason) => lost.push({ at: clock.now(), reason }),
    onLockRenewFailed: (r) => lockFailures.push(r),
  });
  const t0 = clock.now();
  keeper.start(t0);
  return { clock, keeper, lost, lockFailures, t0, calls: () => calls };
}

describe('LeaseKeeper', () => {
  it('renews every third of the lease and never gives up while renewals succeed', async () => {
    const s = setup(async () => true);
    await s.clock.advance(10_000);
    expect(s.calls()).toBe(10); // at 1s, 2s, ... 10s
    expect(s.lost).toEqual([]);
    s.keeper.stop();
    expect(s.clock.pending).toBe(0);
  });

  it('gives up at once when the store refuses the renewal (a newer round holds the job)', async () => {
    const s = setup(async () => false);
    await s.clock.advance(1000);
    expect(s.lost).toHaveLength(1);
    expect(s.lost[0]!.at - s.t0).toBe(1000);
    expect(s.lost[0]!.reason).toMatch(/taken over/);
  });

  it('when the store cannot be reached, stops trusting the lease before it could expire', async () => {
    const s = setup(async () => {
      throw new Error('connection refused');
    });
    await s.clock.advance(5000);
    expect(s.lost).toHaveLength(1);
    const at = s.lost[0]!.at - s.t0;
    expect(at).toBeLessThan(3000); // before the lease's own expiry
    expect(at).toBe(3000 - s.keeper.marginMs);
  });

  it('one failed renewal followed by a good one keeps the lease (trust window restarts from the good one)', async () => {
    let n = 0;
    const s = setup(async () => {
      n++;
      if (n === 1) throw new Error('blip');
      return true;
    });
    await s.clock.advance(8000);
    expect(s.lost).toEqual([]);
  });

  it('reports a lost leader lock without ending the round', async () => {
    const s = setup(
      async () => true,
      async () => false,
    );
    await s.clock.advance(2000);
    expect(s.lockFailures.length).toBe(2);
    expect(s.lost).toEqual([]);
  });

  it("long leases renew on a shared one-second grid, so one replica's renewals fall due together", async () => {
    const clock = new ManualClock(Date.UTC(2026, 10, 30, 12));
    const at: number[][] = [[], [], []];
    const keepers = [0, 300, 700].map(
      (startOffset, i) => () =>
        new LeaseKeeper({
          clock,
          leaseMs: 30_000,
          renewLease: async () => {
            at[i]!.push(clock.now());
            return true;
          },
          onLost: () => undefined,
        }),
    );
    const k0 = keepers[0]!();
    k0.start();
    await clock.advance(300);
    const k1 = keepers[1]!();
    k1.start();
    await clock.advance(400);
    const k2 = keepers[2]!();
    k2.start();
    await clock.advance(40_000);
    for (const k of [k0, k1, k2]) k.stop();
    // Started 0.3 s and 0.7 s apart, all three renew at the same instants, every 10 s at most (never later).
    expect(at[1]).toEqual(at[0]);
    expect(at[2]).toEqual(at[0]);
    for (const t of at[0]!) expect(t % RENEW_GRID_MS).toBe(0);
    expect(at[0]!.length).toBeGreaterThanOrEqual(4);
  });
});

describe('RenewalBatch', () => {
  it('sends the renewals of one turn of the event loop as one call, and answers each its own', async () => {
    const calls: number[][] = [];
    const batch = new RenewalBatch<number>(async (ids) => {
      calls.push(ids);
      return ids.map((id) => id !== 2);
    });
    expect(await Promise.all([1, 2, 3].map((id) => batch.renew(id)))).toEqual([true, false, true]);
    expect(await batch.renew(4)).toBe(true);
    expect(calls).toEqual([[1, 2, 3], [4]]);
  });

  it('a failed call fails each renewal of its batch (each keeper then retries on its next tick)', async () => {
    const batch = new RenewalBatch<number>(async () => {
      throw new Error('database unreachable');
    });
    const results = await Promise.allSettled([batch.renew(1), batch.renew(2)]);
    expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    expect(batch.batches).toBe(1);
  });
});
