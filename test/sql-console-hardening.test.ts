import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import pg from 'pg';
import { consoleRoleSql, SECRET_COLUMNS } from '../src/areas/admin/store/console-role.js';
import { openSnapshot, SqlConsole, SqlUnavailable, type SqlResult } from '../src/areas/admin/store/sql-console.js';
import { sqlConsoleRole } from '../src/areas/doctor/checks/security.js';
import type { CheckResult } from '../src/areas/doctor/index.js';
import type { Config } from '../src/config/load.js';
import { PgDb } from '../src/store/pg-db.js';
import { PgliteDb } from '../src/store/pglite-db.js';
import { freshDatabase, PG_ADMIN_URL, uniqueName } from './helpers/services.js';
import { embeddedDataDir } from './helpers/pglite-template.js';
import { waitFor } from './helpers/wait.js';

const MB = 1024 * 1024;
const ROOT = join(import.meta.dirname, '..');

/** Peak RSS growth while `fn` runs (sampled every 20 ms), as test/provider-replies.test.ts measures. */
async function rssGrowth<T>(fn: () => Promise<T>): Promise<{ value: T; growthMb: number }> {
  global.gc?.();
  const base = process.memoryUsage().rss;
  let peak = base;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
  try {
    const value = await fn();
    peak = Math.max(peak, process.memoryUsage().rss);
    return { value, growthMb: Math.round((peak - base) / MB) };
  } finally {
    clearInterval(timer);
  }
}

async function admin<T = unknown>(text: string, url = PG_ADMIN_URL): Promise<T[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(text)).rows as T[];
  } finally {
    await c.end();
  }
}

const asRole = (url: string, role: string) => {
  const u = new URL(url);
  u.username = role;
  return u.toString();
};

