import type { Config } from '../../config/load.js';
import { UserError } from '../../config/errors.js';
import { readEmbeddedAdminToken } from '../../app/admin-token.js';
import { DataDirLock } from '../../store/data-dir-lock.js';
import { PgliteDb } from '../../store/pglite-db.js';
import { PgDb } from '../../store/pg-db.js';
import type { Db } from '../../store/db.js';
import { openSqlConsole, SqlRefused, SqlUnavailable, type SqlResult } from './store/sql-console.js';
import { table } from '../../cli/table.js';

/**
 * `relay-jobs sql "<query>"`: one read-only statement against the service's database. Embedded
 * mode with a running service asks it (it owns PGlite); embedded without one opens the data
 * directory; cluster mode connects to DATABASE_URL (where `psql` works as well).
 */
export async function sqlCommand(config: Config, query: string, json: boolean): Promise<void> {
  const result = await run(config, query);
  if (json) return void process.stdout.write(JSON.stringify(result.rows, null, 2) + '\n');
  if (!result.columns.length) return void process.stdout.write('(no rows)\n');
  const cell = (v: unknown) => (v === null || v === undefined ? '' : v instanceof Date ? v.toISOString() : typeof v === 'object' ? JSON.stringify(v) : String(v));
  process.stdout.write(table([result.columns, ...result.rows.map((r) => result.columns.map((c) => cell(r[c])))]));
  const cut = result.cut?.reason === 'bytes' ? `, cut at ${result.cut.limit} bytes (sql.max_reply_bytes)` : result.truncated ? `, cut at ${config.sql.max_rows} (sql.max_rows)` : '';
  process.stdout.write(`(${result.rows.length} row${result.rows.length === 1 ? '' : 's'}${cut})\n`);
}

async function run(config: Config, query: string): Promise<SqlResult> {
  if (config.mode === 'embedded') {
    const owner = DataDirLock.liveOwner(config.database.data_dir);
    if (owner) return viaService(config, owner.http_port ?? config.http.port, query);
  }
  let db: Db;
  let lock: DataDirLock | null = null;
  if (config.mode === 'cluster') db = await PgDb.connect({ url: config.database.url!, poolSize: 1, connectTimeoutMs: config.database.connect_timeout });
  else {
    lock = DataDirLock.acquire(config.database.data_dir);
    db = await PgliteDb.open(config.database.data_dir, { sharedBuffersMb: config.database.embedded_shared_buffers_mb });
  }
  const sql = openSqlConsole(config, db);
  try {
    return await sql.console.run(query);
  } catch (err) {
    throw new UserError(err instanceof SqlRefused || err instanceof SqlUnavailable ? err.message : `sql: ${(err as Error).message.split('\n')[0]}`);
  } finally {
    await sql.close();
    await db.close();
    lock?.release();
  }
}

async function viaService(config: Config, port: number, query: string): Promise<SqlResult> {
  const token = config.http.admin_token ?? readEmbeddedAdminToken(config.database.data_dir);
  if (!token) throw new UserError(`a relay-jobs service owns ${config.database.data_dir} but no admin token is available (set RELAY_JOBS_ADMIN_TOKEN)`);
  let res: Response;
  try {
    res = await fetch(`http://127.0.0.1:${port}/api/v1/sql`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify({ query }) });
  } catch (err) {
    throw new UserError(`a relay-jobs service owns ${config.database.data_dir} but its API at 127.0.0.1:${port} did not answer: ${(err as Error).message}`);
  }
  const body = (await res.json()) as SqlResult & { error?: { message: string } };
  if (!res.ok) throw new UserError(`sql: ${body.error?.message ?? `HTTP ${res.status}`}`);
  return body;
}
