import type { Db, Queryable } from '../../../store/db.js';
import { iso, num } from '../../../store/db.js';
import { markRestoredInstancesStopped } from '../../../coordination/restored-instances.js';
import { leaseFreeSql } from '../../../store/liveness-sql.js';
import { elapsedMsSql } from '../../../store/sql-now.js';

export type BackupState = 'running' | 'completed' | 'verified' | 'verify_failed' | 'failed';
export type BackupTrigger = 'schedule' | 'manual';

export interface BackupRecord {
  id: string;
  trigger: BackupTrigger;
  state: BackupState;
  instance_id: string;
  lease_until: string | null;
  storage: 'fs' | 's3';
  location: string;
  object_key: string;
  format: 'pg_dump' | 'pglite';
  compression: string;
  size_bytes: number | null;
  sha256: string | null;
  server_version: string | null;
  table_counts: Record<string, number> | null;
  job_run_id: number | null;
  started_at: string;
  finished_at: string | null;
  duration_ms: number | null;
  verified_at: string | null;
  verify_error: string | null;
  error: string | null;
}

export interface NewBackup {
  id: string;
  trigger: BackupTrigger;
  instanceId: string;
  leaseMs: number;
  storage: 'fs' | 's3';
  location: string;
  objectKey: string;
  format: 'pg_dump' | 'pglite';
  compression: string;
  jobRunId: number | null;
  /** The writer's liveness key (null in embedded mode, or while its session is reopening): a dead writer's lease is free at once. */
  aliveKey?: number | null;
}

export interface BackupOutcome {
  state: Exclude<BackupState, 'running'>;
  sizeBytes?: number | null;
  sha256?: string | null;
  serverVersion?: string | null;
  tableCounts?: Record<string, number> | null;
  verifyError?: string | null;
  error?: string | null;
}

/** How soon the reaper looks again while a running backup's writer could die before its lease expires. */
export const LIVENESS_LOOK_MS = 5_000;

const LEASE = (p: string) => `clock_timestamp() + make_interval(secs => ${p}::double precision / 1000)`;

// The partial unique index `backups_one_running` refuses a second running row: no lock needed.
// $1 id, $2 trigger, $3 instance, $4 lease ms, $5 storage, $6 location, $7 key, $8 format, $9 compression, $10 job run, $11 liveness key
const START = `
INSERT INTO backups (id, trigger, state, instance_id, lease_until, storage, location, object_key, format, compression, job_run_id, lease_alive_key)
VALUES ($1, $2, 'running', $3, ${LEASE('$4')}, $5, $6, $7, $8, $9, $10, $11::int)
ON CONFLICT ((true)) WHERE state = 'running' DO NOTHING
RETURNING id`;

// A lease is free by the one rule every lease follows (store/liveness-sql.ts): it expired on the
// database clock, or its writer recorded a liveness key that no session holds any more (the
// writer's process is gone: taken over at once, not a lease period later). A live writer renews
// long before expiry. Also, in the same statement, when the reaper should look next (null: none
// running): the earliest expiry, or soon while another replica's writer could die (its liveness
// is read, not waited for). One row at least: the reaped ones, or one of nulls.
const FREE = leaseFreeSql('lease_until', 'lease_alive_key');
// $1 how soon to look again while a running backup has a liveness key (ms)
const REAP_EXPIRED = `
WITH reaped AS (
  UPDATE backups SET state = 'failed', lease_until = NULL, finished_at = clock_timestamp(),
         duration_ms = ${elapsedMsSql('started_at')},
         error = 'abandoned: instance ' || instance_id || ' stopped renewing its lease ('
                 || CASE WHEN lease_until <= clock_timestamp() THEN 'killed or partitioned' ELSE 'its process ended: its liveness session is gone' END
                 || '); partial objects removed'
   WHERE state = 'running' AND ${FREE}
  RETURNING *
), nxt AS (
  SELECT least(extract(epoch FROM (min(lease_until) - clock_timestamp())) * 1000,
               CASE WHEN bool_or(lease_alive_key IS NOT NULL) THEN $1::double precision END) AS next_expiry_ms
    FROM backups WHERE state = 'running' AND NOT ${FREE}
)
SELECT reaped.*, nxt.next_expiry_ms FROM nxt LEFT JOIN reaped ON true`;

