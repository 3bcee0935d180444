import type { Db } from '../../../store/db.js';
import { num, toDate } from '../../../store/db.js';

/** Tables the cleanup jobs churn (deletes every round): their autovacuum health is the doctor's concern. */
export const CHURNED_TABLES = [
  'job_runs',
  'job_skip_counts',
  'usage_request_ids',
  'idempotency_records',
  'ops_metrics_minute',
  'ops_metrics_hourly',
  'ops_alert_events',
  'ops_alert_state',
  'notification_deliveries',
  'canary_runs',
  'monitor_results',
  'monitor_rollups',
  'account_refresh_leases',
  'scheduler_outbox',
  'admin_sessions',
  'image_batch_queue',
];

export interface TableHealth {
  table: string;
  live: number;
  dead: number;
  autovacuumEnabled: boolean;
  lastAutovacuum: Date | null;
  lastVacuum: Date | null;
}

const SETTINGS = `SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])`;
// usage_logs and its partitions by name prefix; the rest by name. The table's own reloption wins over the server's autovacuum.
const TABLE_HEALTH = `
SELECT c.relname AS table, s.n_live_tup AS live, s.n_dead_tup AS dead, s.last_autovacuum, s.last_vacuum,
       coalesce((SELECT lower(option_value) NOT IN ('off', 'false', '0', 'no') FROM pg_options_to_table(c.reloptions) WHERE option_name = 'autovacuum_enabled'), true) AS av
  FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
 WHERE s.schemaname = current_schema() AND (c.relname = ANY($1::text[]) OR c.relname LIKE 'usage\\_logs%')
 ORDER BY c.relname`;
const XID_AGE = `SELECT age(datfrozenxid)::bigint AS age FROM pg_database WHERE datname = current_database()`;
const DB_SIZE = `SELECT pg_database_size(current_database())::bigint AS bytes`;
const RECORD_SIZE = `INSERT INTO doctor_db_size (at, bytes) VALUES (clock_timestamp(), $1) ON CONFLICT (at) DO NOTHING`;
const PRUNE_SIZES = `DELETE FROM doctor_db_size WHERE at < clock_timestamp() - interval '35 days'`;
// Growth over the samples of the last week: (newest − oldest) per day of time between them.
const GROWTH = `
SELECT (max(bytes) FILTER (WHERE at = last) - max(bytes) FILTER (WHERE at = first))::double precision AS grown,
       extract(epoch FROM max(last) - max(first))::double precision AS seconds
  FROM (SELECT bytes, at, min(at) OVER () AS first, max(at) OVER () AS last FROM doctor_db_size WHERE at > clock_timestamp() - interval '7 days') s`;
const EXISTING = `SELECT c.relname FROM pg_class c WHERE c.relname = ANY($1::text[]) AND c.relkind IN ('r', 'p') AND pg_table_is_visible(c.oid)`;
const SSL = `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`;
const EXPIRING = `
SELECT id, name, platform, token_expires_at FROM accounts
 WHERE has_refresh_token AND status NOT IN ('disabled', 'banned') AND token_expires_at IS NOT NULL
   AND token_expires_at < clock_timestamp() + make_interval(secs => $1::double precision / 1000)
 ORDER BY token_expires_at LIMIT 20`;
const DB_NOW = `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::double precision AS ms`;
const RECORD_RESULT = `
INSERT INTO doctor_checks (name, grp, status, measured, fix, checked_at, instance_id, fencing_token)
SELECT x.name, x.grp, x.status, x.measured, x.fix, clock_timestamp(), $2, $3 FROM jsonb_to_recordset($1::jsonb) AS x(name text, grp text, status text, measured text, fix text)
ON CONFLICT (name) DO UPDATE SET grp = EXCLUDED.grp, status = EXCLUDED.status, measured = EXCLUDED.measured, fix = EXCLUDED.fix,
  checked_at = EXCLUDED.checked_at, instance_id = EXCLUDED.instance_id, fencing_token = EXCLUDED.fencing_token
 WHERE doctor_checks.fencing_token <= EXCLUDED.fencing_token`;
const LAST_RESULTS = `SELECT name, grp, status, measured, fix, checked_at, instance_id FROM doctor_checks ORDER BY grp, name`;

