import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../src/store/db.js';
import { MemoryLeaderLock } from '../src/coordination/leader-lock.js';
import { RoundRunner } from '../src/scheduler/round-runner.js';
import { JobPauses } from '../src/coordination/job-pauses.js';
import { PauseBook, PAUSE_TOPIC } from '../src/scheduler/pause-book.js';
import { WakeHub } from '../src/workers/wake-hub.js';
import type { JobDefinition, JobScope } from '../src/scheduler/job.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { BACKENDS } from './helpers/backends.js';
import { waitFor } from './helpers/wait.js';
import { Deadline } from '../src/time/deadline.js';

/**
 * Pause and resume below the process level (issue 49): the claim statement refuses a paused
 * cluster job atomically (a pause racing claims never lets a round start after it), the pause book
 * keeps instance rounds from starting, a manual round is refused unless forced, and a skipped slot
 * is counted with the reason `paused by …`. The end-to-end proof is test/job-pause.e2e.test.ts.
 */
function job(name: string, scope: JobScope, counter: { runs: number }): JobDefinition {
  return {
    name,
    description: name,
    scope,
    settings: { enabled: true, schedule: { kind: 'every', everyMs: 1000 }, timeoutMs: 2000, lockTtlMs: 3000, jitterMs: 0 },
    run: async () => {
      counter.runs++;
      return { items: 1 };
    },
  };
}

function runner(db: Db, instanceId: string, pauses?: PauseBook, lock = new MemoryLeaderLock(systemClock, instanceId)) {
  return new RoundRunner({
    db,
    clock: systemClock,
    lock,
    log: silentLogger(),
    metrics: new Metrics(),
    instanceId,
    toleratedFutureMs: 500,
    shutdown: new AbortController().signal,
    pauses,
    deferIdleRecords: true,
  });
}

const book = (db: Db) => new PauseBook({ store: new JobPauses(db), clock: systemClock, log: silentLogger(), pollMs: 60_000 });

