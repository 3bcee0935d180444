import type { Db } from '../store/db.js';
import { num, toDate } from '../store/db.js';
import type { LockBackend } from './leader-lock.js';

export type RunStatus = 'running' | 'ok' | 'no_work' | 'skipped_not_leader' | 'failed' | 'timed_out';

export interface RunRecord {
  id: number;
  job_name: string;
  slot: Date;
  scope: string;
  trigger: string;
  instance_id: string;
  fencing_token: number | null;
  status: RunStatus;
  lock_backend: LockBackend | null;
  started_at: Date;
  deadline_at: Date | null;
  finished_at: Date | null;
  duration_ms: number | null;
  items: number | null;
  note: string | null;
  error: string | null;
}

/** Per job, what the health judgement needs, read cluster-wide in one statement. */
export interface JobSnapshot {
  job: string;
  createdAt: Date;
  lastSlot: Date | null;
  holder: string | null;
  leaseUntil: Date | null;
  lastRun: RunRecord | null;
  lastSuccessAt: Date | null;
  lastSkipAt: Date | null;
  dbNow: Date;
}

const COLUMNS = 'id, job_name, slot, scope, trigger, instance_id, fencing_token, status, lock_backend, started_at, deadline_at, finished_at, duration_ms, items, note, error';

const INSERT_SKIP = `
INSERT INTO job_runs (job_name, slot, scope, trigger, instance_id, status, lock_backend, finished_at, duration_ms, items, note)
VALUES ($1, $2::timestamptz, 'cluster', $3, $4, 'skipped_not_leader', $5, clock_timestamp(), 0, 0, $6)`;

const SNAPSHOTS = `
SELECT s.job_name, s.created_at, s.last_slot, s.holder_instance, s.lease_until, clock_timestamp() AS db_now,
       ok.finished_at AS last_success_at, sk.started_at AS last_skip_at, r.*
  FROM job_state s
  LEFT JOIN LATERAL (SELECT ${COLUMNS} FROM job_runs WHERE job_name = s.job_name AND status <> 'skipped_not_leader' ORDER BY started_at DESC LIMIT 1) r ON true
  LEFT JOIN LATERAL (SELECT finished_at FROM job_runs WHERE job_name = s.job_name AND status IN ('ok', 'no_work') ORDER BY started_at DESC LIMIT 1) ok ON true
  LEFT JOIN LATERAL (SELECT max(last_skip_at) AS started_at FROM job_skip_counts WHERE job_name = s.job_name) sk ON true`;

// The newest round of each instance-scoped job on each given replica: one probe of
// job_runs_by_job_instance per pair (migration 022). $1 job names, $2 instance ids.
const REPLICA_ROUNDS = `
SELECT r.* FROM unnest($1::text[]) AS j(name) CROSS JOIN unnest($2::text[]) AS i(id)
  CROSS JOIN LATERAL (SELECT ${COLUMNS} FROM job_runs WHERE job_name = j.name AND instance_id = i.id AND status <> 'skipped_not_leader'
                      ORDER BY started_at DESC LIMIT 1) r`;

const SKIP_SUMMARY = `SELECT instance_id, skipped, last_skip_at, last_reason FROM job_skip_counts WHERE job_name = $1 ORDER BY instance_id`;

export interface SkipCount {
  instance_id: string;
  skipped: number;
  last_skip_at: Date | null;
  last_reason: string | null;
}

const PRUNE = `
DELETE FROM job_runs WHERE id IN (
  SELECT id FROM job_runs WHERE started_at < clock_timestamp() - make_interval(secs => $1::double precision / 1000) AND status <> 'running' LIMIT $2)`;

export class RunRecords {
  constructor(private readonly db: Db) {}

  async recordSkip(p: { job: string; slot: Date; trigger: 'schedule' | 'manual'; instanceId: string; backend: LockBackend | null; note: string }): Promise<void> {
    await this.db.query(INSERT_SKIP, [p.job, p.slot.toISOString(), p.trigger, p.instanceId, p.backend, p.note]);
  }

  async recent(job: string, limit = 20): Promise<RunRecord[]> {
    const { rows } = await this.db.query(`SELECT ${COLUMNS} FROM job_runs WHERE job_name = $1 ORDER BY started_at DESC, id DESC LIMIT $2`, [job, limit]);
    return rows.map(toRecord);
  }

  /** Scheduled rounds each replica skipped because another led the slot (summarised by the heartbeat). */
  async skipSummary(job: string): Promise<SkipCount[]> {
    const { rows } = await this.db.query<Record<string, unknown>>(SKIP_SUMMARY, [job]);
    return rows.map((r) => ({ instance_id: String(r.instance_id), skipped: num(r.skipped), last_skip_at: toDate(r.last_skip_at), last_reason: (r.last_reason as string | null) ?? null }));
  }

