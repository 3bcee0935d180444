import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { HELD_BY_ME, LIVENESS_NS, LivenessSession } from '../src/coordination/liveness.js';
import { SlotClaims } from '../src/coordination/slot-claim.js';
import { FencedCursors, FencedWriteRefused } from '../src/coordination/fenced-cursor.js';
import { MemoryLeaderLock } from '../src/coordination/leader-lock.js';
import { RoundRunner } from '../src/scheduler/round-runner.js';
import { RunRecords } from '../src/coordination/run-records.js';
import type { JobDefinition } from '../src/scheduler/job.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { sleep, systemClock } from '../src/time/clock.js';
import { freshDatabase } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';
import { Deadline } from '../src/time/deadline.js';
import { InstanceRegistry } from '../src/coordination/instance-registry.js';
import { instanceAliveSql } from '../src/coordination/instance-alive.js';
import { InstanceHeartbeat } from '../src/app/instance-heartbeat.js';
import { SkipCounter } from '../src/coordination/skip-counter.js';
import { Memberships } from '../src/coordination/memberships.js';
import type { Config } from '../src/config/load.js';

/**
 * The crash detector (docs/coordination.md, "Crash detection"): a lease whose holder's liveness
 * session is gone is free at once; a lease whose holder is alive is not, however long it has
 * been silent; a holder whose own session drops stops its round at once.
 */
