import type { Db } from '../store/db.js';
import { toDate } from '../store/db.js';

/**
 * Pause and resume of a job, cluster-wide and persisted (issue 49): the pause is three columns of
 * the job's `job_state` row (migration 031), so it survives every restart and the cluster claim
 * refuses a paused job in its own statement (`slot-claim.ts`, `NOT_PAUSED`). Each change writes
 * one `job_pause_audit` row (who, when, why) in the same statement, and its trigger notifies
 * `job_pauses`, which every replica's pause book (`scheduler/pause-book.ts`) re-reads.
 *
 * Both changes are idempotent on the state and say whether they changed it: pausing a paused job
 * keeps the first pause (its reason, who and when) and writes no audit row; resuming a job that
 * is not paused likewise. The routes answer 409 for those (docs/coordination.md).
 */
export interface JobPause {
  job: string;
  at: Date;
  by: string;
  reason: string;
}

/** A reason is 1-500 characters once trimmed (the API's and the CLI's rule). */
export const PAUSE_REASON_MAX = 500;

// $1 job, $2 actor, $3 reason. One statement: the state, its audit row, the pause as it now stands
// (`prev` locks the row, so of two pauses at once the second finds the first's and changes nothing).
const PAUSE = `
WITH prev AS (SELECT paused_at, paused_by, paused_reason FROM job_state WHERE job_name = $1 FOR UPDATE),
upd AS (
  UPDATE job_state SET paused_at = clock_timestamp(), paused_by = $2, paused_reason = $3
   WHERE job_name = $1 AND paused_at IS NULL
  RETURNING paused_at, paused_by, paused_reason
), audit AS (
  INSERT INTO job_pause_audit (job_name, action, actor, reason, at) SELECT $1, 'pause', $2, $3, paused_at FROM upd
)
SELECT coalesce(upd.paused_at, prev.paused_at) AS paused_at, coalesce(upd.paused_by, prev.paused_by) AS paused_by,
       coalesce(upd.paused_reason, prev.paused_reason) AS paused_reason, (upd.paused_at IS NOT NULL) AS changed
  FROM prev LEFT JOIN upd ON true`;

// $1 job, $2 actor, $3 reason (optional). Returns the pause it lifted, if any.
const RESUME = `
WITH prev AS (SELECT paused_at, paused_by, paused_reason FROM job_state WHERE job_name = $1 FOR UPDATE),
upd AS (
  UPDATE job_state SET paused_at = NULL, paused_by = NULL, paused_reason = NULL
   WHERE job_name = $1 AND paused_at IS NOT NULL
  RETURNING job_name
), audit AS (
  INSERT INTO job_pause_audit (job_name, action, actor, reason) SELECT $1, 'resume', $2, $3 FROM upd
)
SELECT prev.paused_at, prev.paused_by, prev.paused_reason, EXISTS (SELECT 1 FROM upd) AS changed FROM prev`;

export class JobPauses {
  constructor(private readonly db: Db) {}

  /** Every paused job (the pause book's read: one small statement). */
  async list(): Promise<Map<string, JobPause>> {
    const { rows } = await this.db.query<PauseRow>('SELECT job_name, paused_at, paused_by, paused_reason FROM job_state WHERE paused_at IS NOT NULL');
    return new Map(rows.map((r) => [r.job_name, toPause(r)]));
  }

  async get(job: string): Promise<JobPause | null> {
    const { rows } = await this.db.query<PauseRow>('SELECT job_name, paused_at, paused_by, paused_reason FROM job_state WHERE job_name = $1 AND paused_at IS NOT NULL', [job]);
    return rows[0] ? toPause(rows[0]) : null;
  }

  /** Pauses `job`; `changed` false when it was already paused (the pause returned is the first one). */
  async pause(job: string, actor: string, reason: string): Promise<{ changed: boolean; pause: JobPause }> {
    await this.ensure(job);
    const { rows } = await this.db.query<PauseRow & { changed: boolean }>(PAUSE, [job, actor, reason]);
    const r = rows[0]!;
    return { changed: r.changed === true, pause: toPause({ ...r, job_name: job }) };
  }

  /** Resumes `job`; `was` the pause it lifted, null (and `changed` false) when it was not paused. */
  async resume(job: string, actor: string, reason: string | null = null): Promise<{ changed: boolean; was: JobPause | null }> {
    await this.ensure(job);
    const { rows } = await this.db.query<PauseRow & { changed: boolean }>(RESUME, [job, actor, reason]);
    const r = rows[0];
    return { changed: r?.changed === true, was: r?.paused_at ? toPause({ ...r, job_name: job }) : null };
  }

  /** The audit trail of one job, newest first. */
  async audit(job: string, limit = 50): Promise<Array<{ action: 'pause' | 'resume'; actor: string; reason: string | null; at: string }>> {
    const { rows } = await this.db.query<{ action: 'pause' | 'resume'; actor: string; reason: string | null; at: unknown }>(
      'SELECT action, actor, reason, at FROM job_pause_audit WHERE job_name = $1 ORDER BY id DESC LIMIT $2',
      [job, limit],
    );
    return rows.map((r) => ({ action: r.action, actor: r.actor, reason: r.reason, at: toDate(r.at)!.toISOString() }));
  }

  /** A job the runtime knows always has its row (ensureJobs at start); a one-shot CLI may be first. */
  private async ensure(job: string): Promise<void> {
    await this.db.query('INSERT INTO job_state (job_name) VALUES ($1) ON CONFLICT DO NOTHING', [job]);
  }
}

/** How a pause reads in health, the refusals and the skip summaries. */
export function describePause(p: JobPause): string {
  return `paused by ${p.by} at ${p.at.toISOString()}: ${p.reason}`;
}

interface PauseRow {
  job_name: string;
  paused_at: unknown;
  paused_by: string | null;
  paused_reason: string | null;
}

function toPause(r: PauseRow): JobPause {
  return { job: r.job_name, at: toDate(r.paused_at)!, by: r.paused_by ?? 'unknown', reason: r.paused_reason ?? '' };
}
