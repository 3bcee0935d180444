import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import pg from 'pg';
import { classifyStatement, SqlRefused } from '../src/areas/admin/store/sql-guard.js';
import { SqlConsole, SqlTimeout, SqlUnavailable } from '../src/areas/admin/store/sql-console.js';
import type { Db } from '../src/store/db.js';
import { PgDb } from '../src/store/pg-db.js';
import { asAdmin, freshDatabase, uniqueName } from './helpers/services.js';

const OPTS = { statementTimeoutMs: 1000, maxRows: 1000, concurrency: 2 };

async function refusal(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    if (err instanceof SqlRefused) return err.message;
    throw err;
  }
  throw new Error('expected the statement to be refused');
}

describe('SQL console guard (PostgreSQL parser)', () => {
  const refused = (sql: string) => refusal(classifyStatement(sql));

  it('admits one SELECT / WITH / TABLE / VALUES / EXPLAIN / SHOW and returns its own text', async () => {
    for (const [sql, kind] of [
      ['SELECT 1', 'query'],
      ["  select * from job_runs where note = ';' ; ", 'query'],
      ['WITH x AS (SELECT 1) SELECT * FROM x', 'query'],
      ['TABLE job_runs', 'query'],
      ['VALUES (1), (2)', 'query'],
      ['EXPLAIN SELECT 1', 'explain'],
      ['SHOW statement_timeout', 'show'],
      ['SELECT pg_sleep(0.1)', 'query'],
    ] as const) {
      expect(await classifyStatement(sql), sql).toMatchObject({ kind });
    }
    // PostgreSQL's own statement bounds: a quoted ';' is not an end, the final ';' and a leading comment are not part of it.
    expect((await classifyStatement("/* c */ SELECT ';' -- x\n;")).text).toBe("SELECT ';' -- x");
  });

  it('refuses what the issue tried, each with a reason', async () => {
    expect(await refused("COPY (SELECT 1) TO PROGRAM 'id > /tmp/x'")).toMatch(/COPY is refused: the console is read-only/);
    expect(await refused("COPY job_runs TO '/tmp/x'")).toMatch(/COPY is refused/);
    expect(await refused("SELECT pg_read_file('/etc/passwd')")).toMatch(/function pg_read_file\(\) is refused/);
    expect(await refused("SELECT * FROM pg_catalog.pg_read_binary_file('/etc/passwd')")).toMatch(/pg_read_binary_file/);
    expect(await refused("SELECT lo_import('/etc/passwd')")).toMatch(/lo_import/);
    expect(await refused("SELECT lo_from_bytea(0, 'x')")).toMatch(/lo_from_bytea/);
    expect(await refused("SELECT set_config('default_transaction_read_only', 'on', false)")).toMatch(/set_config/);
    expect(await refused("SELECT 1 WHERE set_config('search_path', 'x', false) IS NOT NULL")).toMatch(/set_config/);
    expect(await refused("SELECT query_to_xml('COPY (SELECT 1) TO PROGRAM ''id''', true, true, '')")).toMatch(/query_to_xml/);
    expect(await refused('SET search_path = x')).toMatch(/SET is refused/);
    expect(await refused('DO $$ BEGIN PERFORM 1; END $$')).toMatch(/DO is refused/);
    expect(await refused('CALL p()')).toMatch(/CALL is refused/);
    expect(await refused('LOCK job_runs')).toMatch(/LOCK is refused/);
    expect(await refused('LISTEN x')).toMatch(/LISTEN is refused/);
    expect(await refused('SELECT 1; SELECT 2')).toMatch(/exactly one SQL statement, got 2/);
    expect(await refused('SELECT 1; DELETE FROM job_runs')).toMatch(/exactly one/);
    expect(await refused('WITH d AS (DELETE FROM job_runs RETURNING *) SELECT * FROM d')).toMatch(/data-modifying part \(DELETE\)/);
    expect(await refused('EXPLAIN ANALYZE SELECT 1')).toMatch(/EXPLAIN ANALYZE runs the statement/);
    expect(await refused('EXPLAIN (ANALYZE) DELETE FROM job_runs')).toMatch(/ANALYZE/);
    expect(await refused('SELECT * INTO t FROM job_runs')).toMatch(/SELECT INTO/);
    expect(await refused('SELECT * FROM job_runs FOR UPDATE')).toMatch(/FOR UPDATE/);
    expect(await refused("SELECT nextval('s')")).toMatch(/nextval/);
    expect(await refused('SELECT pg_advisory_lock(1)')).toMatch(/pg_advisory_lock/);
    expect(await refused('SELECT pg_terminate_backend(1)')).toMatch(/pg_terminate_backend/);
    expect(await refused("SELECT pg_notify('a', 'b')")).toMatch(/pg_notify/);
    expect(await refused("SELECT dblink('x', 'y')")).toMatch(/dblink/);
    expect(await refused('SELEC 1')).toMatch(/syntax error/);
    expect(await refused('   ')).toMatch(/exactly one/);
  });
});

