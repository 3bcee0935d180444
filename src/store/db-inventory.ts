import type { Db, PinnedConnection, Queryable } from './db.js';
import { num } from './db.js';

/**
 * What backup and restore ask of a database as a whole: its user tables and their exact row
 * counts (inside a snapshot pg_dump shares), its server version, whether it is empty, whether
 * replicas are live on it, and the scratch databases verification restores into.
 */

// Leaf tables only: a partitioned parent holds no rows of its own, its partitions are dumped one by one.
const USER_TABLES = `
SELECT n.nspname AS schema, c.relname AS name
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')
   AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%'
 ORDER BY 1, 2`;

const USER_RELATIONS = `
SELECT count(*)::int AS n, string_agg(n.nspname || '.' || c.relname, ', ' ORDER BY n.nspname, c.relname) FILTER (WHERE c.relkind IN ('r', 'p')) AS sample
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
   AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%'`;

const USER_SCHEMAS = `
SELECT nspname FROM pg_namespace
 WHERE nspname NOT IN ('pg_catalog', 'information_schema') AND nspname NOT LIKE 'pg\\_toast%' AND nspname NOT LIKE 'pg\\_temp%'`;

const LIVE_INSTANCES = `
SELECT instance_id FROM instances
 WHERE stopped_at IS NULL AND heartbeat_at > clock_timestamp() - make_interval(secs => $1::double precision / 1000)
 ORDER BY instance_id`;

export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

export async function userTables(q: Queryable): Promise<string[]> {
  const { rows } = await q.query<{ schema: string; name: string }>(USER_TABLES);
  return rows.map((r) => `${r.schema}.${r.name}`);
}

/** Exact row counts of every user table, `schema.table` → rows, in one statement (one snapshot). */
export async function countRows(q: Queryable): Promise<Record<string, number>> {
  const { rows: tables } = await q.query<{ schema: string; name: string }>(USER_TABLES);
  if (!tables.length) return {};
  const parts = tables.map((t, i) => `SELECT ${i} AS i, count(*) AS n FROM ${quoteIdent(t.schema)}.${quoteIdent(t.name)}`);
  const { rows } = await q.query<{ i: number; n: unknown }>(parts.join(' UNION ALL '));
  const out: Record<string, number> = {};
  for (const r of rows) {
    const t = tables[num(r.i)]!;
    out[`${t.schema}.${t.name}`] = num(r.n);
  }
  return out;
}

/**
 * A REPEATABLE READ transaction that exports its snapshot: pg_dump `--snapshot` dumps exactly
 * what `counts` counted. Held open (and the connection pinned) until `close`.
 */
export class ExportedSnapshot {
  private constructor(
    private readonly conn: PinnedConnection,
    readonly id: string,
  ) {}

  static async open(db: Db): Promise<ExportedSnapshot> {
    const conn = await db.pin();
    try {
      await conn.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      const { rows } = await conn.query<{ id: string }>('SELECT pg_export_snapshot() AS id');
      return new ExportedSnapshot(conn, rows[0]!.id);
    } catch (err) {
      conn.release(true);
      throw err;
    }
  }

  counts(): Promise<Record<string, number>> {
    return countRows(this.conn);
  }

  async close(): Promise<void> {
    try {
      await this.conn.query('COMMIT');
      this.conn.release();
    } catch {
      this.conn.release(true);
    }
  }
}

export async function serverVersion(q: Queryable): Promise<{ num: number; text: string }> {
  const { rows } = await q.query<{ n: string; t: string }>(`SELECT current_setting('server_version_num') AS n, current_setting('server_version') AS t`);
  return { num: Number(rows[0]!.n), text: rows[0]!.t };
}

/** How many relations the database holds outside the system schemas, with some table names to show. */
export async function userRelations(q: Queryable): Promise<{ count: number; sample: string }> {
  const { rows } = await q.query<{ n: number; sample: string | null }>(USER_RELATIONS);
  return { count: num(rows[0]?.n), sample: rows[0]?.sample ?? '' };
}

/** Instances that beat within `livenessMs` and did not stop; none when the database has no `instances` table. */
export async function liveInstances(q: Queryable, livenessMs: number): Promise<string[]> {
  const { rows: has } = await q.query<{ t: string | null }>(`SELECT to_regclass('public.instances')::text AS t`);
  if (!has[0]?.t) return [];
  const { rows } = await q.query<{ instance_id: string }>(LIVE_INSTANCES, [livenessMs]);
  return rows.map((r) => r.instance_id);
}

/** Drops every user schema and recreates an empty `public` (restore --force). */
export async function emptyDatabase(db: Db): Promise<void> {
  await db.tx(async (q) => {
    const { rows } = await q.query<{ nspname: string }>(USER_SCHEMAS);
    for (const r of rows) await q.query(`DROP SCHEMA ${quoteIdent(r.nspname)} CASCADE`);
    await q.query('CREATE SCHEMA public');
  });
}

/** The connection's role, and whether it may create databases (CREATEDB, or a superuser). */
export async function databaseCreator(q: Queryable): Promise<{ role: string; can: boolean }> {
  const { rows } = await q.query<{ role: string; can: boolean }>(`SELECT current_user AS role, rolcreatedb OR rolsuper AS can FROM pg_roles WHERE rolname = current_user`);
  return rows[0] ?? { role: 'current_user', can: false };
}

export async function createDatabase(q: Queryable, name: string): Promise<void> {
  await q.query(`CREATE DATABASE ${quoteIdent(name)}`);
}

export async function dropDatabase(q: Queryable, name: string): Promise<void> {
  await q.query(`DROP DATABASE IF EXISTS ${quoteIdent(name)} WITH (FORCE)`);
}
