import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../src/store/db.js';
import { MemoryLeaderLock } from '../src/coordination/leader-lock.js';
import { RoundRunner } from '../src/scheduler/round-runner.js';
import { ScheduleBook } from '../src/scheduler/schedule-book.js';
import { ClusterSchedules } from '../src/coordination/cluster-schedules.js';
import { InstanceRegistry } from '../src/coordination/instance-registry.js';
import { DEAD_REPLICA_HORIZON_MS } from '../src/coordination/instance-retention.js';
import { differingKeys, fingerprintOf, scheduleSpecOf } from '../src/coordination/schedule-fingerprint.js';
import type { JobSettings } from '../src/config/job-settings.js';
import type { JobDefinition, JobScope } from '../src/scheduler/job.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { BACKENDS } from './helpers/backends.js';

/**
 * One schedule per job (issue 49, point 1) below the process level, on PostgreSQL and PGlite: the
 * adoption rule (the first replica adopts its own; a new schedule only when every live replica
 * publishes it; a replica leaving or dying ends the drift; embedded adopts its own), the claim
 * refusing a slot from another schedule atomically (no book needed), and the round runner skipping
 * a drifting replica's slot with the reason `config_drift: …` naming the keys. The end-to-end
 * proof on two real replicas is test/schedule-drift.e2e.test.ts.
 */
const HEARTBEAT_MS = 10_000;

function settings(everyMs: number, over: Partial<JobSettings> = {}): JobSettings {
  return { enabled: true, schedule: { kind: 'every', everyMs, offsetMs: 0 }, timeoutMs: 2000, lockTtlMs: 3000, jitterMs: 0, ...over };
}

function job(name: string, s: JobSettings, counter: { runs: number }, scope: JobScope = 'cluster'): JobDefinition {
  return {
    name,
    description: name,
    scope,
    settings: s,
    run: async () => {
      counter.runs++;
      return { items: 1 };
    },
  };
}

/** One replica: its registry row, its schedule book over `jobs`, its round runner. */
async function replica(db: Db, id: string, jobs: JobDefinition[], adoptOwn = false) {
  const registry = new InstanceRegistry(db, systemClock, { instanceId: id, env: 'test', mode: 'cluster', httpPort: null, version: 't', heartbeatMs: HEARTBEAT_MS });
  await registry.register();
  const off = new Map<string, number>();
  const book = new ScheduleBook({
    store: new ClusterSchedules(db, id, HEARTBEAT_MS * 3),
    jobs,
    clock: systemClock,
    log: silentLogger(),
    pollMs: 60_000,
    adoptOwn,
    offSchedule: (j, n) => off.set(j, n),
  });
  const runner = new RoundRunner({
    db,
    clock: systemClock,
    lock: new MemoryLeaderLock(systemClock, id),
    log: silentLogger(),
    metrics: new Metrics(),
    instanceId: id,
    toleratedFutureMs: 500,
    shutdown: new AbortController().signal,
    schedules: book,
  });
  await runner.slotClaims.ensureJobs(jobs.map((j) => j.name));
  return { id, registry, book, runner, off, jobs };
}

const adoptedPrint = async (db: Db, name: string) => (await ClusterSchedules.adopted(db)).get(name)?.fingerprint ?? null;
const print = (s: JobSettings) => fingerprintOf(scheduleSpecOf(s));

describe('schedule fingerprints', () => {
  it('equal settings give equal prints; each published key changes it; jitter and missed do not; differing keys are named with both values', () => {
    const base = settings(2000);
    expect(print(settings(2000))).toBe(print(base));
    const variants: Array<[string, JobSettings]> = [
      ['every', settings(3000)],
      ['offset', settings(2000, { schedule: { kind: 'every', everyMs: 2000, offsetMs: 500 } })],
      ['enabled', settings(2000, { enabled: false })],
      ['timeout', settings(2000, { timeoutMs: 2500 })],
      ['lock_ttl', settings(2000, { lockTtlMs: 4000 })],
    ];
    for (const [key, s] of variants) {
      expect(print(s), key).not.toBe(print(base));
      expect(differingKeys(scheduleSpecOf(s), scheduleSpecOf(base)).map((d) => d.key)).toEqual([key]);
    }
    expect(print(settings(2000, { jitterMs: 500, missed: 'skip' }))).toBe(print(base));
    const cronUtc = settings(0, { schedule: { kind: 'cron', expr: '0 2 * * *', timezone: 'UTC', offsetMs: 0 } });
    const cronSh = settings(0, { schedule: { kind: 'cron', expr: '0 2 * * *', timezone: 'Asia/Shanghai', offsetMs: 0 } });
    expect(differingKeys(scheduleSpecOf(cronSh), scheduleSpecOf(cronUtc))).toEqual([{ key: 'timezone', here: '"Asia/Shanghai"', cluster: '"UTC"' }]);
    expect(differingKeys(scheduleSpecOf(settings(3000)), scheduleSpecOf(cronUtc)).map((d) => d.key)).toEqual(['every', 'cron', 'timezone']);
    expect(differingKeys(scheduleSpecOf(settings(3000)), scheduleSpecOf(base))).toEqual([{ key: 'every', here: '3s', cluster: '2s' }]);
  });
});

