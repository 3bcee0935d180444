/**
 * One schedule per job across the cluster (issue 49, point 1). Each replica publishes, per job, the
 * fingerprint of its schedule (`job_schedule_votes`, one row per job and replica, written when it
 * changes: `coordination/cluster-schedules.ts`); the schedule the cluster runs is kept on the job's
 * `job_state` row (`schedule_fingerprint`, `schedule_spec`, `schedule_adopted_at`), the row every
 * cluster claim already updates, so the claim refuses a slot computed from another schedule in the
 * same statement that takes it (`coordination/slot-claim.ts`). The adoption rule is in
 * docs/coordination.md ("One schedule per job").
 *
 * Every change that can move the adoption notifies `job_schedules` (migration 026's
 * `relay_jobs_wake`), so each replica's schedule book re-checks at once: a vote that changed, a
 * schedule adopted, and a replica's clean stop (the last old replica of a rolling deploy leaving).
 * A replica that dies without stopping is seen at the next check (every `cluster.instance_heartbeat`).
 */
export const sql = `
CREATE TABLE job_schedule_votes (
  job_name    text NOT NULL,
  instance_id text NOT NULL,
  fingerprint text NOT NULL,
  spec        jsonb NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (job_name, instance_id)
);
CREATE INDEX job_schedule_votes_instance ON job_schedule_votes (instance_id);

ALTER TABLE job_state
  ADD COLUMN schedule_fingerprint text,
  ADD COLUMN schedule_spec        jsonb,
  ADD COLUMN schedule_adopted_at  timestamptz;

CREATE TRIGGER job_schedule_votes_wake_insert AFTER INSERT ON job_schedule_votes
  FOR EACH ROW EXECUTE FUNCTION relay_jobs_wake('job_schedules');
CREATE TRIGGER job_schedule_votes_wake_update AFTER UPDATE OF fingerprint ON job_schedule_votes
  FOR EACH ROW WHEN (OLD.fingerprint IS DISTINCT FROM NEW.fingerprint)
  EXECUTE FUNCTION relay_jobs_wake('job_schedules');
CREATE TRIGGER job_state_schedule_wake AFTER UPDATE OF schedule_fingerprint ON job_state
  FOR EACH ROW WHEN (OLD.schedule_fingerprint IS DISTINCT FROM NEW.schedule_fingerprint)
  EXECUTE FUNCTION relay_jobs_wake('job_schedules');
CREATE TRIGGER instances_stopped_schedule_wake AFTER UPDATE OF stopped_at ON instances
  FOR EACH ROW WHEN (OLD.stopped_at IS NULL AND NEW.stopped_at IS NOT NULL)
  EXECUTE FUNCTION relay_jobs_wake('job_schedules');
`;
