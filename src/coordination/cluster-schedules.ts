import type { Db } from '../store/db.js';
import { num, toDate } from '../store/db.js';
import { instanceAliveSql } from './instance-registry.js';
import { DEAD_REPLICA_HORIZON_MS } from './instance-retention.js';
import type { ScheduleSpecRecord } from './schedule-fingerprint.js';

/**
 * One schedule per job across the cluster (issue 49, migration 037). Each replica publishes the
 * fingerprint of every job's schedule (`job_schedule_votes`); the schedule the cluster runs, the
 * *adopted* one, is kept on `job_state` and the slot claim refuses any other (`slot-claim.ts`).
 *
 * The adoption rule, applied by every replica's check (`publish`: a read-only statement, and the
 * writing transaction only when it would change a row):
 *   1. a job with no adopted schedule adopts the checking replica's own (the first replica wins;
 *      two starting together are ordered by the row lock of the UPDATE);
 *   2. an adopted schedule changes to a new fingerprint only when every live replica that
 *      publishes one for the job publishes that same one (a rolling deploy switches over once the
 *      last old replica is gone: stopped, or dead by the liveness rule `instanceAliveSql`);
 *   3. `adoptOwn` (embedded mode: one process, the data directory's lock says so) adopts its own
 *      unconditionally.
 * A replica whose fingerprint differs from the adopted one runs no scheduled round of the job
 * (docs/coordination.md "One schedule per job"). The checking replica always counts itself live:
 * right after it registers its liveness key may not be published yet.
 */
export interface AdoptedSchedule {
  job: string;
  fingerprint: string;
  spec: ScheduleSpecRecord;
  adoptedAt: Date;
  /** Live replicas (the checker included) whose published fingerprint for the job is not this one. */
  offSchedule: number;
}

export interface ScheduleVote {
  job: string;
  fingerprint: string;
  spec: ScheduleSpecRecord;
}

/** A replica's published schedule of a job as the doctor reads it. */
export interface PublishedSchedule extends ScheduleVote {
  instanceId: string;
}

// $1 instance, $2 jobs it publishes, $3 horizon ms: its votes for jobs it no longer has go (a job removed
// from a library user's list), and so do the votes of replicas that have not beaten for the horizon
// (the doctor's dead-replica horizon): instance ids change with every deploy under generated names, and
// every check reads the votes, so they must not pile up. A replica that beats again votes again
// (VOTE runs on every writing check); a dead one's votes never counted (LIVE_VOTES) and are shown until then.
// Votes whose replica has no row left (ops_cleanup prunes the rows past the same horizon,
// coordination/instance-retention.ts) go too: a replica votes only once registered.
const STALE_VOTE = `(v.instance_id = $1 AND NOT (v.job_name = ANY($2::text[])))
    OR v.instance_id IN (SELECT instance_id FROM instances WHERE heartbeat_at < clock_timestamp() - $3 * interval '1 millisecond' AND instance_id <> $1)
    OR (v.instance_id <> $1 AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.instance_id = v.instance_id))`;
const DROP_STALE = `DELETE FROM job_schedule_votes v WHERE ${STALE_VOTE}`;
// $1 instance, $2 votes json. Written only when changed, so an unchanged check notifies nobody (the triggers fire on changes).
const VOTE = `
INSERT INTO job_schedule_votes (job_name, instance_id, fingerprint, spec)
SELECT v.job, $1, v.fingerprint, v.spec FROM jsonb_to_recordset($2::jsonb) AS v(job text, fingerprint text, spec jsonb)
ON CONFLICT (job_name, instance_id) DO UPDATE SET fingerprint = EXCLUDED.fingerprint, spec = EXCLUDED.spec, updated_at = clock_timestamp()
 WHERE job_schedule_votes.fingerprint IS DISTINCT FROM EXCLUDED.fingerprint`;
// Rule 1 (or rule 3 with `own` true): the jobs of `v` (the votes) whose adopted schedule becomes the vote's.
const ownAdopts = (own: string) => `j.job_name = v.job AND (j.schedule_fingerprint IS NULL OR (${own}::boolean AND j.schedule_fingerprint IS DISTINCT FROM v.fingerprint))`;
// $1 votes json, $2 adopt own unconditionally.
const ADOPT_OWN = `
UPDATE job_state j SET schedule_fingerprint = v.fingerprint, schedule_spec = v.spec, schedule_adopted_at = clock_timestamp()
  FROM jsonb_to_recordset($1::jsonb) AS v(job text, fingerprint text, spec jsonb)
 WHERE ${ownAdopts('$2')}`;
