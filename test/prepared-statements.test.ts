import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { PgDb } from '../src/store/pg-db.js';
import { MAX_NAMED_STATEMENTS } from '../src/store/prepared-statements.js';
import { usePreparedStatements } from '../src/app/backends.js';
import { loadConfig } from '../src/app/config-schema.js';
import { PgBouncer, hasPgbouncer } from './helpers/pgbouncer.js';
import { TEST_MASTER_KEY, freshDatabase } from './helpers/services.js';

/** The names of the statements prepared on one connection of `db`. */
async function preparedOnOneConnection(db: PgDb, run: (q: { query: PgDb['query'] }) => Promise<void>): Promise<string[]> {
  const pin = await db.pin();
  try {
    await run(pin);
    const { rows } = await pin.query<{ name: string }>('SELECT name FROM pg_prepared_statements ORDER BY name');
    return rows.map((r) => r.name);
  } finally {
    pin.release();
  }
}

describe('database.prepared_statements on PostgreSQL', () => {
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  const dbs: PgDb[] = [];
  const open = (preparedStatements: boolean, poolSize = 1, onPreparedRefused?: (r: string) => void) => {
    const db = new PgDb({ url: fresh.url, poolSize, connectTimeoutMs: 5000, preparedStatements, onPreparedRefused });
    dbs.push(db);
    return db;
  };
  beforeAll(async () => {
    fresh = await freshDatabase();
  });
  afterEach(async () => {
    await Promise.all(dbs.splice(0).map((d) => d.close()));
  });
  afterAll(async () => {
    await fresh.drop();
  });

  it('a parametrised statement is prepared once per connection and answers as before; one without parameters is not', async () => {
    const db = open(true);
    const names = await preparedOnOneConnection(db, async (q) => {
      for (let i = 0; i < 7; i++) expect((await q.query<{ n: number }>('SELECT $1::int + 1 AS n', [i])).rows).toEqual([{ n: i + 1 }]);
      await q.query('SELECT 2 AS two');
    });
    expect(names).toHaveLength(1);
    expect(names[0]).toMatch(/^rj_[0-9a-f]{40}$/);
    // The pool's own path (not pinned) answers the same through its named statement.
    expect((await db.query<{ n: number }>('SELECT $1::int + 1 AS n', [41])).rows).toEqual([{ n: 42 }]);
  });

  it('when-direct (auto): a direct connection is seen as itself, and names its statements', async () => {
    const db = await PgDb.connect({ url: fresh.url, poolSize: 1, connectTimeoutMs: 5000, preparedStatements: 'when-direct' });
    dbs.push(db);
    expect([db.prepared.route, db.prepared.active]).toEqual(['direct', true]);
    expect(await preparedOnOneConnection(db, async (q) => void (await q.query('SELECT $1::int AS n', [1])))).toHaveLength(1);
  });

  it('when-direct over a Unix socket: nothing to compare (PgBouncer may listen on one), so they stay off', async () => {
    const db = await PgDb.connect({ url: `postgres://postgres@/${fresh.name}?host=/var/run/postgresql`, poolSize: 1, connectTimeoutMs: 5000, preparedStatements: 'when-direct' });
    dbs.push(db);
    expect([db.prepared.route, db.prepared.active]).toEqual(['pooled', false]);
  });

  it('a statement gone from a direct connection (26000): that text is resent and runs unnamed, the pool keeps naming the others', async () => {
    const db = await PgDb.connect({ url: fresh.url, poolSize: 1, connectTimeoutMs: 5000, preparedStatements: 'when-direct', onPreparedRefused: (r) => expect.fail(r) });
    dbs.push(db);
    const pin = await db.pin();
    try {
      expect((await pin.query('SELECT $1::int + 1 AS n', [1])).rows).toEqual([{ n: 2 }]);
      await pin.exec('DEALLOCATE ALL'); // node-postgres still holds the name as parsed on this connection
      expect((await pin.query('SELECT $1::int + 1 AS n', [2])).rows).toEqual([{ n: 3 }]);
      expect((await pin.query('SELECT $1::int + 1 AS n', [3])).rows).toEqual([{ n: 4 }]);
      expect(db.prepared.active).toBe(true);
      await pin.query('SELECT $1::int AS other', [1]);
      expect((await pin.query<{ statement: string }>('SELECT statement FROM pg_prepared_statements')).rows).toEqual([{ statement: 'SELECT $1::int AS other' }]);
      // A value node-postgres cannot convert fails that query alone.
      const circular: Record<string, unknown> = {};
      circular.self = circular;
      await expect(pin.query('SELECT $1::jsonb AS j', [circular])).rejects.toThrow(/circular/i);
      expect((await pin.query('SELECT $1::jsonb AS j', [{ a: 1 }])).rows).toEqual([{ j: { a: 1 } }]);
    } finally {
      pin.release();
    }
  });

  it('a refusal inside a pinned connection\'s own transaction is not resent (it would fail as "transaction aborted"): the real error', async () => {
    const db = open(true);
    await db.exec('CREATE TABLE ps_pin (id int PRIMARY KEY, a text); INSERT INTO ps_pin VALUES (1, $$x$$)');
    const pin = await db.pin();
    try {
      const read = () => pin.query<Record<string, unknown>>('SELECT * FROM ps_pin WHERE id = $1', [1]);
      expect((await read()).rows).toEqual([{ id: 1, a: 'x' }]);
      await pin.exec('ALTER TABLE ps_pin ADD COLUMN b int DEFAULT 7');
      await pin.exec('BEGIN');
      await expect(read()).rejects.toMatchObject({ code: '0A000' });
      await pin.exec('ROLLBACK');
      expect((await read()).rows).toEqual([{ id: 1, a: 'x', b: 7 }]); // outside the transaction: unnamed from now on
    } finally {
      pin.release();
    }
  });

  it('off (the default of a PgDb, and database.prepared_statements: off): nothing is prepared', async () => {
    const names = await preparedOnOneConnection(open(false), async (q) => {
      for (let i = 0; i < 3; i++) await q.query('SELECT $1::int AS n', [i]);
    });
    expect(names).toEqual([]);
  });

  it('a table changed under a prepared statement (another replica migrated): sent again unprepared, and from then on', async () => {
    const db = open(true);
    await db.exec('CREATE TABLE ps_t (id int PRIMARY KEY, a text); INSERT INTO ps_t VALUES (1, $$x$$)');
    const read = () => db.query<Record<string, unknown>>('SELECT * FROM ps_t WHERE id = $1', [1]);
    expect((await read()).rows).toEqual([{ id: 1, a: 'x' }]);
    await db.exec('ALTER TABLE ps_t ADD COLUMN b int DEFAULT 7');
    // PostgreSQL answers the cached statement with 0A000 "cached plan must not change result type".
    expect((await read()).rows).toEqual([{ id: 1, a: 'x', b: 7 }]);
    expect((await read()).rows).toEqual([{ id: 1, a: 'x', b: 7 }]);
    expect(db.prepared.active).toBe(true); // only that text runs unprepared
  });

  it('names at most MAX_NAMED_STATEMENTS texts per pool (texts built at run time do not grow every connection)', async () => {
    const db = open(true);
    const names = await preparedOnOneConnection(db, async (q) => {
      for (let i = 0; i < MAX_NAMED_STATEMENTS + 20; i++) await q.query(`SELECT $1::int + ${i} AS n`, [1]);
    });
    expect(names).toHaveLength(MAX_NAMED_STATEMENTS);
  });

  it('auto: on DATABASE_URL when the first connection is seen directly, always on the direct session; on and off as said', () => {
    const config = (env: Record<string, string>) =>
      loadConfig({ env: { DATABASE_URL: 'postgres://db/x', REDIS_URL: 'redis://r', RELAY_JOBS_INSTANCE_ID: 'a', RELAY_JOBS_ENV: 'e', RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY, ...env } });
    expect(usePreparedStatements(config({}), 'url')).toBe('when-direct');
    const bouncer = config({ DATABASE_DIRECT_URL: 'postgres://db-direct/x' });
    expect([usePreparedStatements(bouncer, 'url'), usePreparedStatements(bouncer, 'direct_url')]).toEqual(['when-direct', true]);
    const on = config({ DATABASE_DIRECT_URL: 'postgres://db-direct/x', RELAY_JOBS__DATABASE__PREPARED_STATEMENTS: 'on' });
    expect(usePreparedStatements(on, 'url')).toBe(true);
    const off = config({ RELAY_JOBS__DATABASE__PREPARED_STATEMENTS: 'off' });
    expect([usePreparedStatements(off, 'url'), usePreparedStatements(off, 'direct_url')]).toEqual([false, false]);
    expect(() => config({ RELAY_JOBS__DATABASE__PREPARED_STATEMENTS: 'yes' })).toThrow(/database\.prepared_statements/);
  });
});

