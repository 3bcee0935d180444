import type { Db } from '../store/db.js';
import { num, toDate } from '../store/db.js';
import type { LockBackend } from './leader-lock.js';
import { leaseFreeSql } from '../store/liveness-sql.js';
import { elapsedMsSql } from '../store/sql-now.js';
import { RenewalBatch } from './renewal-batch.js';
import { systemClock } from '../time/clock.js';
import { describePause, type JobPause } from './job-pauses.js';

/**
 * The correctness layer of invariants 1 and 2, in PostgreSQL (`job_state`, `job_runs`).
 *
 * A scheduled cluster round may start only by winning one atomic statement that
 *   - moves `job_state.last_slot` forward to its slot (a slot is claimed once, and never an older one),
 *   - takes the job's lease (`lease_until`, database clock), refused while another round holds it
 *     and that round's replica is alive: a lease whose holder's liveness session is gone
 *     (`liveness.ts`: crashed process) is free at once, any other only once it has expired,
 *   - increments the fencing token, and
 *   - inserts the round's `job_runs` row as `running`,
 *   - and only while the job is not paused (`job_state.paused_at`, migration 031; a manual round may
 *     be forced past a pause). The pause is read in the same statement that takes the slot, so a
 *     pause committed before a claim refuses it, and a claim committed first is a round that started
 *     before the pause (it finishes): no interleaving lets a round start after a pause.
 *   - and, for a scheduled slot, only from a replica whose schedule of the job is the cluster's
 *     (`job_state.schedule_fingerprint`, migration 037; issue 49): a replica configured otherwise
 *     cannot add a slot of its own schedule, whatever its copy of the adoption says.
 * Whatever lock backend admitted the replica (Redis, advisory lock, memory), two rounds
 * cannot both pass this statement for one slot, nor overlap while a lease is renewed.
 */

export interface Claim {
  runId: number;
  job: string;
  token: number;
  slot: Date;
  /** The liveness key recorded with the lease (null: none, the lease can only expire). */
  aliveKey: number | null;
}

/** `paused`: refused because the job is paused (the reason then describes the pause); `offSchedule`: the slot is not on the cluster's schedule. */
export type ClaimResult = { claimed: true; claim: Claim } | { claimed: false; reason: string; paused?: JobPause; offSchedule?: boolean };

export interface RoundOutcome {
  status: 'ok' | 'no_work' | 'failed' | 'timed_out';
  items: number;
  note?: string | null;
  error?: string | null;
}

const MS = (p: string) => `make_interval(secs => ${p}::double precision / 1000)`;

// The lease is free when it expired (database clock), or when its holder recorded a liveness key
// that no session holds any more: the holder's process is dead, so no round of it can still run.
const LEASE_FREE = leaseFreeSql('lease_until', 'holder_alive_key');

// Issue 49: a paused job starts no round; $force lets a manual round past it (`?force=true`, `run --force`).
const NOT_PAUSED = (force: string) => `(paused_at IS NULL OR ${force}::boolean)`;

// Issue 49: a scheduled slot is claimed only on the cluster's schedule of the job (migration 037, cluster-schedules.ts):
// the replica's fingerprint must be the adopted one. Null on either side (no schedule adopted yet, a caller without one) passes.
const ON_CLUSTER_SCHEDULE = (fp: string) => `(${fp}::text IS NULL OR schedule_fingerprint IS NULL OR schedule_fingerprint = ${fp}::text)`;

// Shared tail of both claims: a round still running when its lease could be taken over is dead; record it so.
const AFTER_CLAIM = `), abandon AS (
  UPDATE job_runs SET status = 'failed', finished_at = clock_timestamp(),
         error = 'abandoned: its instance died (liveness session gone) or stopped renewing the lease (paused or partitioned)'
   WHERE job_name = $1 AND scope = 'cluster' AND status = 'running' AND EXISTS (SELECT 1 FROM claim)
)
INSERT INTO job_runs (job_name, slot, scope, trigger, instance_id, fencing_token, status, lock_backend, deadline_at)`;

