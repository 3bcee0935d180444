import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { FallbackLeaderLock, MemoryLeaderLock, RedisLeaderLock } from '../src/coordination/leader-lock.js';
import { PgAdvisoryLock } from '../src/coordination/advisory-lock.js';
import { LivenessSession } from '../src/coordination/liveness.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { leaderKey } from '../src/coordination/keys.js';
import { connectRedis, type RedisClient } from '../src/coordination/redis-client.js';
import { PgDb } from '../src/store/pg-db.js';
import { ManualClock, systemClock } from '../src/time/clock.js';
import { UserError } from '../src/config/errors.js';
import { REDIS_URL, dropRedisPrefix, freshDatabase, uniqueName, freePort } from './helpers/services.js';
import { nextTurn, waitFor } from './helpers/wait.js';
import { Deadline } from '../src/time/deadline.js';

describe('leader locks on real Redis and PostgreSQL', () => {
  const prefix = uniqueName('rjtest');
  let redis: RedisClient;
  let db: PgDb;
  let drop: () => Promise<void>;
  let dbUrl: string;
  beforeAll(async () => {
    redis = await connectRedis(REDIS_URL, 1000, 2000);
    const fresh = await freshDatabase();
    drop = fresh.drop;
    dbUrl = fresh.url;
    db = await PgDb.connect({ url: fresh.url, poolSize: 5, connectTimeoutMs: 2000 });
  });
  afterAll(async () => {
    await dropRedisPrefix(prefix);
    redis.disconnect();
    await db.close();
    await drop();
  });

  it('SET NX PX: one holder, the owner visible, TTL applied, keys namespaced by env with a hash tag', async () => {
    const a = new RedisLeaderLock(redis, { prefix, env: 'prod' }, 'a');
    const b = new RedisLeaderLock(redis, { prefix, env: 'prod' }, 'b');
    const staging = new RedisLeaderLock(redis, { prefix, env: 'staging' }, 'c');
    const got = await a.acquire('job', 5000);
    expect(got.acquired).toBe(true);
    expect(await b.acquire('job', 5000)).toMatchObject({ acquired: false, backend: 'redis', holder: 'a', heldForSlot: null });
    expect((await staging.acquire('job', 5000)).acquired).toBe(true); // staging never shares production's lock
    const key = leaderKey({ prefix, env: 'prod' }, 'job');
    expect(key).toBe(`${prefix}:prod:{job:job}:leader`);
    const ttl = await redis.pttl(key);
    expect(ttl).toBeGreaterThan(4000);
    if (got.acquired) {
      expect(await got.handle.renew(20_000)).toBe(true);
      expect(await redis.pttl(key)).toBeGreaterThan(15_000);
      await got.handle.release();
    }
    expect(await redis.exists(key)).toBe(0);
    expect((await b.acquire('job', 5000)).acquired).toBe(true);
  });

  it('the lock names the slot it was taken for; a take-over replaces only the value it saw', async () => {
    const a = new RedisLeaderLock(redis, { prefix, env: 'slots' }, 'a');
    const b = new RedisLeaderLock(redis, { prefix, env: 'slots' }, 'b');
    const c = new RedisLeaderLock(redis, { prefix, env: 'slots' }, 'c');
    const key = leaderKey({ prefix, env: 'slots' }, 'job');
    expect((await a.acquire('job', 5000, 1_000)).acquired).toBe(true);
    const seenByB = await b.acquire('job', 5000, 2_000);
    const seenByC = await c.acquire('job', 5000, 2_000);
    expect(seenByB).toMatchObject({ acquired: false, holder: 'a', heldForSlot: 1_000 });
    if (seenByB.acquired || seenByC.acquired) throw new Error('unreachable');
    const hb = await seenByB.takeOver!(5000);
    expect(await redis.get(key)).toMatch(/^b:2000:[0-9a-f]{16}$/);
    const hc = await seenByC.takeOver!(5000); // saw a's value, which is gone: no effect
    expect(await redis.get(key)).toMatch(/^b:2000:/);
    expect(await hc.renew(5000)).toBe(false);
    expect(await hb.renew(5000)).toBe(true);
    await hc.release();
    expect(await redis.exists(key)).toBe(1);
    await hb.release();
    expect(await redis.exists(key)).toBe(0);
  });

  it('compare-and-delete: a stale holder cannot release or extend a lock someone else now owns', async () => {
    const a = new RedisLeaderLock(redis, { prefix, env: 'cas' }, 'a');
    const b = new RedisLeaderLock(redis, { prefix, env: 'cas' }, 'b');
    const first = await a.acquire('job', 100);
    await waitFor(async () => (await redis.exists(leaderKey({ prefix, env: 'cas' }, 'job'))) === 0, { what: "a's 100 ms lock expired in Redis", intervalMs: 10 });
    const second = await b.acquire('job', 5000);
    expect(first.acquired && second.acquired).toBe(true);
    if (!first.acquired) return;
    expect(await first.handle.renew(5000)).toBe(false);
    await first.handle.release();
    expect(await redis.get(leaderKey({ prefix, env: 'cas' }, 'job'))).toMatch(/^b:/);
  });

  it('advisory lock: exclusive while held, free after release or when its connection dies', async () => {
    const lock = new PgAdvisoryLock(db, { prefix, env: 'pg' });
    const first = await lock.acquire('job', 0);
    expect(first.acquired).toBe(true);
    expect(await lock.acquire('job', 0)).toMatchObject({ acquired: false, backend: 'postgres' });
    const other = new PgAdvisoryLock(db, { prefix, env: 'pg' });
    expect(await other.acquire('job', 0)).toMatchObject({ acquired: false, backend: 'postgres', holder: null });
    other.close();
    if (first.acquired) {
      expect(await first.handle.renew(0)).toBe(true);
      await first.handle.release();
    }
    const again = await lock.acquire('job', 0);
    expect(again.acquired).toBe(true);
    if (again.acquired) await again.handle.release();
    lock.close();
  });

  it('Redis outage at full load: the fallback holds every job lock on the one liveness session, the pool stays free', async () => {
    // A pool of 2: the liveness session takes one; twelve rounds starting at once must leave the other to the work.
    const small = await PgDb.connect({ url: dbUrl, poolSize: 2, connectTimeoutMs: 1000 });
    const liveness = new LivenessSession(small, silentLogger(), 100);
    await liveness.start();
    try {
      const lock = new PgAdvisoryLock(small, { prefix, env: 'herd' }, liveness, 'r1');
      const jobs = Array.from({ length: 12 }, (_, i) => `job${i}`);
      const got = await Promise.all(jobs.map((j) => lock.acquire(j, 0)));
      expect(got.every((g) => g.acquired)).toBe(true);
      expect(lock.ownSessions).toBe(0);
      // The pool's other connection is free for the rounds' own statements.
      await small.query('SELECT 1');
      const { rows } = await db.query<{ n: number; pids: number }>(
        `SELECT count(*)::int AS n, count(DISTINCT pid)::int AS pids FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
      );
      expect(rows[0]).toEqual({ n: 12, pids: 1 });
      // Exclusive against another replica, and against this one (a session lock is re-entrant; the lock is not).
      const other = new PgAdvisoryLock(db, { prefix, env: 'herd' }, undefined, 'r2');
      expect(await other.acquire('job0', 0)).toMatchObject({ acquired: false, backend: 'postgres' });
      expect(await lock.acquire('job0', 0)).toMatchObject({ acquired: false, backend: 'postgres', holder: 'r1' });
      for (const g of got) if (g.acquired) expect(await g.handle.renew(0)).toBe(true);
      for (const g of got.slice(0, 6)) if (g.acquired) await g.handle.release();
      const freed = await other.acquire('job0', 0);
      expect(freed.acquired).toBe(true);
      expect(other.ownSessions).toBe(1); // no liveness session: one session of its own, whatever it holds
      if (freed.acquired) await freed.handle.release();
      other.close();
      // The liveness session lost: its locks went with it, renewal says so, and the other replica may take them.
      await liveness.stop(Deadline.within(systemClock, 1000));
      for (const g of got.slice(6)) if (g.acquired) expect(await g.handle.renew(0)).toBe(false);
      const after = new PgAdvisoryLock(db, { prefix, env: 'herd' });
      const taken = await after.acquire('job11', 0);
      expect(taken.acquired).toBe(true);
      if (taken.acquired) await taken.handle.release();
      after.close();
    } finally {
      await liveness.stop(Deadline.within(systemClock, 1000));
      await small.close();
    }
  });

  it('pinning and releasing one pooled connection many times leaves no listeners behind', async () => {
    const one = await PgDb.connect({ url: dbUrl, poolSize: 1, connectTimeoutMs: 2000 });
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    try {
      const lock = new PgAdvisoryLock(one, { prefix, env: 'pins' });
      for (let i = 0; i < 15; i++) {
        const got = await lock.acquire('job', 0);
        if (got.acquired) await got.handle.release();
      }
      lock.close();
      // The lock keeps one session for all its acquires (and destroys it on close), so the pooled
      // client is pinned and released over and over only here, where a leaked listener piles up.
      for (let i = 0; i < 15; i++) (await one.pin()).release();
      // A MaxListenersExceededWarning is added synchronously by `on()` but emitted through
      // process.emitWarning, which defers the 'warning' event to process.nextTick: one turn has run it.
      await nextTurn();
      expect(warnings).not.toContain('MaxListenersExceededWarning');
    } finally {
      process.off('warning', onWarning);
      await one.close();
    }
  });

  it('falls back to the advisory lock on a Redis error, not when the lock is merely held', async () => {
    const port = await freePort();
    const dead = new Redis(`redis://127.0.0.1:${port}`, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
    dead.on('error', () => undefined);
    const errors: string[] = [];
    const fallback = new PgAdvisoryLock(db, { prefix, env: 'fb' });
    const lock = new FallbackLeaderLock(new RedisLeaderLock(dead, { prefix, env: 'fb' }, 'a'), fallback, (e) => errors.push(e.message));
    const got = await lock.acquire('job', 5000);
    expect(got.acquired && got.handle.backend).toBe('postgres');
    expect(errors).toHaveLength(1);
    if (got.acquired) await got.handle.release();
    fallback.close();

    const held = new FallbackLeaderLock(new RedisLeaderLock(redis, { prefix, env: 'fb2' }, 'b'), new PgAdvisoryLock(db, { prefix, env: 'fb2' }), (e) => errors.push(e.message));
    await redis.set(leaderKey({ prefix, env: 'fb2' }, 'job'), 'other:0123456789abcdef', 'PX', 5000);
    expect(await held.acquire('job', 5000)).toMatchObject({ acquired: false, backend: 'redis', holder: 'other' });
    expect(errors).toHaveLength(1);
    dead.disconnect();
  });

  it('memory lock expires by the injected clock', async () => {
    const clock = new ManualClock();
    const lock = new MemoryLeaderLock(clock);
    const a = await lock.acquire('j', 1000);
    expect((await lock.acquire('j', 1000)).acquired).toBe(false);
    await clock.advance(1001);
    expect((await lock.acquire('j', 1000)).acquired).toBe(true);
    if (a.acquired) expect(await a.handle.renew(1000)).toBe(false);
  });

  it('an unreachable Redis at start is a one-line user error naming REDIS_URL', async () => {
    const port = await freePort();
    await expect(connectRedis(`redis://:secret@127.0.0.1:${port}`, 500, 500)).rejects.toThrow(UserError);
    await expect(connectRedis(`redis://:secret@127.0.0.1:${port}`, 500, 500)).rejects.toThrow(/cannot connect to Redis at redis:\/\/:\*\*\*@127\.0\.0\.1:\d+ \(REDIS_URL\)/);
  });
});