describe.each(BACKENDS)('one schedule per job on $name', (backend) => {
  let db: Db;
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    ({ db, cleanup } = await backend.open());
  });
  afterAll(async () => cleanup());

  it('the first replica adopts its own; a differing one drifts (keys named), its claim is refused atomically and its slot skipped as config_drift', async () => {
    const n = { runs: 0 };
    const two = settings(2000);
    const three = settings(3000);
    const a = await replica(db, 'a1', [job('d_first', two, n)]);
    const b = await replica(db, 'b1', [job('d_first', three, n)]);
    await a.book.publish();
    await b.book.publish();
    expect(await adoptedPrint(db, 'd_first')).toBe(print(two));
    expect(a.book.drift('d_first')).toBeNull();
    const drift = b.book.drift('d_first');
    expect(drift?.keys).toEqual([{ key: 'every', here: '3s', cluster: '2s' }]);
    expect(drift?.reason).toMatch(/^config_drift: this replica's jobs\.d_first differs from the cluster's schedule .*every 3s here, 2s in the cluster/);
    expect(b.off.get('d_first')).toBe(1);

    // B's own slot (a multiple of 3 s): skipped before the lock, counted with the reason, never run.
    const slot = new Date(Math.floor(Date.now() / 6000) * 6000 - 6000);
    expect(await b.runner.run(b.jobs[0]!, slot)).toMatchObject({ ran: false, reason: expect.stringMatching(/^config_drift: /) });
    expect(b.runner.skips.take()).toMatchObject([{ job: 'd_first', n: 1, reason: expect.stringMatching(/^config_drift: .*every 3s here, 2s in the cluster/) }]);
    // The claim statement alone refuses it (no pre-check: the replica's copy could be stale).
    const refused = await b.runner.slotClaims.claimScheduled({ job: 'd_first', slot, leaseMs: 3000, timeoutMs: 2000, backend: 'memory', toleratedFutureMs: 500 });
    expect(refused).toMatchObject({ claimed: false, offSchedule: true, reason: expect.stringMatching(/^config_drift: /) });
    expect(n.runs).toBe(0);
    // A on the adopted schedule claims and runs the same slot.
    expect(await a.runner.run(a.jobs[0]!, slot)).toMatchObject({ ran: true, outcome: { status: 'ok' } });
    expect(n.runs).toBe(1);
    await Promise.all([a.registry.markStopped(), b.registry.markStopped()]);
  });

  it('switch-over only when every live replica agrees: a rolling deploy switches once the last old replica is gone', async () => {
    const n = { runs: 0 };
    const old = settings(2000);
    const next = settings(2000, { timeoutMs: 2500, lockTtlMs: 4000 });
    const o1 = await replica(db, 'o1', [job('d_roll', old, n)]);
    const o2 = await replica(db, 'o2', [job('d_roll', old, n)]);
    await o1.book.publish();
    await o2.book.publish();
    expect(await adoptedPrint(db, 'd_roll')).toBe(print(old));

    // o1 is replaced by n1 (new config): o2 is still old, so the adopted schedule stays; n1 drifts.
    await o1.registry.markStopped();
    const n1 = await replica(db, 'n1', [job('d_roll', next, n)]);
    await n1.book.publish();
    expect(await adoptedPrint(db, 'd_roll')).toBe(print(old));
    expect(n1.book.drift('d_roll')?.keys.map((k) => k.key)).toEqual(['timeout', 'lock_ttl']);
    await o2.book.publish();
    expect(o2.off.get('d_roll')).toBe(1); // n1 is the one off the schedule, as o2 reads it

    // o2 is replaced too: every live replica now publishes the new schedule, and the next check adopts it.
    await o2.registry.markStopped();
    const n2 = await replica(db, 'n2', [job('d_roll', next, n)]);
    await n2.book.publish();
    expect(await adoptedPrint(db, 'd_roll')).toBe(print(next));
    expect(n2.book.drift('d_roll')).toBeNull();
    await n1.book.publish();
    expect(n1.book.drift('d_roll')).toBeNull();
    expect(n1.off.get('d_roll')).toBe(0);
    await Promise.all([n1.registry.markStopped(), n2.registry.markStopped()]);
  });

  it('a replica leaving ends the drift: stopped, or dead (no beat within three heartbeats); a disagreeing live pair keeps the adopted one', async () => {
    const n = { runs: 0 };
    const x = settings(2000);
    const y = settings(3000);
    const p = await replica(db, 'p1', [job('d_leave', x, n)]);
    const q = await replica(db, 'q1', [job('d_leave', y, n)]);
    const r = await replica(db, 'r1', [job('d_leave', y, n)]);
    for (const s of [p, q, r]) await s.book.publish();
    expect(await adoptedPrint(db, 'd_leave')).toBe(print(x));
    expect([q, r].map((s) => s.book.drift('d_leave')?.keys.map((k) => k.key))).toEqual([['every'], ['every']]);
    await p.book.publish(); // p's first check came before the others published
    expect(p.off.get('d_leave')).toBe(2);
    // p dies without a clean stop: its row stops beating (three heartbeats ago); the survivors adopt theirs.
    await db.query(`UPDATE instances SET heartbeat_at = clock_timestamp() - interval '1 hour', alive_key = NULL WHERE instance_id = 'p1'`);
    await q.book.publish();
    expect(await adoptedPrint(db, 'd_leave')).toBe(print(y));
    expect(q.book.drift('d_leave')).toBeNull();
    await r.book.publish();
    expect(r.book.drift('d_leave')).toBeNull();
    // p comes back unchanged: it is now the odd one; the adopted schedule stays the survivors'.
    await p.registry.register();
    await p.book.publish();
    expect(await adoptedPrint(db, 'd_leave')).toBe(print(y));
    expect(p.book.drift('d_leave')?.keys).toEqual([{ key: 'every', here: '2s', cluster: '3s' }]);
    // r stops cleanly: q (y) and p (x) disagree, so nothing changes.
    await r.registry.markStopped();
    await p.book.publish();
    await q.book.publish();
    expect(await adoptedPrint(db, 'd_leave')).toBe(print(y));
    // q stops cleanly: p is alone, its next check adopts its own and its drift ends.
    await q.registry.markStopped();
    await p.book.publish();
    expect(await adoptedPrint(db, 'd_leave')).toBe(print(x));
    expect(p.book.drift('d_leave')).toBeNull();
    await p.registry.markStopped();
  });

  it("a dead replica's votes are kept (and shown) within the dead-replica horizon, then dropped by the next live replica's check", async () => {
    const n = { runs: 0 };
    const a = await replica(db, 'old-a', [job('d_prune', settings(2000), n)]);
    const b = await replica(db, 'old-b', [job('d_prune', settings(2000), n)]);
    for (const s of [a, b]) await s.book.publish();
    const voters = async () => (await ClusterSchedules.published(db)).filter((v) => v.job === 'd_prune').map((v) => v.instanceId);
    expect(await voters()).toEqual(['old-a', 'old-b']);
    // old-a died a day ago: dead, named by the doctor, its vote kept.
    await db.query(`UPDATE instances SET heartbeat_at = clock_timestamp() - interval '1 day', alive_key = NULL WHERE instance_id = 'old-a'`);
    await b.book.publish();
    expect(await voters()).toEqual(['old-a', 'old-b']);
    // Past the horizon: gone at the next check of any live replica.
    await db.query(`UPDATE instances SET heartbeat_at = clock_timestamp() - $1 * interval '1 millisecond' - interval '1 minute' WHERE instance_id = 'old-a'`, [DEAD_REPLICA_HORIZON_MS]);
    await b.book.publish();
    expect(await voters()).toEqual(['old-b']);
    // A replica that beats again under that id votes again.
    await a.registry.register();
    await a.book.publish();
    expect(await voters()).toEqual(['old-a', 'old-b']);
    for (const s of [a, b]) await s.registry.markStopped();
  });

  it('a replica with the job disabled neither blocks nor is adopted; enabled replicas split with none on the adopted schedule adopt the most common one', async () => {
    const n = { runs: 0 };
    const x = settings(2000);
    const off = settings(2000, { enabled: false });
    // The disabled replica checks first: its schedule is not adopted, the enabled one's is.
    const d = await replica(db, 'dis1', [job('d_enabled', off, n)]);
    await d.book.publish();
    const e = await replica(db, 'en1', [job('d_enabled', x, n)]);
    await e.book.publish();
    expect(await adoptedPrint(db, 'd_enabled')).toBe(print(x));
    expect(e.book.drift('d_enabled')).toBeNull();
    await d.book.publish();
    expect(d.book.drift('d_enabled')?.keys.map((k) => k.key)).toEqual(['enabled']);
    // The one replica with it enabled is between liveness sessions (its key unheld, its beat fresh):
    // not gone, so nothing flips while it reconnects.
    await db.query(`UPDATE instances SET alive_key = 987654 WHERE instance_id = 'en1'`);
    await d.book.publish();
    expect(await adoptedPrint(db, 'd_enabled')).toBe(print(x));
    // It leaves: no live replica runs it, so every live vote counts and the drift ends (the enabled
    // one's schedule stayed adopted, and the rest read config_drift for ever).
    await e.registry.markStopped();
    await d.book.publish();
    expect(await adoptedPrint(db, 'd_enabled')).toBe(print(off));
    expect(d.book.drift('d_enabled')).toBeNull();
    // It comes back enabled: again the only enabled vote, adopted again.
    await e.registry.register();
    await e.book.publish();
    expect(await adoptedPrint(db, 'd_enabled')).toBe(print(x));

    // Mid-rollout: the adopted schedule's last replica leaves; the rest split 2 (y) to 1 (z), none on x.
    const y = settings(3000);
    const z = settings(4000);
    const a = await replica(db, 'sp1', [job('d_split', x, n)]);
    await a.book.publish();
    expect(await adoptedPrint(db, 'd_split')).toBe(print(x));
    const ys = [await replica(db, 'sp2', [job('d_split', y, n)]), await replica(db, 'sp3', [job('d_split', y, n)])];
    const zs = await replica(db, 'sp4', [job('d_split', z, n)]);
    for (const s of [...ys, zs]) await s.book.publish();
    expect(await adoptedPrint(db, 'd_split')).toBe(print(x)); // x still has a live replica: kept
    await a.registry.markStopped();
    await zs.book.publish();
    expect(await adoptedPrint(db, 'd_split')).toBe(print(y)); // the most common, not the checker's own
    expect(zs.book.drift('d_split')?.keys.map((k) => k.key)).toEqual(['every']);
    for (const s of [d, e, ...ys, zs]) await s.registry.markStopped();
  });

  it('an unchanged check writes nothing (no row of the votes or the adopted schedule locked or rewritten); a change meanwhile is still adopted by the next check', async () => {
    const n = { runs: 0 };
    const rows = async () =>
      (
        await db.query<{ t: string; xmin: string; xmax: string }>(
          `SELECT 'vote:' || instance_id AS t, xmin::text, xmax::text FROM job_schedule_votes WHERE job_name = 'd_quiet'
           UNION ALL SELECT 'state', xmin::text, xmax::text FROM job_state WHERE job_name = 'd_quiet' ORDER BY 1`,
        )
      ).rows;
    const a = await replica(db, 'q1', [job('d_quiet', settings(2000), n)]);
    const b = await replica(db, 'q2', [job('d_quiet', settings(2000), n)]);
    await a.book.publish();
    await b.book.publish();
    const before = await rows();
    expect(before.map((r) => r.t)).toEqual(['state', 'vote:q1', 'vote:q2']);
    for (let i = 0; i < 3; i++) await Promise.all([a.book.publish(), b.book.publish()]);
    expect(await rows()).toEqual(before);
    expect(a.off.get('d_quiet')).toBe(0);

    // Both are replaced by q3 with a new cadence: its check is a writing one and adopts it. (A check dirty
    // through rule 2 alone, its own vote unchanged, is the dead-replica case of 'a replica leaving ends the drift'.)
    await Promise.all([a.registry.markStopped(), b.registry.markStopped()]);
    const b2 = await replica(db, 'q3', [job('d_quiet', settings(3000), n)]);
    await b2.book.publish();
    expect(await adoptedPrint(db, 'd_quiet')).toBe(print(settings(3000)));
    expect(b2.book.drift('d_quiet')).toBeNull();
    await b2.registry.markStopped();
  });

  it("embedded (adoptOwn) adopts its own schedule at once, whatever was adopted; an instance-scoped job never drifts and its rounds run on each replica's own schedule", async () => {
    const n = { runs: 0 };
    const a = await replica(db, 'e1', [job('d_emb', settings(2000), n), job('d_inst', settings(2000), n, 'instance')]);
    await a.book.publish();
    await a.registry.markStopped();
    const e = await replica(db, 'e2', [job('d_emb', settings(5000), n), job('d_inst', settings(5000), n, 'instance')], true);
    await e.book.publish();
    expect(await adoptedPrint(db, 'd_emb')).toBe(print(settings(5000)));
    expect(e.book.all()).toEqual([]);

    // A second, non-embedded replica with another cadence: the instance job drifts there, but its round runs.
    const c = await replica(db, 'c2', [job('d_emb', settings(5000), n), job('d_inst', settings(7000), n, 'instance')]);
    await c.book.publish();
    expect(c.book.drift('d_inst')).toBeNull(); // instance-scoped: each replica's own rounds, nothing to drift from
    expect(await c.runner.run(c.jobs[1]!, new Date(Math.floor(Date.now() / 7000) * 7000))).toMatchObject({ ran: true });
    await Promise.all([e.registry.markStopped(), c.registry.markStopped()]);
  });
});