// $1 job, $2 slot, $3 instance, $4 lease ms, $5 lock backend, $6 timeout ms, $7 tolerated future ms, $8 liveness key, $9 schedule fingerprint
const CLAIM_SCHEDULED = `
WITH claim AS (
  UPDATE job_state
     SET fencing_token = fencing_token + 1, last_slot = $2::timestamptz, holder_instance = $3, holder_alive_key = $8::int,
         lease_until = clock_timestamp() + ${MS('$4')}, updated_at = clock_timestamp()
   WHERE job_name = $1
     AND (last_slot IS NULL OR last_slot < $2::timestamptz)
     AND ${LEASE_FREE}
     AND ${NOT_PAUSED('false')}
     AND ${ON_CLUSTER_SCHEDULE('$9')}
     AND $2::timestamptz <= clock_timestamp() + ${MS('$7')}
  RETURNING fencing_token
${AFTER_CLAIM}
SELECT $1, $2::timestamptz, 'cluster', 'schedule', $3, claim.fencing_token, 'running', $5, clock_timestamp() + ${MS('$6')}
  FROM claim
RETURNING id, fencing_token, slot`;

// $1 job, $2 instance, $3 lease ms, $4 lock backend, $5 timeout ms, $6 liveness key, $7 force past a pause
const CLAIM_MANUAL = `
WITH claim AS (
  UPDATE job_state
     SET fencing_token = fencing_token + 1, holder_instance = $2, holder_alive_key = $6::int,
         lease_until = clock_timestamp() + ${MS('$3')}, updated_at = clock_timestamp()
   WHERE job_name = $1 AND ${LEASE_FREE} AND ${NOT_PAUSED('$7')}
  RETURNING fencing_token
${AFTER_CLAIM}
SELECT $1, date_trunc('milliseconds', clock_timestamp()), 'cluster', 'manual', $2, claim.fencing_token, 'running', $4, clock_timestamp() + ${MS('$5')}
  FROM claim
RETURNING id, fencing_token, slot`;

// Instance-scoped rounds run on every replica: a token, a record, no lease. A scheduled one is
// recorded only once it has run a while (instance-round.ts), so it started $6 ms ago. The clock is
// read once: two reads could put the deadline a millisecond off started_at + timeout.
// $1 job, $2 slot, $3 instance, $4 timeout ms, $5 trigger, $6 started ms ago
const START_INSTANCE_ROUND = `
WITH tok AS (UPDATE job_state SET fencing_token = fencing_token + 1 WHERE job_name = $1 RETURNING fencing_token),
     t AS (SELECT clock_timestamp() - ${MS('$6')} AS started)
INSERT INTO job_runs (job_name, slot, scope, trigger, instance_id, fencing_token, status, started_at, deadline_at)
SELECT $1, $2::timestamptz, 'instance', $5, $3, tok.fencing_token, 'running', t.started, t.started + ${MS('$4')}
  FROM tok, t
RETURNING id, fencing_token, slot`;

// A scheduled instance round that ended (did work, or failed) with no running record it knows of:
// its finished record in one statement. Its running record may exist all the same (the insert
// committed, its reply was lost): then that row is completed instead, not left running beside a new one.
// $1 job, $2 slot, $3 instance, $4 started ms ago, $5 duration ms, $6 status, $7 items, $8 note, $9 error, $10 timeout ms
const RECORD_INSTANCE_ROUND = `
WITH t AS (SELECT clock_timestamp() - ${MS('$4')} AS started),
fin AS (
  UPDATE job_runs SET status = $6, items = $7, note = $8, error = $9, finished_at = clock_timestamp(),
         duration_ms = ${elapsedMsSql('started_at')}
   WHERE job_name = $1 AND status = 'running' AND slot = $2::timestamptz AND instance_id = $3 AND scope = 'instance' AND trigger = 'schedule'
  RETURNING id
)
INSERT INTO job_runs (job_name, slot, scope, trigger, instance_id, status, started_at, deadline_at, finished_at, duration_ms, items, note, error)
SELECT $1, $2::timestamptz, 'instance', 'schedule', $3, $6, t.started, t.started + ${MS('$10')}, t.started + ${MS('$5')},
       round($5::double precision)::int, $7, $8, $9
  FROM t WHERE NOT EXISTS (SELECT 1 FROM fin)`;

const WHY_NOT = `
SELECT last_slot, holder_instance, NOT ${LEASE_FREE} AS leased, lease_until, paused_at, paused_by, paused_reason, schedule_fingerprint,
       extract(epoch FROM ($2::timestamptz - clock_timestamp())) * 1000 AS ahead_ms
  FROM job_state WHERE job_name = $1`;