// $1 id, $2 instance, $3 lease ms, $4 liveness key now (a reopened session's new key replaces the old one)
const RENEW = `
UPDATE backups SET lease_until = ${LEASE('$3')}, lease_alive_key = $4::int
 WHERE id = $1 AND instance_id = $2 AND state = 'running' AND lease_until > clock_timestamp()`;

// $1 id, $2 instance, $3 state, $4 size, $5 sha256, $6 server version, $7 counts, $8 verify error, $9 error
const FINISH = `
UPDATE backups SET state = $3, size_bytes = $4, sha256 = $5, server_version = $6, table_counts = $7::jsonb,
       verify_error = $8, error = $9, lease_until = NULL, finished_at = clock_timestamp(),
       verified_at = CASE WHEN $3 = 'verified' THEN clock_timestamp() END,
       duration_ms = ${elapsedMsSql('started_at')}
 WHERE id = $1 AND instance_id = $2 AND state = 'running'`;

/**
 * A database just restored from a backup holds the source's state as of the dump: its replicas
 * as live, and the backup that took the dump as running. Neither is true here: mark those
 * replicas stopped and that record failed, without touching any storage (the objects belong to
 * the source cluster).
 */
export async function settleRestored(q: Queryable): Promise<void> {
  const { rows } = await q.query<{ i: string | null; b: string | null }>(`SELECT to_regclass('public.instances')::text AS i, to_regclass('public.backups')::text AS b`);
  if (rows[0]?.i) await markRestoredInstancesStopped(q);
  if (rows[0]?.b) {
    await q.query(
      `UPDATE backups SET state = 'failed', lease_until = NULL, finished_at = clock_timestamp(), error = 'running in the source database when this copy was taken (restored)' WHERE state = 'running'`,
    );
  }
}

/** The `backups` table: records with an owner and a lease, and the queries retention needs. */
export class Backups {
  constructor(private readonly db: Db) {}

  /** The new record's id, or null when another backup is running (see `running`). */
  async start(b: NewBackup): Promise<string | null> {
    const { rows } = await this.db.query<{ id: string }>(START, [
      b.id,
      b.trigger,
      b.instanceId,
      b.leaseMs,
      b.storage,
      b.location,
      b.objectKey,
      b.format,
      b.compression,
      b.jobRunId,
      b.aliveKey ?? null,
    ]);
    return rows[0]?.id ?? null;
  }

  async running(): Promise<BackupRecord | null> {
    const { rows } = await this.db.query<Record<string, unknown>>(`SELECT * FROM backups WHERE state = 'running'`);
    return rows[0] ? toRecord(rows[0]) : null;
  }

  /** Marks failed every running record whose lease is free (expired, or its writer dead), and returns them (their partial objects are the caller's to remove). */
  async reapExpired(): Promise<BackupRecord[]> {
    return (await this.reapAndNext()).reaped;
  }

  /**
   * Reaps the free leases; `nextExpiryMs`: how long until the reaper should look again (null: none
   * running): when the earliest running lease could expire, or `livenessLookMs` while a running
   * backup's writer recorded a liveness key (its death frees the lease before expiry).
   */
  async reapAndNext(livenessLookMs = LIVENESS_LOOK_MS): Promise<{ reaped: BackupRecord[]; nextExpiryMs: number | null }> {
    const { rows } = await this.db.query<Record<string, unknown>>(REAP_EXPIRED, [livenessLookMs]);
    const next = rows[0]?.next_expiry_ms;
    return { reaped: rows.filter((r) => r.id !== null && r.id !== undefined).map(toRecord), nextExpiryMs: next === null || next === undefined ? null : num(next) };
  }

