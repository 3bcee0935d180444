import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../src/store/db.js';
import { MemoryLeaderLock } from '../src/coordination/leader-lock.js';
import { RoundRunner } from '../src/scheduler/round-runner.js';
import { RunRecords } from '../src/coordination/run-records.js';
import { InstanceRegistry } from '../src/coordination/instance-registry.js';
import { judgeReplicas } from '../src/scheduler/health.js';
import type { JobDefinition, JobContext } from '../src/scheduler/job.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { waitFor } from './helpers/wait.js';
import { IdleRounds, MAX_PENDING, type IdleRound } from '../src/coordination/idle-rounds.js';
import { BACKENDS } from './helpers/backends.js';

/** Issue 26: a scheduled instance round that finds nothing writes no record of its own; the heartbeat writes it. */
function job(name: string, run: (ctx: JobContext) => Promise<{ items: number; note?: string }>): JobDefinition {
  return { name, description: name, scope: 'instance', settings: { enabled: true, schedule: { kind: 'every', everyMs: 1000 }, timeoutMs: 20_000, lockTtlMs: 3000, jitterMs: 0 }, run };
}

/** A job whose round waits for `release()`, then ends as `end` says: a round that is still running when the test acts. */
function gatedJob(name: string, end: () => { items: number }): { job: JobDefinition; release: () => void } {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  return {
    job: job(name, async () => {
      await gate;
      return end();
    }),
    release,
  };
}

/** The error a statement whose connection dropped (or whose reply was lost) gives its caller. */
const connectionLost = () => Object.assign(new Error('Connection terminated unexpectedly'), { code: 'ECONNRESET' });

async function until<T>(read: () => Promise<T>, ok: (v: T) => boolean, what: string): Promise<T> {
  let last: T | undefined;
  await waitFor(
    async () => {
      last = await read();
      return ok(last);
    },
    { what: () => `${what}; last: ${JSON.stringify(last)}`, timeoutMs: 20_000 },
  );
  return last as T;
}

describe('round records kept for the heartbeat', () => {
  const kept = (job: string, outcome?: IdleRound['outcome']): IdleRound => ({ job, slot: '2026-12-05T00:00:00Z', startedMs: 0, finishedMs: 1, note: null, outcome });
  it('over the cap the idle ones go first, then the oldest with an outcome', () => {
    const rounds = new IdleRounds();
    rounds.add(kept('failed_first', { status: 'failed', items: 0, error: 'x', timeoutMs: 1 }));
    for (let i = 0; i < MAX_PENDING; i++) rounds.add(kept('idle'));
    const all = rounds.take();
    expect(all).toHaveLength(MAX_PENDING);
    expect(all[0]!.job).toBe('failed_first');
    const failures = Array.from({ length: MAX_PENDING + 1 }, (_, i) => kept(`f${i}`, { status: 'failed', items: 0, error: 'x', timeoutMs: 1 }));
    rounds.restore(failures);
    expect(rounds.take().map((r) => r.job)).toEqual(failures.slice(1).map((r) => r.job));
  });
});

/** Replica `a`'s round runner on `db`, its idle rounds kept for a heartbeat as in the runtime. */
const runnerOn = (db: Db) =>
  new RoundRunner({
    db,
    clock: systemClock,
    lock: new MemoryLeaderLock(systemClock, 'a'),
    log: silentLogger(),
    metrics: new Metrics(),
    instanceId: 'a',
    toleratedFutureMs: 500,
    shutdown: new AbortController().signal,
    deferIdleRecords: true,
  });