// Every lease this replica renews at one instant, in one statement (renewal-batch.ts). $1 [{job, token, ms}]
const RENEW_MANY = `
UPDATE job_state j SET lease_until = clock_timestamp() + ${MS('x.ms')}
  FROM jsonb_to_recordset($1::jsonb) AS x(job text, token bigint, ms double precision)
 WHERE j.job_name = x.job AND j.fencing_token = x.token AND j.lease_until > clock_timestamp()
RETURNING j.job_name, j.fencing_token`;

// One statement finishes the record and frees the lease. $1 run id, $2 status, $3 items, $4 note, $5 error, $6 job, $7 token
const COMPLETE = `
WITH fin AS (
  UPDATE job_runs SET status = $2, items = $3, note = $4, error = $5, finished_at = clock_timestamp(),
         duration_ms = ${elapsedMsSql('started_at')}
   WHERE id = $1 AND status = 'running'
  RETURNING id
), rel AS (
  UPDATE job_state SET lease_until = NULL, holder_instance = NULL, holder_alive_key = NULL
   WHERE job_name = $6 AND fencing_token = $7 AND lease_until IS NOT NULL
)
SELECT count(*)::int AS finished FROM fin`;

export class SlotClaims {
  /** The renewals of every round this replica runs, sent together when they fall due together. */
  readonly renewals: RenewalBatch<{ job: string; token: number; ms: number }>;

  constructor(
    private readonly db: Db,
    private readonly instanceId: string,
    /** This replica's schedule fingerprint of a job (issue 49), carried by its scheduled claims; absent: none (no check). */
    private readonly fingerprintOf: (job: string) => string | null = () => null,
  ) {
    this.renewals = new RenewalBatch(async (items) => {
      const { rows } = await this.db.query<{ job_name: string; fencing_token: unknown }>(RENEW_MANY, [JSON.stringify(items)]);
      const renewed = new Set(rows.map((r) => `${r.job_name}\u0000${num(r.fencing_token)}`));
      return items.map((i) => renewed.has(`${i.job}\u0000${i.token}`));
    });
  }

  /** Every job's row, in one statement (a start used to send one per job: some 90 of a replica's first statements). */
  async ensureJobs(names: string[]): Promise<void> {
    await this.db.query('INSERT INTO job_state (job_name) SELECT unnest($1::text[]) ORDER BY 1 ON CONFLICT DO NOTHING', [names]);
  }

  async lastSlot(job: string): Promise<Date | null> {
    const { rows } = await this.db.query<{ last_slot: unknown }>('SELECT last_slot FROM job_state WHERE job_name = $1', [job]);
    return toDate(rows[0]?.last_slot);
  }

  /**
   * `aliveKey`: this replica's liveness key (null: no crash detector, the lease can only expire).
   * Carries this replica's schedule fingerprint of the job (issue 49): refused unless it is the cluster's.
   */
  async claimScheduled(p: { job: string; slot: Date; leaseMs: number; timeoutMs: number; backend: LockBackend; toleratedFutureMs: number; aliveKey?: number | null }): Promise<ClaimResult> {
    const fingerprint = this.fingerprintOf(p.job);
    const params = [p.job, p.slot.toISOString(), this.instanceId, p.leaseMs, p.backend, p.timeoutMs, p.toleratedFutureMs, p.aliveKey ?? null, fingerprint];
    const { rows } = await this.db.query<ClaimRow>(CLAIM_SCHEDULED, params);
    if (rows[0]) return { claimed: true, claim: toClaim(p.job, rows[0], p.aliveKey ?? null) };
    return { claimed: false, ...(await this.whyNot(p.job, p.slot, false, fingerprint)) };
  }

  /** `force`: runs even while the job is paused (the operator said so; the pause stays). */
  async claimManual(p: { job: string; leaseMs: number; timeoutMs: number; backend: LockBackend; aliveKey?: number | null; force?: boolean }): Promise<ClaimResult> {
    const { rows } = await this.db.query<ClaimRow>(CLAIM_MANUAL, [p.job, this.instanceId, p.leaseMs, p.backend, p.timeoutMs, p.aliveKey ?? null, p.force === true]);
    if (rows[0]) return { claimed: true, claim: toClaim(p.job, rows[0], p.aliveKey ?? null) };
    return { claimed: false, ...(await this.whyNot(p.job, new Date(systemClock.now()), p.force === true)) };
  }

