import { describe, expect, it } from 'vitest';
import { InstanceHeartbeat } from '../src/app/instance-heartbeat.js';
import type { Config } from '../src/config/load.js';
import type { InstanceRegistry } from '../src/coordination/instance-registry.js';
import { Memberships } from '../src/coordination/memberships.js';
import { SkipCounter, type SkipSummary } from '../src/coordination/skip-counter.js';
import { IdleRounds, type IdleRound } from '../src/coordination/idle-rounds.js';
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

  it.each([
    ['after a connection error are given back for the next beat', 'ECONNREFUSED', ['r_job']],
    ['after a refusal of their content (SQLSTATE class 22) are dropped, not retried forever', '22P05', []],
  ])('round records a beat could not write: %s', async (_what, code, second) => {
    const clock = new ManualClock();
    const idleRounds = new IdleRounds();
    const got: string[][] = [];
    const registry = {
      async beat(_skew: number, _liveness: unknown, _skips: SkipSummary[], _figures: unknown, idle: IdleRound[]) {
        got.push(idle.map((r) => r.job));
        if (got.length === 1) throw Object.assign(new Error(`beat failed (test): ${code}`), { code });
        return { skewMs: null, members: null, mine: true };
      },
    } as unknown as InstanceRegistry;
    const config = { cluster: { instance_heartbeat: 10_000, max_clock_skew: 1000 }, instance: { id: 'r1' } } as unknown as Config;
    const beat = new InstanceHeartbeat({
      config,
      registry,
      metrics: new Metrics({ defaultMetrics: false }),
      log: silentLogger(),
      clock,
      views: async () => [],
      skips: new SkipCounter(),
      idleRounds,
      liveness: null,
      memberships: new Memberships('r1', []),
    });
    idleRounds.add({
      job: 'r_job',
      slot: new Date(clock.now()).toISOString(),
      startedMs: clock.now(),
      finishedMs: clock.now(),
      note: null,
      outcome: { status: 'failed', items: 0, error: 'x', timeoutMs: 1000 },
    });
    beat.start();
    await settle();
    await clock.advance(10_000);
    expect(got).toEqual([['r_job'], second]);
    await beat.stop(Deadline.within(clock, 1000));
  });
});
