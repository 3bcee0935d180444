import { describe, expect, it } from 'vitest';
import { LeaseKeeper } from '../src/coordination/lease-keeper.js';
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
});
