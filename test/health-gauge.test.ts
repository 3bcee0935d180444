import { describe, expect, it } from 'vitest';
import { InstanceHeartbeat } from '../src/app/instance-heartbeat.js';
import { judgeHealth } from '../src/scheduler/health.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { ManualClock } from '../src/time/clock.js';
import { SkipCounter } from '../src/coordination/skip-counter.js';
import { Memberships } from '../src/coordination/memberships.js';
import { loadConfig } from '../src/app/config-schema.js';
import type { JobSettings } from '../src/config/job-settings.js';
import type { JobSnapshot, RunRecord } from '../src/coordination/run-records.js';
import type { InstanceRegistry } from '../src/coordination/instance-registry.js';
import type { ProcessSampler } from '../src/telemetry/process-sampler.js';
import type { JobView } from '../src/modules/job-views.js';
import { runRecord } from './helpers/run-record.js';
import { Deadline } from '../src/time/deadline.js';

/**
 * `relay_jobs_job_health` is computed when /metrics is scraped (issue 26), from the job views,
 * cached 15 s on the heartbeat's injected clock. A stuck round, a round that found no work and a
 * replica that only lost the lock each read as their own state, and the cache is honoured to
 * the millisecond without any sleep.
 */
const T0 = Date.parse('2026-03-01T12:00:00Z');
const minutely: JobSettings = { enabled: true, schedule: { kind: 'every', everyMs: 60_000 }, timeoutMs: 10_000, lockTtlMs: 15_000, jitterMs: 0 };

const run = (p: Partial<RunRecord>): RunRecord => runRecord(new Date(T0 - 30_000), { instance_id: 'r1', ...p });

/** The cluster as the records show it: per job, its snapshot (what `RunRecords.snapshots()` returns). */
function world(): Map<string, Partial<JobSnapshot>> {
  return new Map<string, Partial<JobSnapshot>>([
    // A round started 5 minutes ago with a 10 s timeout and still `running`: stuck.
    ['stuck_job', { lastRun: run({ status: 'running', slot: new Date(T0 - 300_000), started_at: new Date(T0 - 300_000), deadline_at: new Date(T0 - 290_000) }) }],
    // The newest round found nothing to do: healthy, not late, not failing.
    ['no_work_job', { lastRun: run({ status: 'no_work', items: 0 }) }],
    // This replica only ever skipped as not leader; another replica ran the slot: healthy.
    ['not_leader_job', { lastRun: run({ instance_id: 'r2' }), lastSkipAt: new Date(T0 - 30_000) }],
    // Every replica skipped as not leader and no round ran for 5 minutes: late (nobody leads).
    ['nobody_leads_job', { lastRun: run({ slot: new Date(T0 - 300_000), started_at: new Date(T0 - 300_000) }), lastSkipAt: new Date(T0 - 1000) }],
  ]);
}

function setup() {
  const clock = new ManualClock(T0);
  const metrics = new Metrics({ defaultMetrics: false });
  let jobs = world();
  let reads = 0;
  let fail = false;
  const views = async (): Promise<JobView[]> => {
    reads++;
    if (fail) throw new Error('database down');
    return [...jobs].map(([name, s]) => {
      const snapshot: JobSnapshot = {
        job: name,
        createdAt: new Date(T0 - 86_400_000),
        lastSlot: s.lastRun?.slot ?? null,
        holder: null,
        leaseUntil: null,
        lastRun: null,
        lastSuccessAt: null,
        lastSkipAt: null,
        dbNow: new Date(clock.now()),
        ...s,
      };
      const v = judgeHealth({ settings: minutely, snapshot, since: new Date(T0 - 86_400_000), abortGraceMs: 5000 });
      return { name, health: v.health, health_reason: v.reason } as JobView;
    });
  };
  const registry = { beat: async () => ({ mine: true, skewMs: null, refreshMembers: null }), setBackends: () => undefined } as unknown as InstanceRegistry;
  const sampler = { sample: () => null, close: () => undefined } as unknown as ProcessSampler;
  const hb = new InstanceHeartbeat({
    config: loadConfig({ env: {} }),
    registry,
    metrics,
    log: silentLogger(),
    clock,
    views,
    skips: new SkipCounter(),
    liveness: null,
    memberships: new Memberships('r1', []),
    sampler,
  });
  /** One scrape of the gauge: health state per job (the label whose value is 1). */
  const scrape = async (): Promise<Record<string, string>> => {
    const g = await metrics.jobHealth.get();
    return Object.fromEntries(g.values.filter((v) => v.value === 1).map((v) => [String(v.labels.job), String(v.labels.health)]));
  };
  return {
    clock,
    hb,
    scrape,
    get reads() {
      return reads;
    },
    setJobs: (j: Map<string, Partial<JobSnapshot>>) => (jobs = j),
    failReads: (f: boolean) => (fail = f),
  };
}

describe('job health gauge at scrape time', () => {
  it('reports stuck, no-work (healthy), not-leader (healthy) and nobody-leads (late) as the verdicts say', async () => {
    const s = setup();
    s.hb.start();
    try {
      expect(s.reads).toBe(0); // nothing is read until a scrape
      expect(await s.scrape()).toEqual({ stuck_job: 'stuck', no_work_job: 'healthy', not_leader_job: 'healthy', nobody_leads_job: 'late' });
      expect(s.reads).toBe(1);
    } finally {
      await s.hb.stop(Deadline.within(s.clock, 1000));
    }
  });

  it('honours the 15 s cache on the injected clock: no read and the old values until then, a fresh read after', async () => {
    const s = setup();
    s.hb.start();
    try {
      await s.scrape();
      // The stuck round is finally recorded as failed, and the not-leader job's runner came back.
      const next = world();
      next.set('stuck_job', { lastRun: run({ status: 'failed', error: 'abandoned', slot: new Date(T0 - 300_000), started_at: new Date(T0 - 300_000) }) });
      s.setJobs(next);
      await s.clock.advance(14_999);
      expect((await s.scrape()).stuck_job).toBe('stuck');
      expect(s.reads).toBe(1);
      await s.clock.advance(1);
      const fresh = await s.scrape();
      expect(s.reads).toBe(2);
      expect(fresh.stuck_job).toBe('late'); // no round since 5 minutes ago: late beats its failed one
      // A failed read keeps the last values (and is not retried before the cache runs out again).
      s.failReads(true);
      await s.clock.advance(15_000);
      expect(await s.scrape()).toEqual(fresh);
      expect(s.reads).toBe(3);
      await s.scrape();
      expect(s.reads).toBe(3);
    } finally {
      await s.hb.stop(Deadline.within(s.clock, 1000));
    }
  });

  it('after stop, a scrape reads nothing', async () => {
    const s = setup();
    s.hb.start();
    await s.hb.stop(Deadline.within(s.clock, 1000));
    await s.scrape();
    expect(s.reads).toBe(0);
  });
});