describe('SQL console, cluster (PostgreSQL, own role)', () => {
  let database: Awaited<ReturnType<typeof freshDatabase>>;
  const role = uniqueName('rj_sql');
  let owner: PgDb;
  let asRole: PgDb;
  let sql: SqlConsole;
  const file = join(mkdtempSync(join(tmpdir(), 'rj-sql-')), 'pwned');

  beforeAll(async () => {
    database = await freshDatabase();
    owner = await PgDb.connect({ url: database.url, poolSize: 4, connectTimeoutMs: 5000 });
    await owner.exec("CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 3000) g");
    // What docs/security.md tells an operator to run.
    await asAdmin(`CREATE ROLE ${role} LOGIN`);
    await asAdmin(`GRANT pg_read_all_data TO ${role}`);
    const url = new URL(database.url);
    url.username = role;
    asRole = new PgDb({ url: url.toString(), poolSize: 2, connectTimeoutMs: 5000 });
    sql = new SqlConsole(asRole, OPTS);
  });
  afterAll(async () => {
    await asRole?.close();
    await owner?.close();
    await database?.drop();
    await asAdmin(`DROP ROLE IF EXISTS ${role}`);
  });

  it('runs as its role, through a cursor, cut at the row limit', async () => {
    expect((await sql.run('SELECT current_user AS u')).rows).toEqual([{ u: role }]);
    const r = await sql.run('SELECT * FROM t');
    expect(r).toMatchObject({ truncated: true, columns: ['id', 'v'] });
    expect(r.rows).toHaveLength(1000);
  });

  it('refuses to run as a superuser and names the fix', async () => {
    const superuser = new SqlConsole(owner, OPTS);
    const err = await superuser.run('SELECT 1').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SqlUnavailable);
    expect((err as Error).message).toMatch(/refuses to run as role "postgres".*superuser.*sql\.database_url/);
  });

  it('COPY TO PROGRAM, COPY TO a file, pg_read_file, lo_import and lo_from_bytea are refused and leave nothing', async () => {
    for (const q of [`COPY (SELECT 1) TO PROGRAM 'id > ${file}'`, `COPY t TO '${file}'`, "SELECT pg_read_file('/etc/passwd')", "SELECT lo_import('/etc/passwd')", "SELECT lo_from_bytea(0, 'x')"]) {
      expect(await refusal(sql.run(q)), q).toMatch(/refused/);
    }
    expect(existsSync(file)).toBe(false);
    expect((await owner.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_largeobject_metadata')).rows[0]!.n).toBe(0);
  });

  it('the role itself cannot reach the host even if a statement got past the parser', async () => {
    const url = new URL(database.url);
    url.username = role;
    const c = new pg.Client({ connectionString: url.toString() });
    await c.connect();
    try {
      await expect(c.query("SELECT pg_read_file('/etc/passwd')")).rejects.toThrow(/permission denied/);
      await expect(c.query(`COPY (SELECT 1) TO PROGRAM 'id > ${file}'`)).rejects.toThrow(/permission denied|must be superuser|privilege/);
    } finally {
      await c.end();
    }
    expect(existsSync(file)).toBe(false);
  });

  it('pg_sleep past sql.statement_timeout is cancelled by the server', async () => {
    const err = await sql.run('SELECT pg_sleep(8)').catch((e: unknown) => e as Error & { code?: string });
    // Cancelled by the server's statement_timeout (1 s here): a sleep run to its end would answer a
    // row, and the console's own watchdog (timeout + 2 s) answers SqlTimeout without the server's message.
    expect((err as { code?: string }).code).toBe('57014');
    expect((err as Error).message).toMatch(/canceling statement due to statement timeout/);
  });

  it('10 parallel pg_sleep: at most sql.concurrency run, the rest are refused as busy, the service pool is untouched', async () => {
    const results = await Promise.allSettled(Array.from({ length: 10 }, () => sql.run('SELECT pg_sleep(3)')));
    const busy = results.filter((r) => r.status === 'rejected' && r.reason instanceof SqlUnavailable && r.reason.reason === 'busy');
    expect(busy.length).toBe(8);
    await owner.ping();
  });

  it('a session setting never reaches the next statement (its connection is destroyed)', async () => {
    const before = (await sql.run("SELECT current_setting('search_path') AS p")).rows[0]!.p;
    await sql.run('SHOW search_path');
    expect((await sql.run("SELECT current_setting('search_path') AS p")).rows[0]!.p).toBe(before);
    expect((await sql.run("SELECT current_setting('transaction_read_only') AS ro")).rows[0]!.ro).toBe('on');
  });

  it('5M rows of generate_series: memory stays flat (the cursor stops at the limit)', async () => {
    global.gc?.();
    const before = process.memoryUsage().heapUsed;
    // A timeout with a real margin: this test is about memory, and on a loaded machine the 1 s of
    // the others (plus the watchdog's 2 s) cut it before its first FETCH came back.
    const roomy = new SqlConsole(asRole, { ...OPTS, statementTimeoutMs: 30_000 });
    const r = await roomy.run('SELECT g, md5(g::text) FROM (SELECT generate_series(1, 5000000) AS g) s');
    expect(r.rows).toHaveLength(1000);
    expect(r.truncated).toBe(true);
    // The whole result would be several hundred MB in the heap; the cursor brings 1,001 rows.
    expect(process.memoryUsage().heapUsed - before).toBeLessThan(50 * 1024 * 1024);
  });
});

describe('SQL console watchdog', () => {
  it('a server that never answers: the connection is closed after the timeout + 2 s and the caller gets SqlTimeout, not "Connection terminated"', async () => {
    // A connection whose statements hang until it is destroyed, as a server whose own timeout does not answer.
    let destroyed = false;
    let fail: ((e: Error) => void) | undefined;
    const conn = {
      query: (text: string) => (text.startsWith('BEGIN') ? Promise.resolve({ rows: [], rowCount: 0 }) : new Promise((_, reject) => (fail = reject))),
      release: (destroy?: boolean) => {
        destroyed = destroy === true;
        fail?.(new Error('Connection terminated'));
      },
    };
    const db = { kind: 'pg', pin: async () => conn } as unknown as Db;
    const sql = new SqlConsole(db, { statementTimeoutMs: 10, maxRows: 10, concurrency: 1 });
    const err = await sql.run('SELECT 1').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SqlTimeout);
    expect((err as SqlTimeout).code).toBe('57014');
    expect((err as Error).message).toMatch(/sql\.statement_timeout \(10 ms\)/);
    expect(destroyed).toBe(true);
  });
});