describe.runIf(hasPgbouncer())('database.prepared_statements behind a PgBouncer in transaction mode that cannot keep them (1.18; 1.21+ with max_prepared_statements = 0)', () => {
  let bouncer: PgBouncer;
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  beforeAll(async () => {
    [bouncer, fresh] = await Promise.all([PgBouncer.start('transaction', { settings: { default_pool_size: '2' } }), freshDatabase()]);
  });
  afterAll(async () => {
    await bouncer?.stop();
    await fresh?.drop();
  });

  it("auto finds the pooler at connect (the server sees PgBouncer's port, not this connection's) and prepares nothing", async () => {
    const db = await PgDb.connect({ url: bouncer.url(fresh.name), poolSize: 4, connectTimeoutMs: 5000, preparedStatements: 'when-direct', onPreparedRefused: (r) => expect.fail(r) });
    try {
      expect([db.prepared.route, db.prepared.active]).toEqual(['pooled', false]);
      const answers = await Promise.all(Array.from({ length: 24 }, (_, i) => db.query<{ n: number }>('SELECT $1::int * 2 AS n', [i])));
      expect(answers.map((a) => a.rows[0]!.n)).toEqual(Array.from({ length: 24 }, (_, i) => i * 2));
    } finally {
      await db.close();
    }
  });

  it('on: the first refusal turns them off for the pool with one warning; every statement outside a transaction still answers', async () => {
    const refusals: string[] = [];
    const db = new PgDb({ url: bouncer.url(fresh.name), poolSize: 6, connectTimeoutMs: 5000, preparedStatements: true, onPreparedRefused: (r) => refusals.push(r) });
    try {
      // Six client connections over two server connections: a statement prepared on one server
      // connection is missing on the other (26000) or there already (42P05).
      for (let round = 0; round < 5; round++) {
        const answers = await Promise.all(Array.from({ length: 24 }, (_, i) => db.query<{ n: number }>('SELECT $1::int * 2 AS n, pg_sleep(0.001)::text AS s', [i])));
        expect(answers.map((a) => a.rows[0]!.n)).toEqual(Array.from({ length: 24 }, (_, i) => i * 2));
      }
      expect(refusals).toHaveLength(1);
      expect(refusals[0]).toMatch(/^(26000: prepared statement "rj_[0-9a-f]{40}" does not exist|42P05: prepared statement "rj_[0-9a-f]{40}" already exists)$/);
      expect(db.prepared.active).toBe(false);
      // A transaction now runs unprepared from its first statement.
      expect(await db.tx(async (q) => (await q.query<{ n: number }>('SELECT $1::int AS n', [5])).rows[0]!.n)).toBe(5);
    } finally {
      await db.close();
    }
  });
});