// The published fingerprints of the live replicas: `inst` the checking instance (always live), `win` the liveness window ms.
const liveVotes = (inst: string, win: string) => `
SELECT v.job_name, v.fingerprint, v.spec FROM job_schedule_votes v LEFT JOIN instances i ON i.instance_id = v.instance_id
 WHERE v.instance_id = ${inst} OR (i.instance_id IS NOT NULL AND ${instanceAliveSql('i', win)})`;
// Rule 2. Only votes of replicas that have the job enabled count (a replica with it disabled runs
// nothing of it, so it neither holds the others back nor is adopted), unless no live replica has it
// enabled: then every live vote counts (the last replica that enabled it left; without this, its
// schedule stayed adopted and every remaining replica read config_drift for ever). "Left" is
// stopped, or no beat within the window: a replica between its liveness sessions (a reconnect)
// still beats, so the schedule does not flip while it is away for a moment. The counted live
// replicas agree: theirs is adopted. They disagree and none of them is on the adopted schedule any more (its
// last replicas left mid-rollout): the schedule most of them run is adopted (ties: the smallest
// fingerprint), so a job never stops everywhere for want of agreement; the rest read config_drift.
// `agreedPick` are the CTEs, `AGREED_CHANGES` the rows of `job_state j` / `pick p` the rule changes.
const agreedPick = (inst: string, win: string) => `live AS (${liveVotes(inst, win)}),
voting AS (SELECT * FROM live l WHERE (l.spec->>'enabled')::boolean IS NOT FALSE
   OR (NOT EXISTS (SELECT 1 FROM live e WHERE e.job_name = l.job_name AND (e.spec->>'enabled')::boolean IS NOT FALSE)
       AND NOT EXISTS (SELECT 1 FROM job_schedule_votes e JOIN instances i ON i.instance_id = e.instance_id
                        WHERE e.job_name = l.job_name AND (e.spec->>'enabled')::boolean IS NOT FALSE AND i.stopped_at IS NULL
                          AND i.heartbeat_at > clock_timestamp() - make_interval(secs => ${win}::double precision / 1000)))),
counts AS (SELECT job_name, fingerprint, count(*) AS n, (array_agg(spec))[1] AS spec FROM voting GROUP BY job_name, fingerprint),
pick AS (
  SELECT DISTINCT ON (c.job_name) c.job_name, c.fingerprint, c.spec, (SELECT count(*) FROM counts k WHERE k.job_name = c.job_name) AS kinds
    FROM counts c ORDER BY c.job_name, c.n DESC, c.fingerprint
)`;
const AGREED_CHANGES = `j.job_name = p.job_name AND j.schedule_fingerprint IS DISTINCT FROM p.fingerprint
   AND (p.kinds = 1 OR NOT EXISTS (SELECT 1 FROM voting e WHERE e.job_name = j.job_name AND e.fingerprint = j.schedule_fingerprint))`;
// $1 instance, $2 liveness window ms.
const ADOPT_AGREED = `
WITH ${agreedPick('$1', '$2')}
UPDATE job_state j SET schedule_fingerprint = p.fingerprint, schedule_spec = p.spec, schedule_adopted_at = clock_timestamp()
  FROM pick p
 WHERE ${AGREED_CHANGES}`;
// The adopted schedules with the live replicas off each (`live` in scope).
const ADOPTED_ROWS = `
SELECT j.job_name, j.schedule_fingerprint, j.schedule_spec, j.schedule_adopted_at,
       (SELECT count(*) FROM live WHERE live.job_name = j.job_name AND live.fingerprint <> j.schedule_fingerprint)::int AS off_schedule
  FROM job_state j WHERE j.schedule_fingerprint IS NOT NULL`;
// $1 instance, $2 liveness window ms.
const READ_ADOPTED = `WITH live AS (${liveVotes('$1', '$2')}) ${ADOPTED_ROWS}`;
// The steady state's check, one read-only statement: would DROP_STALE, VOTE, ADOPT_OWN or ADOPT_AGREED
// change a row (`dirty`), and the adopted schedules as READ_ADOPTED reads them. Only a dirty check runs
// the writing transaction; an unchanged cluster's check writes nothing (VOTE's ON CONFLICT locks every
// conflicting row, and each lock is a write). With this replica's votes already in place and nothing to
// drop or adopt, the transaction would read exactly this. $1 instance, $2 jobs, $3 horizon ms, $4 votes
// json, $5 adopt own unconditionally, $6 liveness window ms. One row: `dirty`, then each adopted
// schedule's columns (null when none is adopted yet).
const CHECK = `
WITH mine AS (SELECT v.job, v.fingerprint FROM jsonb_to_recordset($4::jsonb) AS v(job text, fingerprint text)),
${agreedPick('$1', '$6')},
flag AS (SELECT
    EXISTS (SELECT 1 FROM job_schedule_votes v WHERE ${STALE_VOTE})
    OR EXISTS (SELECT 1 FROM mine m WHERE NOT EXISTS (SELECT 1 FROM job_schedule_votes v WHERE v.instance_id = $1 AND v.job_name = m.job AND v.fingerprint = m.fingerprint))
    OR EXISTS (SELECT 1 FROM job_state j JOIN mine v ON ${ownAdopts('$5')})
    OR (NOT $5::boolean AND EXISTS (SELECT 1 FROM job_state j JOIN pick p ON ${AGREED_CHANGES})) AS dirty),
adopted AS (${ADOPTED_ROWS})
SELECT f.dirty, a.* FROM flag f LEFT JOIN adopted a ON true`;