  /** Per job, each given replica's newest round (a replica with none is absent). */
  async replicaRounds(jobs: string[], instanceIds: string[]): Promise<Map<string, Map<string, RunRecord>>> {
    const out = new Map<string, Map<string, RunRecord>>();
    if (!jobs.length || !instanceIds.length) return out;
    const { rows } = await this.db.query<Record<string, unknown>>(REPLICA_ROUNDS, [jobs, instanceIds]);
    for (const row of rows) {
      const r = toRecord(row);
      let m = out.get(r.job_name);
      if (!m) out.set(r.job_name, (m = new Map()));
      m.set(r.instance_id, r);
    }
    return out;
  }

  /**
   * The rounds of a time window, every job and replica (the console's Timeline), oldest first; at most
   * `limit`, the newest kept when there are more. Also the database's clock, which the window is measured by.
   */
  async window(since: Date, limit: number): Promise<{ rounds: RunRecord[]; truncated: boolean; dbNow: Date }> {
    const { rows } = await this.db.query(`SELECT ${COLUMNS}, clock_timestamp() AS db_now FROM job_runs WHERE started_at >= $1::timestamptz ORDER BY started_at DESC, id DESC LIMIT $2`, [
      since.toISOString(),
      limit + 1,
    ]);
    const dbNow = rows[0] ? toDate(rows[0].db_now)! : toDate((await this.db.query(`SELECT clock_timestamp() AS t`)).rows[0]!.t)!;
    return { rounds: rows.slice(0, limit).map(toRecord).reverse(), truncated: rows.length > limit, dbNow };
  }

  /** Rounds recorded after `afterId`, and the listed ones (running when last seen), for change pushes; at most `limit`. */
  async changedSince(afterId: number, watched: number[], limit: number): Promise<RunRecord[]> {
    const { rows } = await this.db.query(`SELECT ${COLUMNS} FROM job_runs WHERE id > $1 OR (id = ANY($2::bigint[]) AND status <> 'running') ORDER BY id LIMIT $3`, [afterId, watched, limit]);
    return rows.map(toRecord);
  }

  /** The newest round's id (0 when none): where a change stream starts. */
  async latestId(): Promise<number> {
    const { rows } = await this.db.query(`SELECT coalesce(max(id), 0) AS id FROM job_runs`);
    return num(rows[0]!.id);
  }

  /** Every job's skipped scheduled slots per replica (the heartbeat's summary). */
  async allSkips(): Promise<(SkipCount & { job_name: string })[]> {
    const { rows } = await this.db.query<Record<string, unknown>>(`SELECT job_name, instance_id, skipped, last_skip_at, last_reason FROM job_skip_counts ORDER BY job_name, instance_id`);
    return rows.map((r) => ({
      job_name: String(r.job_name),
      instance_id: String(r.instance_id),
      skipped: num(r.skipped),
      last_skip_at: toDate(r.last_skip_at),
      last_reason: (r.last_reason as string | null) ?? null,
    }));
  }

  async get(id: number): Promise<RunRecord | null> {
    const { rows } = await this.db.query(`SELECT ${COLUMNS} FROM job_runs WHERE id = $1`, [id]);
    return rows[0] ? toRecord(rows[0]) : null;
  }

  async snapshots(): Promise<Map<string, JobSnapshot>> {
    const { rows } = await this.db.query<Record<string, unknown>>(SNAPSHOTS);
    const out = new Map<string, JobSnapshot>();
    for (const row of rows) {
      const job = String(row.job_name);
      out.set(job, {
        job,
        createdAt: toDate(row.created_at)!,
        lastSlot: toDate(row.last_slot),
        holder: (row.holder_instance as string | null) ?? null,
        leaseUntil: toDate(row.lease_until),
        lastRun: row.id === null || row.id === undefined ? null : toRecord({ ...row, job_name: job }),
        lastSuccessAt: toDate(row.last_success_at),
        lastSkipAt: toDate(row.last_skip_at),
        dbNow: toDate(row.db_now)!,
      });
    }
    return out;
  }

  /** Deletes finished records older than the retention, in small batches; returns how many. */
  async prune(retentionMs: number, batch = 5000, maxBatches = 20): Promise<number> {
    let total = 0;
    for (let i = 0; i < maxBatches; i++) {
      const { rowCount } = await this.db.query(PRUNE, [retentionMs, batch]);
      total += rowCount;
      if (rowCount < batch) break;
    }
    return total;
  }
}

function toRecord(r: Record<string, unknown>): RunRecord {
  const n = (v: unknown) => (v === null || v === undefined ? null : num(v));
  return {
    id: num(r.id),
    job_name: String(r.job_name),
    slot: toDate(r.slot)!,
    scope: String(r.scope),
    trigger: String(r.trigger),
    instance_id: String(r.instance_id),
    fencing_token: n(r.fencing_token),
    status: r.status as RunStatus,
    lock_backend: (r.lock_backend as LockBackend | null) ?? null,
    started_at: toDate(r.started_at)!,
    deadline_at: toDate(r.deadline_at),
    finished_at: toDate(r.finished_at),
    duration_ms: n(r.duration_ms),
    items: n(r.items),
    note: (r.note as string | null) ?? null,
    error: (r.error as string | null) ?? null,
  };
}