/** The database-side measurements of `relay-jobs doctor`, one named statement each. */
/** The accounts whose last refresh was refused as our configuration's fault (refresh-settle.ts records `config:<reason>`). */
const OAUTH_CONFIG_FAULTS = `SELECT platform, count(*) AS n, min(last_refresh_error) AS reason FROM accounts
  WHERE last_refresh_error LIKE 'config:%' AND status NOT IN ('disabled', 'banned') GROUP BY platform ORDER BY platform`;

export class DoctorFacts {
  constructor(private readonly db: Db) {}

  async settings(names: string[]): Promise<Record<string, string>> {
    const { rows } = await this.db.query<{ name: string; setting: string }>(SETTINGS, [names]);
    return Object.fromEntries(rows.map((r) => [r.name, r.setting]));
  }

  async tableHealth(): Promise<TableHealth[]> {
    const { rows } = await this.db.query<Record<string, unknown>>(TABLE_HEALTH, [CHURNED_TABLES]);
    return rows.map((r) => ({
      table: String(r.table),
      live: num(r.live),
      dead: num(r.dead),
      autovacuumEnabled: r.av !== false,
      lastAutovacuum: toDate(r.last_autovacuum),
      lastVacuum: toDate(r.last_vacuum),
    }));
  }

  async xidAge(): Promise<number> {
    return num((await this.db.query<{ age: unknown }>(XID_AGE)).rows[0]!.age);
  }

  /** Records the database size (one sample per doctor round) and returns it. */
  async sampleSize(): Promise<number> {
    const bytes = num((await this.db.query<{ bytes: unknown }>(DB_SIZE)).rows[0]!.bytes);
    await this.db.query(RECORD_SIZE, [bytes]);
    await this.db.query(PRUNE_SIZES);
    return bytes;
  }

  /** Bytes per day over the last week's samples; null with less than an hour between them. */
  async growthPerDay(): Promise<number | null> {
    const r = (await this.db.query<{ grown: unknown; seconds: unknown }>(GROWTH)).rows[0];
    if (!r || r.grown === null || r.seconds === null || num(r.seconds) < 3600) return null;
    return (num(r.grown) / num(r.seconds)) * 86_400;
  }

  async existingTables(names: string[]): Promise<Set<string>> {
    const { rows } = await this.db.query<{ relname: string }>(EXISTING, [names]);
    return new Set(rows.map((r) => r.relname));
  }

  /** Whether this pool's connection is encrypted (null where the server cannot say: PGlite). */
  async ssl(): Promise<boolean | null> {
    try {
      const r = (await this.db.query<{ ssl: boolean }>(SSL)).rows[0];
      return r ? r.ssl === true : null;
    } catch {
      return null;
    }
  }

  /** Refreshable accounts whose token expires within `withinMs` (or already has). */
  async expiringTokens(withinMs: number): Promise<Array<{ id: number; name: string; platform: string; expiresAt: Date }>> {
    const { rows } = await this.db.query<Record<string, unknown>>(EXPIRING, [withinMs]);
    return rows.map((r) => ({ id: num(r.id), name: String(r.name), platform: String(r.platform), expiresAt: toDate(r.token_expires_at)! }));
  }

  /** Platforms whose refreshes the provider refused as a configuration fault (`config:<reason>`): how many accounts, and one reason. */
  async oauthConfigFaults(): Promise<Array<{ platform: string; accounts: number; reason: string }>> {
    const { rows } = await this.db.query<Record<string, unknown>>(OAUTH_CONFIG_FAULTS);
    return rows.map((r) => ({ platform: String(r.platform), accounts: num(r.n), reason: String(r.reason) }));
  }

  async dbNowMs(): Promise<number> {
    return num((await this.db.query<{ ms: unknown }>(DB_NOW)).rows[0]!.ms);
  }

  /** The newest result per check, written only by a round whose fencing token is not older than the stored one. */
  async record(results: Array<{ name: string; group: string; status: string; measured: string; fix: string }>, instanceId: string, token: number): Promise<void> {
    await this.db.query(RECORD_RESULT, [JSON.stringify(results.map((r) => ({ ...r, grp: r.group }))), instanceId, token]);
  }

  async lastResults(): Promise<Array<{ name: string; group: string; status: string; measured: string; fix: string; checked_at: Date; instance_id: string }>> {
    const { rows } = await this.db.query<Record<string, unknown>>(LAST_RESULTS);
    return rows.map((r) => ({
      name: String(r.name),
      group: String(r.grp),
      status: String(r.status),
      measured: String(r.measured),
      fix: String(r.fix),
      checked_at: toDate(r.checked_at)!,
      instance_id: String(r.instance_id),
    }));
  }
}
