import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PgDb } from '../src/store/pg-db.js';
import { freshDatabase } from './helpers/services.js';

/**
 * A pg client runs one statement at a time; a second one sent while it is busy lands in pg's
 * deprecated internal queue (a DeprecationWarning now, an error in pg 9). Callers share pinned
 * connections (the heartbeat and shutdown on the liveness session) and run statements side by
 * side inside transactions, so PgDb puts each client's statements in line itself.
 */
describe('PgDb: one statement at a time per client', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let pgdb: PgDb;
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);

  beforeAll(async () => {
    db = await freshDatabase();
    pgdb = await PgDb.connect({ url: db.url, poolSize: 2, connectTimeoutMs: 5000 });
    process.on('warning', onWarning);
  });
  afterAll(async () => {
    process.off('warning', onWarning);
    await pgdb.close();
    await db.drop();
  });

  it('side-by-side statements on a pinned connection and in a transaction run in order, without the deprecated queue', async () => {
    const pinned = await pgdb.pin();
    try {
      const order: number[] = [];
      await Promise.all([1, 2, 3, 4].map((i) => pinned.query(`SELECT pg_sleep(0.05), $1::int AS i`, [i]).then((r) => order.push(Number(r.rows[0]!.i)))));
      expect(order).toEqual([1, 2, 3, 4]);
    } finally {
      pinned.release();
    }
    const sums = await pgdb.tx((q) => Promise.all([1, 2, 3].map((i) => q.query<{ s: number }>(`SELECT $1::int + 1 AS s`, [i]))));
    expect(sums.map((r) => r.rows[0]!.s)).toEqual([2, 3, 4]);
    // A statement that fails inside a transaction while others are running: rolled back after them.
    await expect(pgdb.tx((q) => Promise.all([q.query(`SELECT pg_sleep(0.05)`), q.query(`SELECT 1/0`)]))).rejects.toThrow(/division by zero/);
    await new Promise((r) => setImmediate(r));
    expect(warnings.filter((w) => /already executing a query/.test(w))).toEqual([]);
  });
});
