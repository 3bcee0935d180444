import { describe, expect, it } from 'vitest';
import { InstanceHeartbeat } from '../src/app/instance-heartbeat.js';
import type { Config } from '../src/config/load.js';
import type { InstanceRegistry } from '../src/coordination/instance-registry.js';
import { Memberships } from '../src/coordination/memberships.js';
import { SkipCounter, type SkipSummary } from '../src/coordination/skip-counter.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { ManualClock, settle } from '../src/time/clock.js';
import { Deadline } from '../src/time/deadline.js';

/** The instance heartbeat on the loop block (ServiceLoop `instance_heartbeat`), with a registry in memory. */
describe('instance heartbeat on the loop block', () => {
  it('a failed beat gives its skips back and counts a failed tick; the next beat, one interval later, writes them; stop waits for a beat in flight', async () => {
    const clock = new ManualClock();
    const metrics = new Metrics({ defaultMetrics: false });
    const skips = new SkipCounter();
    const written: SkipSummary[][] = [];
    let calls = 0;
    let hold: Promise<void> | null = null;
    const registry = {
      async beat(_skew: number, _liveness: unknown, batch: SkipSummary[]) {
        calls++;
        if (calls === 1) throw new Error('database unreachable (test)');
        if (hold) await hold;
        written.push(batch);
        return { skewMs: null, refreshMembers: null, mine: true };
      },
    } as unknown as InstanceRegistry;
    const config = { cluster: { instance_heartbeat: 10_000, max_clock_skew: 1000 }, instance: { id: 'r1' } } as unknown as Config;
    const beat = new InstanceHeartbeat({ config, registry, metrics, log: silentLogger(), clock, views: async () => [], skips, liveness: null, memberships: new Memberships('r1', []) });
    skips.add('job_a', new Date(clock.now()), 'lock_held');
    beat.start();
    await settle();
    expect(calls).toBe(1);
    const outcomes = async () => (await metrics.loopTicks.get()).values.filter((v) => v.labels.loop === 'instance_heartbeat').map((v) => [v.labels.outcome, v.value]);
    expect(await outcomes()).toEqual([['failed', 1]]);
    await clock.advance(9_999);
    expect(calls).toBe(1);
    await clock.advance(1);
    expect(calls).toBe(2);
    expect(written[0]!.map((s) => s.job)).toEqual(['job_a']);
    // A beat in flight at stop: stop waits for it and reports nothing left; no beat after.
    let release: () => void = () => undefined;
    hold = new Promise<void>((r) => (release = r));
    await clock.advance(10_000);
    expect(calls).toBe(3);
    const stopping = beat.stop(Deadline.within(clock, 5_000));
    await settle();
    release();
    expect(await stopping).toBe(0);
    await clock.advance(60_000);
    expect(calls).toBe(3);
    expect(clock.pending).toBe(0);
  });
});
