import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Db } from '../src/store/db.js';
import { PgDb } from '../src/store/pg-db.js';
import { PgliteDb } from '../src/store/pglite-db.js';
import { num } from '../src/store/db.js';
import { claimDue, heldBy, reapExpired, releaseLease, renewLease, type LeaseTable } from '../src/store/claim-queue.js';
import { LIVENESS_NS } from '../src/store/liveness-sql.js';
import { LivenessSession } from '../src/coordination/liveness.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { freshDatabase } from './helpers/services.js';
import { waitFor } from './helpers/wait.js';
import { Deadline } from '../src/time/deadline.js';
import { systemClock } from '../src/time/clock.js';

/**
 * The claim queue's invariants, proved once on a table of its own (every claiming store builds
 * its statements from the same functions), on real PostgreSQL and on PGlite:
 * - two claimers never hold one row (concurrent claims take disjoint rows);
 * - a stale fence cannot renew, release or write;
 * - an expired lease is claimable;
 * - a row whose claimer's liveness key no session holds is claimable at once, long before its lease ends.
 */
const T: LeaseTable = { table: 'cq_rows', key: 'id', owner: 'owner', until: 'lease_until', fence: 'fence', aliveKey: 'alive_key' };
const DDL = `CREATE TABLE cq_rows (id bigint PRIMARY KEY, owner text, lease_until timestamptz, fence bigint NOT NULL DEFAULT 0, alive_key integer, payload text)`;
// $1 owner, $2 limit, $3 lease ms, $4 liveness key
const CLAIM = claimDue(T, { due: 'true', order: 'id', limit: '$2', owner: '$1', leaseMs: '$3', aliveKey: '$4', returning: 't.id, t.fence' });
const RENEW = renewLease(T, { key: '$1', fence: '$2', leaseMs: '$3' });
const RENEW_ALIVE = renewLease(T, { key: '$1', fence: '$2', leaseMs: '$3', aliveKey: '$4::int' });
const RELEASE = releaseLease(T, { key: '$1', fence: '$2', set: ['payload = $3'] });
const WRITE = `UPDATE cq_rows SET payload = $3 WHERE id = $1 AND ${heldBy(T, { fence: '$2' })}`;
const REAP = reapExpired(T, { held: 'true' });

type Claimed = { id: number; fence: number };
async function claim(db: Db, owner: string, limit: number, leaseMs: number, key: number | null = null): Promise<Claimed[]> {
  const { rows } = await db.query(CLAIM, [owner, limit, leaseMs, key]);
  return rows.map((r) => ({ id: num(r.id), fence: num(r.fence) }));
}
async function fill(db: Db, n: number): Promise<void> {
  await db.query(`DELETE FROM cq_rows`);
  await db.query(`INSERT INTO cq_rows (id) SELECT g FROM generate_series(1, $1::int) AS g`, [n]);
}

