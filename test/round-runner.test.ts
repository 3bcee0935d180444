import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../src/store/db.js';
import { MemoryLeaderLock } from '../src/coordination/leader-lock.js';
import { RoundRunner } from '../src/scheduler/round-runner.js';
import { RunRecords } from '../src/coordination/run-records.js';
import { SlotClaims } from '../src/coordination/slot-claim.js';
import type { JobDefinition, JobContext } from '../src/scheduler/job.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock, sleep } from '../src/time/clock.js';
import { FencedWriteRefused } from '../src/coordination/fenced-cursor.js';
import { BACKENDS } from './helpers/backends.js';
import { captureLogs } from './helpers/log-capture.js';
import { pace } from './helpers/wait.js';

function job(name: string, run: (ctx: JobContext) => Promise<{ items: number; note?: string }>, over: Partial<JobDefinition['settings']> = {}): JobDefinition {
  return { name, description: name, scope: 'cluster', settings: { enabled: true, schedule: { kind: 'every', everyMs: 1000 }, timeoutMs: 2000, lockTtlMs: 3000, jitterMs: 0, ...over }, run };
}

function runner(db: Db, instanceId: string, shutdown = new AbortController().signal) {
  return new RoundRunner({ db, clock: systemClock, lock: new MemoryLeaderLock(systemClock, instanceId), log: silentLogger(), metrics: new Metrics(), instanceId, toleratedFutureMs: 500, shutdown });
}

describe.each(BACKENDS)('RoundRunner on $name', (backend) => {
  let db: Db;
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    ({ db, cleanup } = await backend.open());
  });
  afterAll(async () => cleanup());

  it('split brain (both replicas hold "the" lock): the slot claim still lets exactly one run', async () => {
    let runs = 0;
    const j = job('split', async () => {
      runs++;
      await pace(50); // the run lasts a moment, so both replicas' attempts overlap it
      return { items: 1 };
    });
    const a = runner(db, 'a');
    const b = runner(db, 'b');
    await a.slotClaims.ensureJobs(['split']);
    const slot = new Date(Math.floor(Date.now() / 1000) * 1000);
    const [ra, rb] = await Promise.all([a.run(j, slot), b.run(j, slot)]);
    expect(runs).toBe(1);
    expect([ra.ran, rb.ran].sort()).toEqual([false, true]);
    const recs = await new RunRecords(db).recent('split');
    expect(recs.filter((r) => r.status === 'ok')).toHaveLength(1);
    // The loser wrote nothing for the slot: its skip is counted, with the reason, for the heartbeat's summary.
    expect(recs).toHaveLength(1);
    const skips = [...a.skips.take(), ...b.skips.take()];
    expect(skips).toMatchObject([{ job: 'split', n: 1, reason: expect.stringMatching(/already claimed|lease held/) }]);
  });

  it('records ok, no_work, failed and timed_out with items, error and duration', async () => {
    const r = runner(db, 'a');
    const jobs = {
      ok: job('o_ok', async () => ({ items: 3, note: 'three' })),
      none: job('o_none', async () => ({ items: 0 })),
      fail: job('o_fail', async () => {
        throw new Error('upstream said no');
      }),
      slow: job(
        'o_slow',
        async (ctx) => {
          await sleep(ctx.clock, 10_000, ctx.signal);
          ctx.signal.throwIfAborted();
          return { items: 1 };
        },
        { timeoutMs: 150, lockTtlMs: 1000 },
      ),
    };
    await r.slotClaims.ensureJobs(Object.values(jobs).map((j) => j.name));
    // Past slots: a slot more than 500 ms ahead of the database clock would be refused.
    const slot = new Date(Math.floor(Date.now() / 1000) * 1000 - 10_000);
    const out = await Promise.all(Object.values(jobs).map((j) => r.run(j, slot)));
    const status = out.map((o) => (o.ran ? o.outcome.status : 'skipped'));
    expect(status).toEqual(['ok', 'no_work', 'failed', 'timed_out']);
    const records = new RunRecords(db);
    const [ok] = await records.recent('o_ok');
    expect(ok).toMatchObject({ status: 'ok', items: 3, note: 'three', instance_id: 'a', lock_backend: 'memory' });
    expect(ok!.finished_at!.getTime()).toBeGreaterThanOrEqual(ok!.started_at.getTime());
    expect((await records.recent('o_fail'))[0]).toMatchObject({ status: 'failed', error: 'upstream said no' });
    expect((await records.recent('o_slow'))[0]).toMatchObject({ status: 'timed_out', error: 'timed out after 150ms (jobs.o_slow.timeout)' });
    // The lease is free again after every outcome.
    expect((await r.run(jobs.fail, new Date(slot.getTime() + 1000))).ran).toBe(true);
  });

  it('a lease taken over mid-round aborts the round and refuses its fenced writes', async () => {
    let writeError: unknown = null;
    const j = job(
      'fenced',
      async (ctx) => {
        await ctx.cursor.write('watermark', 1);
        // Another replica takes over (what an expired lease allows): newer token, lease reassigned.
        await ctx.db.query(`UPDATE job_state SET fencing_token = fencing_token + 1, holder_instance = 'thief' WHERE job_name = 'fenced'`);
        await sleep(ctx.clock, 5000, ctx.signal);
        try {
          await ctx.cursor.write('watermark', 2);
        } catch (err) {
          writeError = err;
        }
        ctx.signal.throwIfAborted();
        return { items: 1 };
      },
      { timeoutMs: 3000, lockTtlMs: 600 },
    );
    const r = runner(db, 'a');
    await r.slotClaims.ensureJobs(['fenced']);
    const rep = await r.run(j, new Date(Math.floor(Date.now() / 1000) * 1000));
    // Aborted by the renewal that found the lease gone: the 3 s timeout would have recorded
    // timed_out ("timed out after 3s"), and the first abort is the one recorded.
    expect(rep.ran && rep.outcome).toMatchObject({ status: 'failed', error: expect.stringMatching(/^lease lost: /) });
    expect(writeError).toBeTruthy();
    expect(String(writeError)).toMatch(/fenced write refused/);
    const cur = await db.query(`SELECT value FROM job_cursors WHERE job_name = 'fenced'`);
    expect(cur.rows[0]!.value).toBe(1);
  });

  it('a fenced write from an older token is refused by the database even when the writer does not know', async () => {
    const claims = new SlotClaims(db, 'x');
    await claims.ensureJobs(['fw']);
    const j = job('fw', async (ctx) => {
      await ctx.db.query(`UPDATE job_state SET fencing_token = fencing_token + 1 WHERE job_name = 'fw'`);
      await ctx.cursor.write('k', 'v');
      return { items: 1 };
    });
    const rep = await runner(db, 'a').run(j, new Date(Math.floor(Date.now() / 1000) * 1000));
    expect(rep.ran && rep.outcome.status).toBe('failed');
    expect(rep.ran && rep.outcome.error).toMatch(new FencedWriteRefused('fw', 'k', 0).message.slice(0, 20));
  });

  it('shutdown aborts a running round through its signal', async () => {
    const stop = new AbortController();
    const j = job(
      'sd',
      async (ctx) => {
        await sleep(ctx.clock, 10_000, ctx.signal);
        ctx.signal.throwIfAborted();
        return { items: 1 };
      },
      { timeoutMs: 20_000, lockTtlMs: 25_000 },
    );
    const r = runner(db, 'a', stop.signal);
    await r.slotClaims.ensureJobs(['sd']);
    const p = r.run(j, new Date(Math.floor(Date.now() / 1000) * 1000));
    setTimeout(() => stop.abort(), 100);
    const rep = await p;
    expect(rep.ran && rep.outcome).toMatchObject({ status: 'failed', error: 'process is shutting down' });
  });
});