export class ClusterSchedules {
  constructor(
    private readonly db: Db,
    private readonly instanceId: string,
    /** The liveness window of a replica without a published liveness key: three heartbeats. */
    private readonly livenessMs: number,
  ) {}

  /**
   * Publishes this replica's schedules, applies the adoption rule and returns every adopted
   * schedule. First one read-only statement (CHECK); only when it finds a row to change, one
   * transaction that sees its own votes. Job rows must exist (`ensureJobs`).
   */
  async publish(votes: readonly ScheduleVote[], opts: { adoptOwn?: boolean } = {}): Promise<Map<string, AdoptedSchedule>> {
    const json = JSON.stringify(votes.map((v) => ({ job: v.job, fingerprint: v.fingerprint, spec: v.spec })));
    const check = await this.db.query<Nullable<AdoptedRow> & { dirty: boolean }>(CHECK, [
      this.instanceId,
      votes.map((v) => v.job),
      DEAD_REPLICA_HORIZON_MS,
      json,
      opts.adoptOwn === true,
      this.livenessMs,
    ]);
    if (check.rows[0]?.dirty === false) return new Map(check.rows.filter((r): r is AdoptedRow & { dirty: boolean } => r.job_name !== null).map((r) => [r.job_name, toAdopted(r)]));
    return this.db.tx(async (q) => {
      await q.query(DROP_STALE, [this.instanceId, votes.map((v) => v.job), DEAD_REPLICA_HORIZON_MS]);
      await q.query(VOTE, [this.instanceId, json]);
      await q.query(ADOPT_OWN, [json, opts.adoptOwn === true]);
      if (!opts.adoptOwn) await q.query(ADOPT_AGREED, [this.instanceId, this.livenessMs]);
      const { rows } = await q.query<AdoptedRow>(READ_ADOPTED, [this.instanceId, this.livenessMs]);
      return new Map(rows.map((r) => [r.job_name, toAdopted(r)]));
    });
  }

  /** The adopted schedule of every job (what the doctor compares with), read by any process. */
  static async adopted(db: Db): Promise<Map<string, Omit<AdoptedSchedule, 'offSchedule'>>> {
    const { rows } = await db.query<AdoptedRow>('SELECT job_name, schedule_fingerprint, schedule_spec, schedule_adopted_at, 0 AS off_schedule FROM job_state WHERE schedule_fingerprint IS NOT NULL');
    return new Map(rows.map((r) => [r.job_name, toAdopted(r)]));
  }

  /** Every replica's published schedules (alive or not: the caller filters by its own view of who is live). */
  static async published(db: Db): Promise<PublishedSchedule[]> {
    const { rows } = await db.query<{ job_name: string; instance_id: string; fingerprint: string; spec: ScheduleSpecRecord }>(
      'SELECT job_name, instance_id, fingerprint, spec FROM job_schedule_votes ORDER BY job_name, instance_id',
    );
    return rows.map((r) => ({ job: r.job_name, instanceId: r.instance_id, fingerprint: r.fingerprint, spec: r.spec }));
  }
}

/** CHECK's row when no schedule is adopted yet: `dirty` and nulls (its LEFT JOIN). */
type Nullable<T> = { [K in keyof T]: T[K] | null };

interface AdoptedRow {
  job_name: string;
  schedule_fingerprint: string;
  schedule_spec: ScheduleSpecRecord;
  schedule_adopted_at: unknown;
  off_schedule: unknown;
}

function toAdopted(r: AdoptedRow): AdoptedSchedule {
  return { job: r.job_name, fingerprint: r.schedule_fingerprint, spec: r.schedule_spec, adoptedAt: toDate(r.schedule_adopted_at)!, offSchedule: num(r.off_schedule) };
}
