import type { Queryable } from '../../../store/db.js';
import { keyOrigin, type Config } from '../../../config/load.js';

/**
 * Where the cluster console connects (`sql.database_url`, else DATABASE_URL) and where that URL came
 * from, named in a connection error (the console and the doctor's `sql_console_role` alike).
 */
export function consoleDatabaseUrl(config: Config): { url: string; source: string } {
  if (config.sql.database_url) return { url: config.sql.database_url, source: keyOrigin(config, 'sql.database_url') };
  return { url: config.database.url!, source: `${keyOrigin(config, 'database.url')}; no sql.database_url set` };
}

/**
 * Columns holding secrets (sealed credentials, token hashes and fingerprints): the SQL console's
 * role must not read them. The one list: the role recipe (`consoleRoleSql`, printed in
 * docs/security.md) grants every other column, and the doctor's `sql_console_role` fails a role
 * that can SELECT one of these. A migration adding a secret column adds it here
 * (test/sql-console-hardening.test.ts walks the real schema for names that look secret).
 */
export const SECRET_COLUMNS: readonly { table: string; column: string; holds: string }[] = [
  { table: 'accounts', column: 'credentials_sealed', holds: 'sealed OAuth credentials' },
  { table: 'accounts', column: 'refresh_sent_fp', holds: 'fingerprint of the refresh token in flight' },
  { table: 'proxies', column: 'url_sealed', holds: 'sealed proxy URL with its password' },
  { table: 'monitors', column: 'api_key_sealed', holds: 'sealed API key' },
  { table: 'admin_sessions', column: 'token_hash', holds: 'hash of a session (bearer) token' },
  { table: 'admin_sessions', column: 'admin_fingerprint', holds: 'fingerprint of the admin token' },
  { table: 'dead_refresh_tokens', column: 'fingerprint', holds: 'fingerprints of refresh tokens' },
  { table: 'secret_keys', column: 'fingerprint', holds: 'fingerprint of the master key' },
];

const secretArray = () => `ARRAY[${SECRET_COLUMNS.map((s) => `'${s.table}.${s.column}'`).join(', ')}]`;

/**
 * The console role's recipe, what docs/security.md prints (a test keeps the two equal and runs it
 * against the real schema). Run as a superuser connected to the service's database; run again
 * after an upgrade: new tables and columns are granted then, and not before (no default
 * privileges: they cannot leave a column out, so a new table stays unreadable until then, failing
 * closed). `relay` (the database) and `relay_sql` are the names to replace.
 */
export function consoleRoleSql(): string {
  return `CREATE ROLE relay_sql LOGIN PASSWORD '…';   -- once
GRANT CONNECT ON DATABASE relay TO relay_sql;
GRANT USAGE ON SCHEMA public TO relay_sql;
-- Every column of the service's tables except the secret ones (src/areas/admin/store/console-role.ts).
DO $$
DECLARE
  secret CONSTANT text[] := ${secretArray()};
  t record;
BEGIN
  FOR t IN
    SELECT c.relname,
           string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) FILTER (WHERE NOT c.relname || '.' || a.attname = ANY (secret)) AS readable,
           bool_or(c.relname || '.' || a.attname = ANY (secret)) AS has_secret
      FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
     WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm') AND NOT c.relispartition
     GROUP BY c.relname
  LOOP
    EXECUTE format('REVOKE ALL ON public.%I FROM relay_sql', t.relname);
    IF t.has_secret THEN
      EXECUTE format('GRANT SELECT (%s) ON public.%I TO relay_sql', t.readable, t.relname);
    ELSE
      EXECUTE format('GRANT SELECT ON public.%I TO relay_sql', t.relname);
    END IF;
  END LOOP;
END $$;`;
}