function invariants(name: string, open: () => Promise<{ db: Db; close: () => Promise<void> }>, live: 'session' | 'lock') {
  describe(`claim queue on ${name}`, () => {
    let db: Db;
    let close: () => Promise<void>;
    beforeAll(async () => {
      ({ db, close } = await open());
      await db.query(DDL);
    });
    afterAll(async () => close());

    it('two claimers never hold one row: concurrent claims take disjoint rows, and every row is claimed once', async () => {
      await fill(db, 300);
      const held = new Map<number, string>();
      const claimer = async (owner: string) => {
        for (;;) {
          const got = await claim(db, owner, 7, 60_000);
          if (!got.length) return;
          for (const r of got) {
            expect(held.get(r.id), `row ${r.id} claimed by ${held.get(r.id)} and ${owner}`).toBeUndefined();
            held.set(r.id, owner);
          }
        }
      };
      await Promise.all(['a', 'b', 'c', 'd', 'e', 'f'].map(claimer));
      expect(held.size).toBe(300);
      const { rows } = await db.query(`SELECT count(*) AS n FROM cq_rows WHERE fence = 1 AND owner IS NOT NULL`);
      expect(num(rows[0]!.n)).toBe(300);
      // A held lease is not claimable.
      expect(await claim(db, 'late', 10, 60_000)).toEqual([]);
    });

    it('an expired lease is claimable, and the new claim fences the old holder out of renew, release and writes', async () => {
      await fill(db, 1);
      const [a] = await claim(db, 'a', 1, 60_000);
      expect(a).toBeDefined();
      expect(await claim(db, 'b', 1, 60_000)).toEqual([]);
      // The lease ends (a replica stalled past it).
      await db.query(`UPDATE cq_rows SET lease_until = clock_timestamp() - interval '1 second'`);
      const [b] = await claim(db, 'b', 1, 60_000);
      expect(b).toEqual({ id: a!.id, fence: a!.fence + 1 });
      // The stale holder: nothing it sends matches.
      expect((await db.query(RENEW, [a!.id, a!.fence, 60_000])).rowCount).toBe(0);
      expect((await db.query(WRITE, [a!.id, a!.fence, 'stale'])).rowCount).toBe(0);
      expect((await db.query(RELEASE, [a!.id, a!.fence, 'stale'])).rowCount).toBe(0);
      let row = (await db.query(`SELECT owner, payload, fence FROM cq_rows`)).rows[0]!;
      expect(row.owner).toBe('b');
      expect(row.payload).toBeNull();
      // The current holder: renew, write and release all land.
      expect((await db.query(RENEW, [b!.id, b!.fence, 60_000])).rowCount).toBe(1);
      expect((await db.query(WRITE, [b!.id, b!.fence, 'mine'])).rowCount).toBe(1);
      expect((await db.query(RELEASE, [b!.id, b!.fence, 'done'])).rowCount).toBe(1);
      row = (await db.query(`SELECT owner, lease_until, payload FROM cq_rows`)).rows[0]!;
      expect(row).toMatchObject({ owner: null, lease_until: null, payload: 'done' });
      // Released once: the same fence cannot release or renew it again.
      expect((await db.query(RELEASE, [b!.id, b!.fence, 'twice'])).rowCount).toBe(0);
      expect((await db.query(RENEW, [b!.id, b!.fence, 60_000])).rowCount).toBe(0);
    });

    it('a lease that runs out on its own is claimable again, and the reaper frees it', async () => {
      await fill(db, 2);
      await claim(db, 'a', 2, 1);
      const again = await waitFor(
        async () => {
          const got = await claim(db, 'b', 1, 60_000);
          return got.length ? got : null;
        },
        { what: 'an expired lease to be claimable', intervalMs: 20 },
      );
      expect(again[0]!.fence).toBe(2);
      // The other row's lease ran out too: the reaper frees it (and only it: b's lease holds).
      expect(await waitFor(async () => (await db.query(REAP)).rowCount, { what: 'the reaper', intervalMs: 20 })).toBe(1);
      const { rows } = await db.query(`SELECT id, owner FROM cq_rows ORDER BY id`);
      expect(rows.map((r) => r.owner)).toEqual(['b', null]);
    });

    it("a dead claimer's row is claimable at once, long before its lease ends; a live claimer's is not", async () => {
      await fill(db, 1);
      const holder = await hold(db, live);
      const [a] = await claim(db, 'a', 1, 3_600_000, holder.key);
      expect(a).toBeDefined();
      expect(await claim(db, 'b', 1, 60_000)).toEqual([]); // alive: the hour-long lease holds
      await holder.die();
      const [b] = await waitFor(
        async () => {
          const got = await claim(db, 'b', 1, 60_000);
          return got.length ? got : null;
        },
        { what: 'the dead claimer’s row to be claimable', timeoutMs: 10_000, intervalMs: 20 },
      );
      expect(b!.fence).toBe(a!.fence + 1);
      expect((await db.query(WRITE, [a!.id, a!.fence, 'from the dead'])).rowCount).toBe(0);
    });

    it('a renewal that records the holder’s new liveness key keeps the row held when the old session dies', async () => {
      await fill(db, 1);
      const first = await hold(db, live);
      const [a] = await claim(db, 'a', 1, 3_600_000, first.key);
      // The holder's liveness session is replaced (a lost connection), and it renews under the new key.
      const second = await hold(db, live, 1);
      expect((await db.query(RENEW_ALIVE, [a!.id, a!.fence, 3_600_000, second.key])).rowCount).toBe(1);
      await first.die();
      expect(await claim(db, 'b', 1, 60_000), 'held under the live key').toEqual([]);
      await second.die();
      await waitFor(async () => (await claim(db, 'b', 1, 60_000)).length > 0, { what: 'the row to be claimable once its recorded holder died', timeoutMs: 10_000, intervalMs: 20 });
    });
  });
}

/** A liveness key held by a live "replica" until `die()`: a real LivenessSession on PostgreSQL; the lock itself on PGlite (one session). */
async function hold(db: Db, how: 'session' | 'lock', n = 0): Promise<{ key: number; die: () => Promise<void> }> {
  if (how === 'session') {
    const s = new LivenessSession(db, silentLogger(), 100);
    await s.start();
    const key = s.key!;
    expect(key).not.toBeNull();
    // A crash, not a clean stop: the session's backend is killed, so the server frees its lock.
    const die = async () => {
      await db.query(`SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND classid = $1::int::oid AND objid = $2::int::oid`, [LIVENESS_NS, key]);
      await s.stop(Deadline.within(systemClock, 1000));
    };
    return { key, die };
  }
  const key = 424242 + n;
  await db.query(`SELECT pg_advisory_lock($1::int, $2::int)`, [LIVENESS_NS, key]);
  return { key, die: async () => void (await db.query(`SELECT pg_advisory_unlock($1::int, $2::int)`, [LIVENESS_NS, key])) };
}

invariants(
  'PostgreSQL',
  async () => {
    const fresh = await freshDatabase();
    const db = await PgDb.connect({ url: fresh.url, poolSize: 6, connectTimeoutMs: 5000 });
    return {
      db,
      close: async () => {
        await db.close();
        await fresh.drop();
      },
    };
  },
  'session',
);

invariants(
  'PGlite',
  async () => {
    const db = await PgliteDb.open();
    return { db, close: () => db.close() };
  },
  'lock',
);