describe('SQL console hardening (issue 51), cluster: a real PostgreSQL, the migrated schema', () => {
  let database: Awaited<ReturnType<typeof freshDatabase>>;
  const reader = uniqueName('rj_sqlh_reader');
  const readAll = uniqueName('rj_sqlh_readall');
  const owner = uniqueName('rj_sqlh_owner');
  const pools: PgDb[] = [];
  const pool = (role: string, size = 3) => {
    const p = new PgDb({ url: asRole(database.url, role), poolSize: size, connectTimeoutMs: 5000 });
    pools.push(p);
    return p;
  };
  const doctor = (url: string): Promise<CheckResult> =>
    sqlConsoleRole.run({ config: { sql: { database_url: url }, database: { url: database.url, connect_timeout: 5000 } } as unknown as Config } as never) as Promise<CheckResult>;

  beforeAll(async () => {
    database = await freshDatabase({ migrated: true });
    // The recipe of docs/security.md, names replaced.
    const recipe = consoleRoleSql().replace("PASSWORD '…'", '').replaceAll('relay_sql', reader).replace('DATABASE relay ', `DATABASE ${database.name} `);
    await admin(recipe, database.url);
    await admin(`CREATE ROLE ${readAll} LOGIN; GRANT pg_read_all_data TO ${readAll}`);
    // A non-superuser owner of the service's tables (what DATABASE_URL's role usually is).
    await admin(`CREATE ROLE ${owner} LOGIN; ALTER TABLE schema_migrations OWNER TO ${owner}; ALTER TABLE job_runs OWNER TO ${owner}`, database.url);
  }, 60_000);
  afterAll(async () => {
    for (const p of pools) await p.close();
    await database?.drop();
    for (const r of [reader, readAll, owner]) await admin(`DROP OWNED BY ${r} CASCADE; DROP ROLE IF EXISTS ${r}`).catch(() => undefined);
  });

  describe('point 1: the console role', () => {
    it('docs/security.md prints the recipe consoleRoleSql() generates from SECRET_COLUMNS', () => {
      const doc = readFileSync(join(ROOT, 'docs/security.md'), 'utf8');
      const section = doc.slice(doc.indexOf('### SQL console role'));
      const block = /```sql\n([\s\S]*?)\n```/.exec(section)![1];
      expect(block).toBe(consoleRoleSql());
      expect(doc).not.toMatch(/GRANT pg_read_all_data/);
      for (const s of SECRET_COLUMNS) expect(section).toContain(`${s.table}.${s.column}`);
    });

    it('every column of the real schema whose name looks secret is in SECRET_COLUMNS or reviewed as not secret', async () => {
      const notSecret = new Set([
        'idempotency_records.request_hash', // a hash of a request body (replay detection)
        'image_batches.request_hash',
        'notification_channel_slots.token', // a claim token between replicas, not a credential
        'scheduler_outbox.claim_token',
        'accounts.has_refresh_token', // a flag
        'job_state.schedule_fingerprint', // a hash of a job's schedule settings (one schedule per job)
        'job_schedule_votes.fingerprint',
      ]);
      const rows = await admin<{ col: string }>(
        `SELECT c.relname || '.' || a.attname AS col FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
          WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND a.attnum > 0 AND NOT a.attisdropped
            AND a.attname ~ '(sealed|hash|fingerprint|_fp$|password|secret|(^|_)token$|api_key$|credential)' AND a.attname <> 'fencing_token'`,
        database.url,
      );
      const listed = new Set(SECRET_COLUMNS.map((s) => `${s.table}.${s.column}`));
      expect(rows.map((r) => r.col).filter((c) => !listed.has(c) && !notSecret.has(c))).toEqual([]);
      // And every listed column exists (a renamed column would leave the recipe granting it).
      const all = await admin<{ col: string }>(
        `SELECT c.relname || '.' || a.attname AS col FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0`,
        database.url,
      );
      const present = new Set(all.map((r) => r.col));
      expect([...listed].filter((c) => !present.has(c))).toEqual([]);
    });

    it("the recipe's role reads the service's other columns, not a secret column, not pg_authid; the doctor says ok", async () => {
      const c = new pg.Client({ connectionString: asRole(database.url, reader) });
      await c.connect();
      try {
        await c.query('SELECT id, platform, name, status FROM accounts');
        await c.query('SELECT count(*) FROM job_runs');
        for (const s of SECRET_COLUMNS) await expect(c.query(`SELECT ${s.column} FROM ${s.table}`), `${s.table}.${s.column}`).rejects.toThrow(/permission denied/);
        await expect(c.query('SELECT rolname, rolpassword FROM pg_authid')).rejects.toThrow(/permission denied/);
      } finally {
        await c.end();
      }
      const r = await doctor(asRole(database.url, reader));
      expect(r.status, r.measured).toBe('ok');
    });

    it('the doctor fails a pg_read_all_data role (pg_authid, every database, secret columns), naming each', async () => {
      // What the docs' recipe granted before: `SELECT rolpassword FROM pg_authid` works for it.
      expect((await admin<{ n: number }>('SELECT count(*)::int AS n FROM pg_authid', asRole(database.url, readAll)))[0]!.n).toBeGreaterThan(0);
      const r = await doctor(asRole(database.url, readAll));
      expect(r.status).toBe('fail');
      expect(r.measured).toMatch(/pg_read_all_data/);
      expect(r.measured).toMatch(/pg_authid/);
      expect(r.measured).toMatch(/accounts\.credentials_sealed/);
    });

    it('the doctor fails a role granted one secret column, or CONNECT on another database', async () => {
      await admin(`GRANT SELECT (api_key_sealed) ON monitors TO ${reader}`, database.url);
      try {
        const r = await doctor(asRole(database.url, reader));
        expect(r.status).toBe('fail');
        expect(r.measured).toMatch(/secret columns: monitors\.api_key_sealed/);
      } finally {
        await admin(`REVOKE SELECT (api_key_sealed) ON monitors FROM ${reader}`, database.url);
      }
      await admin(`GRANT CONNECT ON DATABASE postgres TO ${reader}`);
      try {
        const r = await doctor(asRole(database.url, reader));
        expect(r.status).toBe('fail');
        expect(r.measured).toMatch(/CONNECT on other databases: postgres/);
      } finally {
        await admin(`REVOKE CONNECT ON DATABASE postgres FROM ${reader}`);
      }
    });

    it("the tables' owner: the doctor fails it and the console refuses it (503 sql_unsafe_role naming the fix)", async () => {
      const r = await doctor(asRole(database.url, owner));
      expect(r.status).toBe('fail');
      expect(r.measured).toContain(`owns the service's tables (as "${owner}")`);
      const sql = new SqlConsole(pool(owner), { statementTimeoutMs: 5000, maxRows: 1000, concurrency: 2 });
      const err = await sql.run('SELECT 1').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SqlUnavailable);
      expect((err as SqlUnavailable).reason).toBe('unsafe_role');
      expect((err as Error).message).toMatch(new RegExp(`refuses to run as role "${owner}": it owns the service's tables.*sql\\.database_url`));
    });
  });

  describe('point 3: replies bounded in bytes', () => {
    it("SELECT repeat('x', 50000000): the reply is cut by bytes, RSS grows under 100 MB", async () => {
      const sql = new SqlConsole(pool(reader), { statementTimeoutMs: 30_000, maxRows: 1000, concurrency: 2, maxReplyBytes: 4 * MB, yieldCheckMs: 0 });
      await sql.run('SELECT 1'); // the connection and the parser warm
      const { value, growthMb } = await rssGrowth(() => sql.run("SELECT 'a' AS small, repeat('x', 50000000) AS big"));
      console.log(`cluster: SELECT repeat('x', 50000000): RSS growth ${growthMb} MB`);
      expect(value).toEqual({ columns: ['small', 'big'], rows: [], truncated: true, cut: { reason: 'bytes', limit: 4 * MB } } satisfies SqlResult);
      expect(growthMb).toBeLessThan(100);
    }, 60_000);

    it('many rows: the reply stops before the row that takes it past the limit; types and order kept; the row cut unchanged', async () => {
      const sql = new SqlConsole(pool(reader), { statementTimeoutMs: 30_000, maxRows: 1000, concurrency: 2, maxReplyBytes: MB, yieldCheckMs: 0 });
      const r = await sql.run("SELECT g, g AS g, now() AS at, repeat('y', 100000) AS v FROM generate_series(1, 50) g ORDER BY g DESC");
      expect(r.cut).toEqual({ reason: 'bytes', limit: MB });
      expect(r.rows.length).toBeGreaterThanOrEqual(9);
      expect(r.rows.length).toBeLessThanOrEqual(10);
      expect(r.rows[0]).toMatchObject({ g: 50, at: expect.any(Date) });
      expect(r.columns).toEqual(['g', 'at', 'v']);
      const rows = await sql.run('SELECT g FROM generate_series(1, 5000) g');
      expect(rows).toMatchObject({ truncated: true, cut: { reason: 'rows', limit: 1000 } });
      expect(await sql.run('SELECT 1 AS one')).toEqual({ columns: ['one'], rows: [{ one: 1 }], truncated: false, cut: null });
    });
  });

  describe('point 2, the console half: the console never holds up the service', () => {
    beforeAll(async () => {
      await admin(`CREATE TABLE lockme (id int); INSERT INTO lockme VALUES (1); GRANT SELECT ON lockme TO ${reader}`, database.url);
    });

    it('a console statement holding a table is cancelled when DDL waits for it: DDL and the inserts behind it answer before it would end', async () => {
      // 30 s of sleep and a 60 s timeout: the DDL and the insert could otherwise only answer after 30 s.
      const sql = new SqlConsole(pool(reader), { statementTimeoutMs: 60_000, maxRows: 1000, concurrency: 2 });
      const held = sql.run('SELECT count(*), pg_sleep(30) FROM lockme').catch((e: unknown) => e);
      const owner = new pg.Client({ connectionString: database.url });
      await owner.connect();
      try {
        await waitFor(async () => (await owner.query(`SELECT 1 FROM pg_locks WHERE relation = 'lockme'::regclass AND granted AND mode = 'AccessShareLock'`)).rowCount, {
          what: 'the console statement to hold lockme',
          timeoutMs: 10_000,
          intervalMs: 20,
        });
        const started = Date.now();
        const insert = new pg.Client({ connectionString: database.url });
        await insert.connect();
        const ddl = owner.query('ALTER TABLE lockme ADD COLUMN x int');
        const ins = insert.query('INSERT INTO lockme (id) VALUES (2)');
        await ddl;
        await ins;
        const tookMs = Date.now() - started;
        await insert.end();
        console.log(`DDL + insert behind a console statement holding the table: ${tookMs} ms`);
        // The statement was cancelled by the console's watch for waiters (the message names the DDL
        // that waited); run to its end, it would have answered rows after 30 s, not this error.
        const err = await held;
        expect(err).toBeInstanceOf(SqlUnavailable);
        expect((err as SqlUnavailable).reason).toBe('locked');
        expect((err as Error).message).toMatch(/held a lock that lockme \(AccessExclusiveLock, session \d+\) waited for/);
        // Within a few of the watch's 200 ms checks, far from the 30 s the statement would have held them.
        expect(tookMs).toBeLessThan(5000);
      } finally {
        await owner.end();
      }
    }, 90_000);

    it('a console statement waiting behind a lock gives up after the 1 s lock_timeout (409 sql_locked), not the statement timeout', async () => {
      const sql = new SqlConsole(pool(reader), { statementTimeoutMs: 10_000, maxRows: 1000, concurrency: 2 });
      const owner = new pg.Client({ connectionString: database.url });
      await owner.connect();
      try {
        await owner.query('BEGIN; LOCK TABLE lockme IN ACCESS EXCLUSIVE MODE');
        const err = await sql.run('SELECT * FROM lockme').catch((e: unknown) => e);
        // The lock_timeout's own error (55P03): the 10 s statement timeout would have answered 57014
        // ("canceling statement due to statement timeout"), which is not a SqlUnavailable.
        expect(err).toBeInstanceOf(SqlUnavailable);
        expect((err as SqlUnavailable).reason).toBe('locked');
        expect((err as Error).message).toMatch(/waited more than 1000 ms for a lock/);
      } finally {
        await owner.query('ROLLBACK');
        await owner.end();
      }
    });
  });
});