const INSPECT = `WITH me AS (SELECT current_user AS name),
  svc AS (SELECT n.oid AS ns, n.nspname FROM pg_namespace n
           WHERE n.oid = coalesce((SELECT relnamespace FROM pg_class WHERE oid = to_regclass('schema_migrations')), (SELECT oid FROM pg_namespace WHERE nspname = current_schema())))
SELECT me.name, pg_backend_pid() AS pid,
  (SELECT rolsuper FROM pg_roles WHERE rolname = me.name) AS super,
  pg_has_role(me.name, 'pg_read_server_files', 'MEMBER') OR pg_has_role(me.name, 'pg_write_server_files', 'MEMBER')
    OR pg_has_role(me.name, 'pg_execute_server_program', 'MEMBER') AS files,
  pg_has_role(me.name, 'pg_read_all_data', 'MEMBER') AS read_all,
  has_table_privilege(me.name, 'pg_catalog.pg_authid', 'SELECT') AS authid,
  (SELECT array_agg(DISTINCT pg_get_userbyid(c.relowner)::text) FROM pg_class c, svc
    WHERE c.relnamespace = svc.ns AND c.relkind IN ('r', 'p') AND pg_has_role(me.name, c.relowner, 'MEMBER')) AS owns,
  (SELECT array_agg(DISTINCT d.datname::text) FROM pg_database d, aclexplode(coalesce(d.datacl, acldefault('d', d.datdba))) acl
    WHERE d.datname <> current_database() AND d.datallowconn AND acl.privilege_type = 'CONNECT'
      AND acl.grantee <> 0 AND pg_has_role(me.name, acl.grantee, 'MEMBER')) AS other_dbs,
  (SELECT array_agg(s.col ORDER BY s.col) FROM unnest($1::text[]) s(col), svc,
          LATERAL (SELECT to_regclass(format('%I.%I', svc.nspname, split_part(s.col, '.', 1))) AS rel) t
    WHERE t.rel IS NOT NULL
      AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = t.rel AND a.attname = split_part(s.col, '.', 2) AND a.attnum > 0 AND NOT a.attisdropped)
      AND has_column_privilege(me.name, t.rel, split_part(s.col, '.', 2), 'SELECT')) AS secrets,
  (SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_class c, svc
    WHERE c.relnamespace = svc.ns AND c.relkind IN ('r', 'p') AND NOT c.relispartition
      AND has_table_privilege(me.name, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE')) AS writable
FROM me`;

/** What the console's role can reach beyond the service's readable columns; every field empty or false is a safe role. */
export interface ConsoleRoleReach {
  name: string;
  /** The connection's backend. */
  pid: number;
  superuser: boolean;
  /** A member of pg_read_server_files, pg_write_server_files or pg_execute_server_program. */
  serverFiles: boolean;
  /** A member of pg_read_all_data: every table of every database it can connect to. */
  readAllData: boolean;
  /** Can SELECT pg_authid: the password hashes of every role on the server. */
  readsPgAuthid: boolean;
  /** Roles owning the service's tables that this role is (or is a member of). */
  owns: string[];
  /** Other databases it was granted CONNECT on (not through PUBLIC). */
  otherDatabases: string[];
  /** `table.column` of SECRET_COLUMNS it can SELECT. */
  secretColumns: string[];
  /** The service's tables it can write (INSERT, UPDATE, DELETE or TRUNCATE). */
  writableTables: string[];
}

/** The role a connection runs as and what it can reach (the console before each statement, the doctor's `sql_console_role`). */
export async function inspectConsoleRole(q: Queryable): Promise<ConsoleRoleReach> {
  const cols = SECRET_COLUMNS.map((s) => `${s.table}.${s.column}`);
  const { rows } = await q.query<{
    name: string;
    pid: number;
    super: boolean | null;
    files: boolean;
    read_all: boolean;
    authid: boolean;
    owns: string[] | null;
    other_dbs: string[] | null;
    secrets: string[] | null;
    writable: string[] | null;
  }>(INSPECT, [cols]);
  const r = rows[0]!;
  return {
    name: r.name,
    pid: r.pid,
    superuser: Boolean(r.super),
    serverFiles: r.files,
    readAllData: r.read_all,
    readsPgAuthid: r.authid,
    owns: r.owns ?? [],
    otherDatabases: r.other_dbs ?? [],
    secretColumns: r.secrets ?? [],
    writableTables: r.writable ?? [],
  };
}

/** Why the console refuses to run as this role (superuser, server files, owner of the service's tables); empty when it runs. */
export function refusalReasons(r: ConsoleRoleReach): string[] {
  const out: string[] = [];
  if (r.superuser) out.push('it is a superuser');
  if (r.serverFiles) out.push('it may read/write server files or run programs');
  if (r.owns.length) out.push(`it owns the service's tables (as ${r.owns.map((o) => JSON.stringify(o)).join(', ')}), so it reads every secret column and can change grants`);
  return out;
}

/** Everything the doctor fails the role for: the console's refusals plus what a read-only, service-only role must not reach. */
export function reachFindings(r: ConsoleRoleReach): string[] {
  const out = refusalReasons(r);
  if (r.readAllData) out.push('it is a member of pg_read_all_data (every table of every database)');
  if (r.readsPgAuthid && !r.superuser) out.push('it can read pg_authid (the password hashes of every role)');
  if (r.otherDatabases.length) out.push(`it was granted CONNECT on other databases: ${r.otherDatabases.join(', ')}`);
  if (r.secretColumns.length && !r.superuser && !r.owns.length) out.push(`it can SELECT secret columns: ${r.secretColumns.join(', ')}`);
  if (r.writableTables.length && !r.superuser && !r.owns.length)
    out.push(`it can write ${r.writableTables.length} of the service's tables (${r.writableTables.slice(0, 3).join(', ')}${r.writableTables.length > 3 ? ', …' : ''})`);
  return out;
}