describe.each(BACKENDS)('instance round records on $name', (backend) => {
  let db: Db;
  let cleanup: () => Promise<void>;
  let runner: RoundRunner;
  let records: RunRecords;
  let registry: InstanceRegistry;
  beforeAll(async () => {
    ({ db, cleanup } = await backend.open());
    runner = runnerOn(db);
    records = new RunRecords(db);
    registry = new InstanceRegistry(db, systemClock, { instanceId: 'a', env: 'test', mode: 'cluster', httpPort: null, version: 'test', heartbeatMs: 5000 });
    await registry.register();
  });
  afterAll(async () => cleanup());
  /** A runner whose statements writing job_runs fail with `err` while it is set (the outage that failed the round, say). */
  const refusingRunner = () => {
    let err: Error | null = null;
    let afterRunning = false;
    const refusing = new Proxy(db, {
      get(target, key) {
        const v = Reflect.get(target, key) as unknown;
        if (key !== 'query' || typeof v !== 'function') return typeof v === 'function' ? v.bind(target) : v;
        return async (sql: string, params?: unknown[]) => {
          if (!err || !/(INSERT INTO|UPDATE) job_runs/.test(sql)) return target.query(sql, params);
          // A reply lost after the commit: the statement ran, the caller sees the connection error.
          if (afterRunning) await target.query(sql, params);
          throw err;
        };
      },
    });
    const r = runnerOn(refusing);
    return { runner: r, refuse: (e: Error | null, o: { afterRunning?: boolean } = {}) => ((err = e), (afterRunning = o.afterRunning ?? false)) };
  };
  const slot = () => new Date(Math.floor(Date.now() / 1000) * 1000);
  /** Its round's `running` row, once written (a second after the round started). */
  const runningRecord = async (name: string) =>
    (
      await until(
        () => records.recent(name),
        (rs) => rs.length === 1,
        'a running record',
      )
    )[0];

  it('a no-work round writes no job_runs row; the beat writes its finished record and per-replica health reads it as healthy', async () => {
    const j = job('idle_one', async () => ({ items: 0, note: 'nothing' }));
    await runner.slotClaims.ensureJobs([j.name]);
    const before = (await db.query<{ x: unknown }>(`SELECT now() AS x`)).rows[0]!.x as Date;
    const report = await runner.run(j, slot());
    expect(report.ran && report.outcome.status).toBe('no_work');
    expect(await records.recent(j.name)).toEqual([]);

    await registry.beat(0, null, [], null, runner.idleRounds.take());
    const [rec] = await records.recent(j.name);
    expect(rec).toMatchObject({ status: 'no_work', scope: 'instance', trigger: 'schedule', instance_id: 'a', items: 0, note: 'nothing' });
    expect(rec!.finished_at!.getTime()).toBeGreaterThanOrEqual(rec!.started_at.getTime());
    expect(rec!.started_at.getTime()).toBeGreaterThanOrEqual(new Date(before).getTime() - 1000);

    const rounds = await records.replicaRounds([j.name], ['a']);
    const judged = judgeReplicas({
      settings: j.settings,
      snapshot: (await records.snapshots()).get(j.name),
      replicas: [{ instanceId: 'a', startedAt: new Date(Date.now() - 60_000), lastRound: rounds.get(j.name)?.get('a') ?? null }],
      since: new Date(Date.now() - 60_000),
      abortGraceMs: 1000,
    });
    expect(judged.verdict.health).toBe('healthy');
    expect(judged.replicas[0]!.reason).toMatch(/^last round no_work at /);
  });

  it('a failed beat keeps the idle rounds for the next one', async () => {
    const j = job('idle_kept', async () => ({ items: 0 }));
    await runner.slotClaims.ensureJobs([j.name]);
    await runner.run(j, slot());
    const batch = runner.idleRounds.take();
    runner.idleRounds.restore(batch);
    await registry.beat(0, null, [], null, runner.idleRounds.take());
    expect((await records.recent(j.name)).map((r) => r.status)).toEqual(['no_work']);
  });

  it('a round that does work or fails is recorded at once, finished, in one row', async () => {
    const busy = job('busy_one', async () => ({ items: 2 }));
    const bad = job('bad_one', async () => {
      throw new Error('upstream said no');
    });
    await runner.slotClaims.ensureJobs([busy.name, bad.name]);
    await runner.run(busy, slot());
    await runner.run(bad, slot());
    expect(await records.recent(busy.name)).toMatchObject([{ status: 'ok', items: 2, scope: 'instance' }]);
    expect(await records.recent(bad.name)).toMatchObject([{ status: 'failed', error: 'upstream said no' }]);
    expect(runner.idleRounds.take()).toEqual([]);
  });

  it('a failed round whose record cannot reach the database (a connection error) is kept and written, outcome and deadline, by the next beat that gets through', async () => {
    const { runner: r, refuse } = refusingRunner();
    // A message cut mid-emoji (a lone surrogate: jsonb refuses it) with a NUL in it (text refuses it): stored with both mended.
    const bad = job('bad_while_down', async () => {
      throw new Error('upstream\u0000 unreachable \ud83d');
    });
    await r.slotClaims.ensureJobs([bad.name]);
    refuse(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6432'), { code: 'ECONNREFUSED' }));
    const report = await r.run(bad, slot());
    expect(report.ran && report.outcome.status).toBe('failed');
    expect(await records.recent(bad.name)).toEqual([]);
    refuse(null);
    // Kept for the heartbeat (a beat that fails gives it back: 'a failed beat keeps the idle rounds'); the next beat writes it.
    const kept = r.idleRounds.take();
    expect(kept).toHaveLength(1);
    await registry.beat(0, null, [], null, kept);
    const recs = await records.recent(bad.name);
    expect(recs).toHaveLength(1);
    const rec = recs[0];
    expect(rec).toMatchObject({ status: 'failed', error: 'upstream unreachable \ufffd', items: 0, scope: 'instance', trigger: 'schedule', instance_id: 'a' });
    expect(rec!.deadline_at!.getTime() - rec!.started_at.getTime()).toBe(20_000);
    expect(rec!.finished_at!.getTime()).toBeGreaterThanOrEqual(rec!.started_at.getTime());
  });

  it('a round past a second whose completion cannot reach the database has its running row completed by the next beat that gets through (once, however many beats carry it)', async () => {
    const { runner: r, refuse } = refusingRunner();
    const { job: slow, release } = gatedJob('slow_while_down', () => {
      throw new Error('upstream gone');
    });
    await r.slotClaims.ensureJobs([slow.name]);
    const done = r.run(slow, slot());
    const running = await runningRecord(slow.name);
    refuse(connectionLost());
    release();
    expect((await done).ran).toBe(true);
    refuse(null);
    expect(await records.recent(slow.name)).toMatchObject([{ id: running!.id, status: 'running' }]);
    const kept = r.idleRounds.take();
    expect(kept).toMatchObject([{ job: slow.name, runId: running!.id, outcome: { status: 'failed', error: 'upstream gone' } }]);
    await registry.beat(0, null, [], null, kept);
    // A beat whose reply was lost is sent again with the same rounds: the row is completed once, not inserted.
    await registry.beat(0, null, [], null, kept);
    const recs = await records.recent(slow.name);
    expect(recs).toMatchObject([{ id: running!.id, status: 'failed', error: 'upstream gone', scope: 'instance' }]);
    expect(recs[0]!.finished_at!.getTime()).toBeGreaterThanOrEqual(recs[0]!.started_at.getTime());
  });

  it('a record that committed with its reply lost is kept, and the beat does not write it twice; an idle round of the same slot is still written', async () => {
    const { runner: r, refuse } = refusingRunner();
    const bad = job('bad_reply_lost', async () => {
      throw new Error('no');
    });
    await r.slotClaims.ensureJobs([bad.name]);
    const s = slot();
    refuse(connectionLost(), { afterRunning: true });
    expect((await r.run(bad, s)).ran).toBe(true);
    refuse(null);
    expect(await records.recent(bad.name)).toMatchObject([{ status: 'failed' }]);
    const kept = r.idleRounds.take();
    expect(kept).toMatchObject([{ job: bad.name, outcome: { status: 'failed' } }]);
    await registry.beat(0, null, [], null, kept);
    expect(await records.recent(bad.name)).toMatchObject([{ status: 'failed' }]);
    // The check is for kept outcomes only: an idle round is written whatever is there.
    await registry.beat(0, null, [], null, [{ job: bad.name, slot: s.toISOString(), startedMs: Date.now(), finishedMs: Date.now(), note: null }]);
    expect((await records.recent(bad.name)).map((x) => x.status).sort()).toEqual(['failed', 'no_work']);
  });

  it('a running record that committed with its reply lost is completed by the round, not left running beside a new row', async () => {
    const { runner: r, refuse } = refusingRunner();
    const { job: slow, release } = gatedJob('slow_start_lost', () => ({ items: 3 }));
    await r.slotClaims.ensureJobs([slow.name]);
    refuse(connectionLost(), { afterRunning: true });
    const done = r.run(slow, slot());
    const running = await runningRecord(slow.name);
    refuse(null);
    release();
    expect((await done).ran).toBe(true);
    expect(await records.recent(slow.name)).toMatchObject([{ id: running!.id, status: 'ok', items: 3 }]);
    expect(r.idleRounds.take()).toEqual([]);
  });

  it('a record refused for its content is not kept for the heartbeat (it would fail every beat): the runner retries and logs it as before', async () => {
    const { runner: r, refuse } = refusingRunner();
    const bad = job('bad_content', async () => {
      throw new Error('no');
    });
    await r.slotClaims.ensureJobs([bad.name]);
    refuse(Object.assign(new Error('invalid byte sequence for encoding "UTF8": 0x00'), { code: '22021' }));
    expect((await r.run(bad, slot())).ran).toBe(true);
    refuse(null);
    expect(r.idleRounds.take()).toEqual([]);
  });

  it('a replica whose row was pruned while it ran (frozen or cut off a week) registers again at its next beat, its rounds in flight kept', async () => {
    const gone = new InstanceRegistry(db, systemClock, { instanceId: 'gone-1', env: 'test', mode: 'cluster', httpPort: null, version: 'test', heartbeatMs: 5000 });
    await gone.register();
    await db.query(`INSERT INTO job_runs (job_name, slot, scope, trigger, instance_id, status, started_at) VALUES ('busy_gone', now(), 'instance', 'schedule', 'gone-1', 'running', now())`);
    await db.query(`DELETE FROM instances WHERE instance_id = 'gone-1'`);
    const beat = await gone.beat(0, null, [], null, []);
    expect(beat).toMatchObject({ mine: true, registeredAgain: true });
    const { rows } = await db.query<{ boot_id: string }>(`SELECT boot_id FROM instances WHERE instance_id = 'gone-1'`);
    expect(rows.map((x) => x.boot_id)).toEqual([gone.bootId]);
    expect((await records.recent('busy_gone')).map((x) => x.status)).toEqual(['running']);
    // The next beat is an ordinary one.
    const next = await gone.beat(0, null, [], null, []);
    expect([next.mine, next.registeredAgain]).toEqual([true, undefined]);
    await gone.markStopped();
  });

  it('a round still running gets its running record (with its deadline, so stuck is seen on time), then completes it', async () => {
    const { job: j, release } = gatedJob('slow_one', () => ({ items: 0 }));
    await runner.slotClaims.ensureJobs([j.name]);
    const done = runner.run(j, slot());
    const running = await runningRecord(j.name);
    expect(running).toMatchObject({ status: 'running', scope: 'instance' });
    expect(running!.deadline_at!.getTime() - running!.started_at.getTime()).toBe(20_000);
    release();
    await done;
    expect(await records.recent(j.name)).toMatchObject([{ id: running!.id, status: 'no_work' }]);
    expect(runner.idleRounds.take()).toEqual([]);
  });
});
