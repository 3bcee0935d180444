import { UserError } from '../config/errors.js';
import type { Db } from './db.js';

const CONNECTION_BUDGET = `SELECT current_setting('max_connections') AS max_connections, current_setting('superuser_reserved_connections') AS reserved`;
// Client connections on the whole server (every database), by application_name. Sessions of other
// roles show no application_name or backend_type without pg_read_all_stats: counted, under their role.
const CONNECTIONS_BY_APPLICATION = `
SELECT CASE WHEN backend_type = 'client backend' THEN coalesce(nullif(application_name, ''), '(no application_name)')
            ELSE '(role ' || coalesce(usename::text, '?') || ', application_name hidden)' END AS application,
       datname = current_database() AS this_database, count(*)::int AS n
  FROM pg_stat_activity
 WHERE backend_type = 'client backend' OR (backend_type IS NULL AND usesysid IS NOT NULL)
 GROUP BY 1, 2`;
const RECORD_KEY = `INSERT INTO secret_keys (purpose, fingerprint) VALUES ('master', $1) ON CONFLICT (purpose) DO NOTHING`;
const READ_KEY = `SELECT fingerprint FROM secret_keys WHERE purpose = 'master'`;

/** Connections the server lets ordinary roles open: max_connections less the superuser reserve. */
export async function connectionBudget(db: Db): Promise<number> {
  const { rows } = await db.query<{ max_connections: string; reserved: string }>(CONNECTION_BUDGET);
  return Number(rows[0]!.max_connections) - Number(rows[0]!.reserved);
}

/** Every client connection on the server now, grouped by application name and whether it is on this database. */
export async function connectionsByApplication(db: Db): Promise<Array<{ application: string; this_database: boolean; n: number }>> {
  return (await db.query<{ application: string; this_database: boolean; n: number }>(CONNECTIONS_BY_APPLICATION)).rows;
}

/** Every replica must seal with the same key: the first start records the key's fingerprint, later starts compare. */
export async function checkMasterKey(db: Db, fingerprint: string): Promise<void> {
  await db.query(RECORD_KEY, [fingerprint]);
  const { rows } = await db.query<{ fingerprint: string }>(READ_KEY);
  if (rows[0]!.fingerprint !== fingerprint) {
    throw new UserError('RELAY_JOBS_MASTER_KEY does not match the key this database was encrypted with: every replica needs the same key (a new key cannot read stored credentials)');
  }
}