describe('SQL console hardening (issue 51), embedded: the snapshot thread (real PGlite)', () => {
  const dir = embeddedDataDir(mkdtempSync(join(tmpdir(), 'rj-sqlh-')), { migrated: false });
  let db: PgliteDb;
  let snapshot: ReturnType<typeof openSnapshot>;
  beforeAll(async () => {
    db = await PgliteDb.open(dir);
    snapshot = openSnapshot(db, join(dir, 'sql-snapshots'), 600_000);
  }, 120_000);
  afterAll(async () => {
    await snapshot?.close();
    await db?.close();
  });

  it("point 3: SELECT repeat('x', 50000000) is cut by bytes, RSS grows under 100 MB; small replies and types unchanged", async () => {
    const sql = new SqlConsole(db, { statementTimeoutMs: 120_000, maxRows: 1000, concurrency: 1, maxReplyBytes: 4 * MB }, snapshot);
    expect(await sql.run("SELECT 1 AS one, 'a'::text AS a, '\\x0102'::bytea AS b")).toEqual({
      columns: ['one', 'a', 'b'],
      rows: [{ one: 1, a: 'a', b: new Uint8Array([1, 2]) }],
      truncated: false,
      cut: null,
    });
    const { value, growthMb } = await rssGrowth(() => sql.run("SELECT 'a' AS small, repeat('x', 50000000) AS big"));
    console.log(`embedded: SELECT repeat('x', 50000000): RSS growth ${growthMb} MB`);
    expect(value).toEqual({ columns: ['small', 'big'], rows: [], truncated: true, cut: { reason: 'bytes', limit: 4 * MB } });
    expect(growthMb).toBeLessThan(100);
    const many = await sql.run("SELECT g, repeat('y', 100000) AS v FROM generate_series(1, 50) g");
    expect(many.cut).toEqual({ reason: 'bytes', limit: 4 * MB });
    expect(many.rows.length).toBeGreaterThanOrEqual(40);
    expect(many.rows.length).toBeLessThanOrEqual(42);
    expect((await sql.run('SELECT g FROM generate_series(1, 5000) g')).cut).toEqual({ reason: 'rows', limit: 1000 });
  }, 180_000);
});