  async startInstanceRound(p: { job: string; slot: Date; timeoutMs: number; trigger: 'schedule' | 'manual'; startedMsAgo?: number }): Promise<Claim> {
    const { rows } = await this.db.query<ClaimRow>(START_INSTANCE_ROUND, [p.job, p.slot.toISOString(), this.instanceId, p.timeoutMs, p.trigger, Math.max(0, p.startedMsAgo ?? 0)]);
    if (!rows[0]) throw new Error(`job ${p.job} has no job_state row`);
    return toClaim(p.job, rows[0], null);
  }

  /** The finished record of a scheduled instance round that was never recorded as running (instance-round.ts). */
  async recordInstanceRound(p: { job: string; slot: Date; startedMsAgo: number; durationMs: number; timeoutMs: number; outcome: RoundOutcome }): Promise<void> {
    const o = p.outcome;
    await this.db.query(RECORD_INSTANCE_ROUND, [
      p.job,
      p.slot.toISOString(),
      this.instanceId,
      Math.max(0, p.startedMsAgo),
      Math.max(0, Math.round(p.durationMs)),
      o.status,
      o.items,
      o.note ?? null,
      o.error ?? null,
      p.timeoutMs,
    ]);
  }

  /** True while the lease is still ours (same token, not yet expired by the database clock). */
  renew(claim: Claim, leaseMs: number): Promise<boolean> {
    return this.renewals.renew({ job: claim.job, token: claim.token, ms: leaseMs });
  }

  /** Records the outcome and frees the lease. False when the record had already been taken over as abandoned. */
  async complete(claim: Claim, outcome: RoundOutcome): Promise<boolean> {
    const { rows } = await this.db.query<{ finished: number }>(COMPLETE, [claim.runId, outcome.status, outcome.items, outcome.note ?? null, outcome.error ?? null, claim.job, claim.token]);
    return num(rows[0]?.finished) === 1;
  }

  private async whyNot(job: string, slot: Date, forced = false, fingerprint: string | null = null): Promise<{ reason: string; paused?: JobPause; offSchedule?: boolean }> {
    const { rows } = await this.db.query<{
      last_slot: unknown;
      holder_instance: string | null;
      leased: boolean;
      lease_until: unknown;
      ahead_ms: unknown;
      paused_at: unknown;
      paused_by: string | null;
      paused_reason: string | null;
      schedule_fingerprint: string | null;
    }>(WHY_NOT, [job, slot.toISOString()]);
    const r = rows[0];
    if (!r) return { reason: `job ${job} is not registered in job_state` };
    const last = toDate(r.last_slot);
    if (last && last >= slot) return { reason: `slot ${slot.toISOString()} already claimed (last claimed slot ${last.toISOString()})` };
    if (r.leased) return { reason: `lease held by ${r.holder_instance} until ${toDate(r.lease_until)!.toISOString()}` };
    if (r.paused_at && !forced) {
      const paused: JobPause = { job, at: toDate(r.paused_at)!, by: r.paused_by ?? 'unknown', reason: r.paused_reason ?? '' };
      return { reason: describePause(paused), paused };
    }
    if (fingerprint !== null && r.schedule_fingerprint !== null && r.schedule_fingerprint !== fingerprint) {
      return { reason: `config_drift: this replica's schedule of ${job} (${fingerprint}) is not the cluster's (${r.schedule_fingerprint})`, offSchedule: true };
    }
    if (num(r.ahead_ms) > 0) return { reason: `slot ${slot.toISOString()} is ${Math.round(num(r.ahead_ms))}ms ahead of the database clock (clock skew?)` };
    return { reason: 'claim lost to a concurrent replica' };
  }
}

interface ClaimRow {
  id: unknown;
  fencing_token: unknown;
  slot: unknown;
}

function toClaim(job: string, row: ClaimRow, aliveKey: number | null): Claim {
  return { runId: num(row.id), job, token: num(row.fencing_token), slot: toDate(row.slot)!, aliveKey };
}