  /** True while the lease is still this instance's; records the writer's liveness key as it is now. */
  async renew(id: string, instanceId: string, leaseMs: number, aliveKey: number | null = null): Promise<boolean> {
    const { rowCount } = await this.db.query(RENEW, [id, instanceId, leaseMs, aliveKey]);
    return rowCount === 1;
  }

  /** False when the record is no longer this instance's running backup (its lease expired and it was reaped). */
  async finish(id: string, instanceId: string, o: BackupOutcome): Promise<boolean> {
    const { rowCount } = await this.db.query(FINISH, [
      id,
      instanceId,
      o.state,
      o.sizeBytes ?? null,
      o.sha256 ?? null,
      o.serverVersion ?? null,
      o.tableCounts ? JSON.stringify(o.tableCounts) : null,
      o.verifyError ?? null,
      o.error ?? null,
    ]);
    return rowCount === 1;
  }

  async get(id: string): Promise<BackupRecord | null> {
    const { rows } = await this.db.query<Record<string, unknown>>('SELECT * FROM backups WHERE id = $1', [id]);
    return rows[0] ? toRecord(rows[0]) : null;
  }

  async list(limit = 100): Promise<BackupRecord[]> {
    const { rows } = await this.db.query<Record<string, unknown>>('SELECT * FROM backups ORDER BY started_at DESC, id LIMIT $1', [limit]);
    return rows.map(toRecord);
  }

  /** Finished records, newest first: what retention judges. */
  async finished(): Promise<BackupRecord[]> {
    const { rows } = await this.db.query<Record<string, unknown>>(`SELECT * FROM backups WHERE state <> 'running' ORDER BY started_at DESC, id`);
    return rows.map(toRecord);
  }

  /** The newest finish time of a verified backup (or completed, when verification is off), per trigger. */
  async lastGood(): Promise<Array<{ trigger: string; at: Date }>> {
    const { rows } = await this.db.query<{ trigger: string; at: unknown }>(`SELECT trigger, max(finished_at) AS at FROM backups WHERE state IN ('verified', 'completed') GROUP BY trigger`);
    return rows.map((r) => ({ trigger: r.trigger, at: new Date(String(r.at instanceof Date ? r.at.toISOString() : r.at)) }));
  }

  async delete(id: string): Promise<void> {
    await this.db.query(`DELETE FROM backups WHERE id = $1 AND state <> 'running'`, [id]);
  }
}

function toRecord(r: Record<string, unknown>): BackupRecord {
  const counts = r.table_counts;
  return {
    id: String(r.id),
    trigger: r.trigger as BackupTrigger,
    state: r.state as BackupState,
    instance_id: String(r.instance_id),
    lease_until: iso(r.lease_until),
    storage: r.storage as 'fs' | 's3',
    location: String(r.location),
    object_key: String(r.object_key),
    format: r.format as 'pg_dump' | 'pglite',
    compression: String(r.compression),
    size_bytes: r.size_bytes === null ? null : num(r.size_bytes),
    sha256: (r.sha256 as string | null) ?? null,
    server_version: (r.server_version as string | null) ?? null,
    table_counts: counts === null || counts === undefined ? null : typeof counts === 'string' ? (JSON.parse(counts) as Record<string, number>) : (counts as Record<string, number>),
    job_run_id: r.job_run_id === null || r.job_run_id === undefined ? null : num(r.job_run_id),
    started_at: iso(r.started_at)!,
    finished_at: iso(r.finished_at),
    duration_ms: r.duration_ms === null || r.duration_ms === undefined ? null : num(r.duration_ms),
    verified_at: iso(r.verified_at),
    verify_error: (r.verify_error as string | null) ?? null,
    error: (r.error as string | null) ?? null,
  };
}