describe('liveness sessions on PostgreSQL', () => {
  let db: PgDb;
  let drop: () => Promise<void>;
  const sessions: LivenessSession[] = [];
  const session = async () => {
    const s = new LivenessSession(db, silentLogger(), 100);
    await s.start();
    sessions.push(s);
    return s;
  };
  beforeAll(async () => {
    const fresh = await freshDatabase({ migrated: true });
    drop = fresh.drop;
    db = await PgDb.connect({ url: fresh.url, poolSize: 8, connectTimeoutMs: 5000 });
    await migrate(db);
  });
  afterAll(async () => {
    for (const s of sessions) await s.stop(Deadline.within(systemClock, 1000));
    await db.close();
    await drop();
  });

  const backendOf = async (key: number) =>
    (await db.query<{ pid: number }>(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND classid = $1::int::oid AND objid = $2::int::oid AND granted`, [LIVENESS_NS, key]))
      .rows[0]?.pid;

  it('the renewals of several rounds held at once are one statement; a stale token is refused in it', async () => {
    const a = new SlotClaims(db, 'a');
    const jobs = ['rb1', 'rb2', 'rb3'];
    await a.ensureJobs(jobs);
    const s0 = new Date(Math.floor(Date.now() / 1000) * 1000 - 60_000);
    const claims = [];
    for (const job of jobs) {
      const c = await a.claimScheduled({ job, slot: s0, leaseMs: 60_000, timeoutMs: 30_000, backend: 'postgres', toleratedFutureMs: 500 });
      if (!c.claimed) throw new Error(`not claimed: ${c.reason}`);
      claims.push(c.claim);
    }
    const before = a.renewals.batches;
    const stale = { ...claims[1]!, token: claims[1]!.token - 1 };
    expect(await Promise.all([a.renew(claims[0]!, 90_000), a.renew(stale, 90_000), a.renew(claims[2]!, 90_000)])).toEqual([true, false, true]);
    expect(a.renewals.batches - before).toBe(1);
    const { rows } = await db.query<{ job_name: string; left_s: number }>(
      `SELECT job_name, extract(epoch FROM lease_until - clock_timestamp())::float8 AS left_s FROM job_state WHERE job_name = ANY($1) ORDER BY job_name`,
      [jobs],
    );
    expect(rows.map((r) => [r.job_name, r.left_s > 80])).toEqual([
      ['rb1', true],
      ['rb2', false],
      ['rb3', true],
    ]);
  });

  it('a live holder keeps its lease until it expires; a dead holder loses it at once, with its token fenced off', async () => {
    const la = await session();
    const lb = await session();
    expect(la.key).not.toBeNull();
    expect(la.key).not.toBe(lb.key);
    const a = new SlotClaims(db, 'a');
    const b = new SlotClaims(db, 'b');
    await a.ensureJobs(['lv']);
    const s0 = new Date(Math.floor(Date.now() / 1000) * 1000 - 60_000);
    const p = { job: 'lv', leaseMs: 60_000, timeoutMs: 30_000, backend: 'postgres' as const, toleratedFutureMs: 500 };
    const ca = await a.claimScheduled({ ...p, slot: s0, aliveKey: la.key });
    expect(ca.claimed).toBe(true);
    if (!ca.claimed) return;
    await new FencedCursors(db).write('lv', 'w', 1, ca.claim.token);

    // Alive (its session holds the key): the next slot is refused, the lease is still a's.
    const refused = await b.claimScheduled({ ...p, slot: new Date(s0.getTime() + 1000), aliveKey: lb.key });
    expect(refused).toMatchObject({ claimed: false, reason: expect.stringMatching(/lease held by a/) });

    // Dead: the session ends as a killed process's would (the server frees its locks). No waiting for the 60 s lease.
    await db.query('SELECT pg_terminate_backend($1)', [await backendOf(la.key!)]);
    const cb = await waitFor(
      async () => {
        const r = await b.claimScheduled({ ...p, slot: new Date(s0.getTime() + 2000), aliveKey: lb.key });
        return r.claimed ? r.claim : null;
      },
      { what: 'the take-over', intervalMs: 25 },
    );
    expect(cb.token).toBeGreaterThan(ca.claim.token);
    expect(await a.renew(ca.claim, 60_000)).toBe(false);
    await expect(new FencedCursors(db).write('lv', 'w', 2, ca.claim.token)).rejects.toBeInstanceOf(FencedWriteRefused);
    const old = await new RunRecords(db).get(ca.claim.runId);
    expect(old).toMatchObject({ status: 'failed', error: expect.stringMatching(/^abandoned: its instance died/) });
    // a's session notices and opens a new one under a new key.
    await waitFor(async () => la.key !== null, { what: 'a new liveness key', intervalMs: 25 });
  });

  it('a claim without a liveness key (lease mode, embedded) waits for expiry as before', async () => {
    const lb = await session();
    const a = new SlotClaims(db, 'a');
    const b = new SlotClaims(db, 'b');
    await a.ensureJobs(['nolv']);
    const s0 = new Date(Math.floor(Date.now() / 1000) * 1000 - 60_000);
    const p = { job: 'nolv', leaseMs: 60_000, timeoutMs: 30_000, backend: 'postgres' as const, toleratedFutureMs: 500 };
    expect((await a.claimScheduled({ ...p, slot: s0, aliveKey: null })).claimed).toBe(true);
    const r = await b.claimScheduled({ ...p, slot: new Date(s0.getTime() + 1000), aliveKey: lb.key });
    expect(r).toMatchObject({ claimed: false, reason: expect.stringMatching(/lease held by a/) });
  });

  it('a holder whose liveness session drops aborts its round at once, and another replica runs the next slot', async () => {
    const la = await session();
    const lb = await session();
    const deps = { db, clock: systemClock, log: silentLogger(), metrics: new Metrics(), toleratedFutureMs: 500, shutdown: new AbortController().signal };
    const ra = new RoundRunner({ ...deps, lock: new MemoryLeaderLock(systemClock, 'a'), instanceId: 'a', liveness: la });
    const rb = new RoundRunner({ ...deps, lock: new MemoryLeaderLock(systemClock, 'b'), instanceId: 'b', liveness: lb });
    await ra.slotClaims.ensureJobs(['lvround']);
    let started!: () => void;
    const running = new Promise<void>((r) => (started = r));
    const j: JobDefinition = {
      name: 'lvround',
      description: 'waits for its signal',
      scope: 'cluster',
      settings: { enabled: true, schedule: { kind: 'every', everyMs: 1000 }, timeoutMs: 20_000, lockTtlMs: 30_000, jitterMs: 0 },
      run: async (ctx) => {
        started();
        await sleep(ctx.clock, 20_000, ctx.signal);
        ctx.signal.throwIfAborted();
        return { items: 1 };
      },
    };
    const s0 = Math.floor(Date.now() / 1000) * 1000 - 30_000;
    const roundA = ra.run(j, new Date(s0));
    await running;
    await db.query('SELECT pg_terminate_backend($1)', [await backendOf(la.key!)]);
    const rep = await roundA;
    // Aborted by the session's own drop (its connection's error event): the 20 s timeout would have
    // recorded timed_out, a lease renewal a different "lease lost" reason; the first abort is the one recorded.
    expect(rep.ran && rep.outcome).toMatchObject({ status: 'failed', error: expect.stringMatching(/^lease lost: liveness session dropped/) });
    const rb1 = await rb.run({ ...j, run: async () => ({ items: 1 }) }, new Date(s0 + 1000));
    expect(rb1.ran).toBe(true);
  });
  it('a statement the server refuses on the liveness session keeps the key and its lock; one that ends the session loses it', async () => {
    const s = await session();
    const key = s.key!;
    const lost: string[] = [];
    s.onLost((_k, reason) => lost.push(reason));
    const checked = (expr: string) => s.queryChecked<{ held: boolean }>(`SELECT ${expr}, ${HELD_BY_ME} AS held`, [], 'held');
    // A data error in what the statement carries, and a statement_timeout such as an operator sets on the role.
    await expect(checked('1 / 0 AS x')).rejects.toMatchObject({ code: '22012' });
    await checked("set_config('statement_timeout', '50', false) AS x");
    await expect(checked('pg_sleep(2) AS x')).rejects.toMatchObject({ code: '57014' });
    await checked("set_config('statement_timeout', '0', false) AS x");
    expect(lost).toEqual([]);
    expect(s.key).toBe(key);
    expect(await backendOf(key)).toBeDefined();
    expect((await checked('1 AS x'))?.[0]?.held).toBe(true);
    // The server ending the session from inside a statement (FATAL, 57P01): the key goes, once.
    await expect(checked('pg_terminate_backend(pg_backend_pid()) AS x')).rejects.toMatchObject({ code: '57P01' });
    expect(lost).toHaveLength(1);
    expect(lost[0]).toMatch(/terminating connection/);
    expect(s.key).toBeNull();
    await waitFor(() => s.key !== null && s.key !== key, { what: 'a new liveness session with a new key' });
  });
  it('a reopened liveness session is published by a beat at once, not a heartbeat later: the replica is alive again for the others', async () => {
    const s = await session();
    const id = 'lv-publish';
    const every = 60_000; // the regular beat would come a minute later
    const registry = new InstanceRegistry(db, systemClock, {
      instanceId: id,
      env: 'test',
      mode: 'cluster',
      httpPort: null,
      version: 't',
      heartbeatMs: every,
      memberships: ['alpha'],
      joined: ['alpha'],
    });
    await registry.register();
    const config = { cluster: { instance_heartbeat: every, max_clock_skew: 1000 }, instance: { id } } as unknown as Config;
    const heartbeat = new InstanceHeartbeat({
      config,
      registry,
      metrics: new Metrics({ defaultMetrics: false }),
      log: silentLogger(),
      clock: systemClock,
      views: async () => [],
      skips: new SkipCounter(),
      liveness: s,
      memberships: new Memberships(id, ['alpha'], ['alpha']),
    });
    heartbeat.start();
    try {
      // Alive as the others judge it (memberships, refresh leases): its published key still granted.
      const row = async () =>
        (await db.query<{ alive_key: number | null; alive: boolean }>(`SELECT alive_key, ${instanceAliveSql('instances', String(3 * every))} AS alive FROM instances WHERE instance_id = $1`, [id]))
          .rows[0];
      const first = s.key!;
      await waitFor(async () => (await row())?.alive_key === first, { what: 'the first beat publishing the key' });
      await db.query('SELECT pg_terminate_backend($1)', [await backendOf(first)]);
      const second = await waitFor(() => (s.key !== null && s.key !== first ? s.key : undefined), { what: 'a new liveness session with a new key' });
      let last: unknown;
      await waitFor(async () => (last = await row()) && (last as { alive_key: number }).alive_key === second, {
        what: () => `the new key ${second} published at once (the row: ${JSON.stringify(last)})`,
        timeoutMs: 15_000,
      });
      expect((await row())?.alive).toBe(true);
    } finally {
      await heartbeat.stop(Deadline.within(systemClock, 1000));
    }
  });
});