describe.each(BACKENDS)('pause and resume on $name', (backend) => {
  let db: Db;
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    ({ db, cleanup } = await backend.open());
  });
  afterAll(async () => cleanup());

  it('a paused cluster job: the claim refuses scheduled and manual rounds without a book, force runs one, resume runs again', async () => {
    const n = { runs: 0 };
    const j = job('p_cluster', 'cluster', n);
    const r = runner(db, 'a'); // no pause book: only the claim statement stands in the way
    await r.slotClaims.ensureJobs([j.name]);
    const pauses = new JobPauses(db);
    await pauses.pause(j.name, 'tester', 'maintenance');
    const slot = new Date(Math.floor(Date.now() / 1000) * 1000 - 1000);
    const [scheduled, manual] = [await r.run(j, slot), await r.run(j, null)];
    for (const rep of [scheduled, manual]) expect(rep).toMatchObject({ ran: false, reason: expect.stringMatching(/^paused by tester at .*: maintenance$/), paused: { by: 'tester' } });
    expect(n.runs).toBe(0);
    expect(r.skips.take()).toMatchObject([{ job: j.name, n: 1, reason: expect.stringMatching(/^paused by tester/) }]);
    // No job_runs row for either: a paused job's slot is counted, a refused manual round answered.
    expect((await db.query(`SELECT count(*)::int AS n FROM job_runs WHERE job_name = $1`, [j.name])).rows[0]!.n).toBe(0);
    expect(await r.run(j, null, undefined, { force: true })).toMatchObject({ ran: true, outcome: { status: 'ok' } });
    expect((await pauses.get(j.name))?.reason).toBe('maintenance'); // forcing a round keeps the pause
    expect(await pauses.resume(j.name, 'tester')).toMatchObject({ changed: true, was: { reason: 'maintenance' } });
    expect(await r.run(j, new Date(slot.getTime() + 1000))).toMatchObject({ ran: true });
    expect(n.runs).toBe(2);
  });

  it('a manual run of a paused cluster job whose leader lock is held elsewhere is refused as paused, not busy', async () => {
    const n = { runs: 0 };
    const j = job('p_locked', 'cluster', n);
    // The lock held as a replica skipping the paused slot holds it for a moment (job-pause.e2e met it there).
    const lock = new MemoryLeaderLock(systemClock, 'b');
    const r = runner(db, 'a', undefined, lock);
    await r.slotClaims.ensureJobs([j.name]);
    const pauses = new JobPauses(db);
    await pauses.pause(j.name, 'tester', 'maintenance');
    const held = await lock.acquire(j.name, 60_000);
    expect(held.acquired).toBe(true);
    expect(await r.run(j, null)).toMatchObject({ ran: false, reason: expect.stringMatching(/^paused by tester at .*: maintenance$/), paused: { by: 'tester' } });
    // Forced, the pause is no reason; the held lock still is.
    expect(await r.run(j, null, undefined, { force: true })).toMatchObject({ ran: false, reason: expect.stringMatching(/^leader lock \(memory\) held by /) });
    expect(n.runs).toBe(0);
  });

  it('a pause racing claims: every round the claim admitted started before the pause, none after', async () => {
    const n = { runs: 0 };
    const j = job('p_race', 'cluster', n);
    const r = runner(db, 'a');
    await r.slotClaims.ensureJobs([j.name]);
    const pauses = new JobPauses(db);
    const base = Math.floor(Date.now() / 1000) * 1000 - 60_000;
    const outcomes = { ran: 0, refused: 0 };
    for (let i = 0; i < 15; i++) {
      const [report, p] = await Promise.all([r.run(j, new Date(base + i * 1000)), pauses.pause(j.name, 'racer', `round ${i}`)]);
      if (report.ran) {
        outcomes.ran++;
        // Compared in the database: the round's start against this pause's audit time, which is its paused_at.
        // PostgreSQL's clock has microseconds; PGlite's has milliseconds (two statements in one millisecond
        // read the same clock_timestamp()), so there a start in the pause's millisecond cannot be ordered.
        const { rows } = await db.query<{ before: boolean }>(
          `SELECT r.started_at ${backend.name === 'pglite' ? '<=' : '<'} a.at AS before FROM job_runs r, job_pause_audit a
            WHERE r.id = $1 AND a.id = (SELECT max(id) FROM job_pause_audit WHERE job_name = $2 AND action = 'pause')`,
          [report.runId, j.name],
        );
        expect(rows[0]!.before, `round ${i} started after the pause ${p.pause.at.toISOString()}`).toBe(true);
      } else {
        outcomes.refused++;
        expect(report.paused?.reason).toBe(`round ${i}`);
      }
      await pauses.resume(j.name, 'racer');
    }
    expect(outcomes.ran + outcomes.refused).toBe(15);
    // The audit has one pause and one resume per iteration, in order.
    const audit = await pauses.audit(j.name, 100);
    expect(audit).toHaveLength(30);
    expect(audit.at(-1)).toMatchObject({ action: 'pause', actor: 'racer', reason: 'round 0' });
  });

  it('instance rounds: the pause book skips them (reason paused), a stale book is brought up to date by the job_pauses wake-up; manual rounds read the database', async () => {
    const n = { runs: 0 };
    const j = job('p_inst', 'instance', n);
    const bookA = book(db);
    const bookB = book(db);
    const a = runner(db, 'a', bookA);
    const b = runner(db, 'b', bookB);
    await a.slotClaims.ensureJobs([j.name]);
    await Promise.all([bookA.load(), bookB.load()]);
    const hub = new WakeHub(true, 60_000);
    bookB.listen(hub);
    bookB.start();
    try {
      expect(await bookA.pause(j.name, 'operator', 'provider down')).toMatchObject({ changed: true, pause: { by: 'operator', reason: 'provider down' } });
      expect(await bookA.pause(j.name, 'someone else', 'again')).toMatchObject({ changed: false, pause: { by: 'operator', reason: 'provider down' } });
      const slot = new Date(Math.floor(Date.now() / 1000) * 1000);
      expect(await a.run(j, slot)).toMatchObject({ ran: false, paused: { reason: 'provider down' } });
      expect(a.skips.take()).toMatchObject([{ job: j.name, reason: expect.stringMatching(/^paused by operator at .*: provider down$/) }]);
      // A manual round on the replica whose copy is stale is refused all the same: it reads the database.
      expect(await b.run(j, null)).toMatchObject({ ran: false, paused: { by: 'operator' } });
      expect(n.runs).toBe(0);
      // The notification (emitted here by hand; the migration's trigger sends it on PostgreSQL) makes B re-read.
      hub.emit(PAUSE_TOPIC);
      await waitFor(() => bookB.get(j.name)?.reason === 'provider down', { what: "replica b's pause book to learn the pause", timeoutMs: 10_000, intervalMs: 20 });
      expect(await b.run(j, slot)).toMatchObject({ ran: false, paused: { by: 'operator' } });
      expect(await b.run(j, null, undefined, { force: true })).toMatchObject({ ran: true });
      expect(n.runs).toBe(1);
      expect(await bookA.resume(j.name, 'operator', 'back')).toMatchObject({ changed: true });
      expect(await bookA.resume(j.name, 'operator')).toMatchObject({ changed: false, was: null });
      hub.emit(PAUSE_TOPIC);
      await waitFor(() => bookB.get(j.name) === null, { what: "replica b's pause book to learn the resume", timeoutMs: 10_000, intervalMs: 20 });
      expect(await b.run(j, new Date(slot.getTime() + 1000))).toMatchObject({ ran: true });
      expect((await bookA.audit(j.name)).map((x) => [x.action, x.actor, x.reason])).toEqual([
        ['resume', 'operator', 'back'],
        ['pause', 'operator', 'provider down'],
      ]);
    } finally {
      await bookB.stop(Deadline.within(systemClock, 1000));
    }
  });
});