describe('instance-scoped rounds', () => {
  it('run on every replica for the same slot, each with its own token and record, no lease', async () => {
    const [pglite] = BACKENDS.filter((b) => b.name === 'pglite');
    const { db, cleanup } = await pglite!.open();
    try {
      const j: JobDefinition = { ...job('per_instance', async () => ({ items: 1 })), scope: 'instance' };
      const a = runner(db, 'a');
      const b = runner(db, 'b');
      await a.slotClaims.ensureJobs(['per_instance']);
      const slot = new Date(Math.floor(Date.now() / 1000) * 1000);
      const [ra, rb] = await Promise.all([a.run(j, slot), b.run(j, slot)]);
      expect(ra.ran && rb.ran).toBe(true);
      if (ra.ran && rb.ran) expect(ra.token).not.toBe(rb.token);
      const recs = await new RunRecords(db).recent('per_instance');
      expect(recs.map((r) => [r.instance_id, r.status, r.scope]).sort()).toEqual([
        ['a', 'ok', 'instance'],
        ['b', 'ok', 'instance'],
      ]);
    } finally {
      await cleanup();
    }
  });
});

describe('round log levels', () => {
  it('a scheduled round with no work logs at debug unless the job asks for info; work and failures stay at info/error', async () => {
    const { logger, lines } = captureLogs('a', 'info');
    const backend = BACKENDS[0]!;
    const { db, cleanup } = await backend.open();
    try {
      const r = new RoundRunner({
        db,
        clock: systemClock,
        lock: new MemoryLeaderLock(systemClock, 'a'),
        log: logger,
        metrics: new Metrics(),
        instanceId: 'a',
        toleratedFutureMs: 500,
        shutdown: new AbortController().signal,
      });
      const quiet = job('l_quiet', async () => ({ items: 0 }));
      const loud = job('l_loud', async () => ({ items: 0 }), { noWorkLog: 'info' });
      const busy = job('l_busy', async () => ({ items: 2 }));
      await r.slotClaims.ensureJobs(['l_quiet', 'l_loud', 'l_busy']);
      const slot = new Date(Math.floor(Date.now() / 1000) * 1000);
      for (const j of [quiet, loud, busy]) expect((await r.run(j, slot)).ran).toBe(true);
      const finished = lines.filter((l) => l.msg === 'round finished').map((l) => [l.job, l.status]);
      expect(finished).toEqual([
        ['l_loud', 'no_work'],
        ['l_busy', 'ok'],
      ]);
      expect(lines.filter((l) => l.msg === 'round started')).toEqual([]);
    } finally {
      await cleanup();
    }
  });
});
