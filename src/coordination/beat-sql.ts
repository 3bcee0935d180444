import { HELD_BY_ME } from './liveness.js';
import { instanceAliveSql } from './instance-alive.js';
import { elapsedMsSql } from '../store/sql-now.js';

// The heartbeat's one statement (instance-registry.ts sends it), apart from the registry because it
// carries everything a beat writes besides the beat itself: skips, process figures, the kept
// instance rounds (idle-rounds.ts) and the memberships' live members.

// The live members of each declared membership ($10 its names; memberships.ts), alive by the one test (a crashed
// replica drops out at the next beat of any other, not after the heartbeat timeout); one with none is absent.
const MEMBERS = `(SELECT coalesce(jsonb_object_agg(g.name, g.ids), '{}'::jsonb) FROM (
  SELECT u.name, array_agg(m.instance_id ORDER BY m.instance_id) AS ids FROM instances m CROSS JOIN LATERAL unnest(m.memberships) AS u(name)
   WHERE u.name = ANY($10::text[]) AND ${instanceAliveSql('m', '$5')} GROUP BY u.name) g)`;
// One statement per beat, whatever the number of jobs: the beat, the database clock for the skew
// measurement, the summary of the rounds skipped since the last beat, this process's figures
// (null keeps the previous ones), the finished records of the idle instance rounds since the last
// beat and of those whose own record could not reach the database (idle-rounds.ts: inserted, or, for a round whose
// `running` row was written, that row completed), and the members of
// every declared membership.
// $1 instance, $2 boot, $3 skew ms, $4 skips json, $5 liveness window ms, $6 process json, $7 backend identity json (null keeps it),
// $8 idle rounds json, $9 loop report json (null keeps it), $10 the declared memberships' names
const beatSql = (aliveKey: string, held: string) => `
WITH skips AS (
  INSERT INTO job_skip_counts (job_name, instance_id, skipped, last_skip_at, last_reason)
  SELECT s.job, $1, s.n, s.at, s.reason FROM jsonb_to_recordset($4::jsonb) AS s(job text, n bigint, at timestamptz, reason text)
  ON CONFLICT (job_name, instance_id) DO UPDATE SET skipped = job_skip_counts.skipped + EXCLUDED.skipped,
     last_skip_at = GREATEST(job_skip_counts.last_skip_at, EXCLUDED.last_skip_at), last_reason = EXCLUDED.last_reason
), kept AS (
  SELECT r.*, clock_timestamp() - make_interval(secs => r.ago_ms / 1000) AS started,
         clock_timestamp() - make_interval(secs => (r.ago_ms - r.duration_ms) / 1000) AS finished
    FROM jsonb_to_recordset($8::jsonb) AS r(job text, slot timestamptz, ago_ms double precision, duration_ms double precision, note text,
                                             status text, items int, error text, timeout_ms double precision, run_id bigint)
), idle AS (
  INSERT INTO job_runs (job_name, slot, scope, trigger, instance_id, status, started_at, deadline_at, finished_at, duration_ms, items, note, error)
  SELECT r.job, r.slot, 'instance', 'schedule', $1, coalesce(r.status, 'no_work'), r.started, r.started + make_interval(secs => r.timeout_ms / 1000),
         r.finished, r.duration_ms::int, coalesce(r.items, 0), r.note, r.error
    FROM kept r
   WHERE r.run_id IS NULL
     -- A round whose own record may have committed with its reply lost: not written twice (its slot is its key on this replica).
     AND (r.status IS NULL OR NOT EXISTS (
       SELECT 1 FROM job_runs d WHERE d.job_name = r.job AND d.instance_id = $1 AND d.started_at BETWEEN r.started - interval '1 minute' AND r.started + interval '1 minute'
          AND d.slot = r.slot AND d.scope = 'instance' AND d.status = r.status))
), completed AS (
  UPDATE job_runs j SET status = r.status, items = r.items, note = r.note, error = r.error, finished_at = r.finished,
         duration_ms = ${elapsedMsSql('j.started_at', 'r.finished')}
    FROM kept r WHERE r.run_id IS NOT NULL AND j.id = r.run_id AND j.instance_id = $1 AND j.status = 'running'
)
UPDATE instances SET heartbeat_at = clock_timestamp(), clock_skew_ms = $3, alive_key = ${aliveKey},
  process = coalesce($6::jsonb, process), process_at = CASE WHEN $6::jsonb IS NULL THEN process_at ELSE clock_timestamp() END,
  backends = coalesce($7::jsonb, backends), loops = coalesce($9::jsonb, loops)
 WHERE instance_id = $1 AND boot_id = $2
RETURNING (extract(epoch FROM clock_timestamp()) * 1000)::double precision AS db_ms, ${held} AS held, ${MEMBERS} AS members`;
export const BEAT = beatSql('NULL', 'true');
// The same beat sent on the liveness session: it publishes the key and checks, at no extra statement, that this backend still holds it.
export const BEAT_ALIVE = beatSql('$LK', HELD_BY_ME);
