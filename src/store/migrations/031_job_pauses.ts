/**
 * Pause and resume (issue 49, point 2). A job's pause lives on its `job_state` row, the row every
 * cluster claim already updates, so the claim statement refuses a paused job in the same atomic
 * step that takes the slot and the lease (`coordination/slot-claim.ts`): a pause committed before
 * a claim is seen by it, a claim committed first is a round that started before the pause and
 * finishes. `job_pause_audit` keeps who paused or resumed, when and why, one row per change.
 * A change notifies `job_pauses` (migration 026's `relay_jobs_wake`), so every replica's
 * pause book re-reads it at once: instance-scoped rounds have no claim statement to refuse them.
 */
export const sql = `
ALTER TABLE job_state
  ADD COLUMN paused_at     timestamptz,
  ADD COLUMN paused_by     text,
  ADD COLUMN paused_reason text;

CREATE TABLE job_pause_audit (
  id         bigserial PRIMARY KEY,
  job_name   text NOT NULL,
  action     text NOT NULL CHECK (action IN ('pause', 'resume')),
  actor      text NOT NULL,
  reason     text,
  at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX job_pause_audit_job ON job_pause_audit (job_name, id);

CREATE TRIGGER job_state_pause_wake AFTER UPDATE OF paused_at ON job_state
  FOR EACH ROW WHEN (OLD.paused_at IS DISTINCT FROM NEW.paused_at)
  EXECUTE FUNCTION relay_jobs_wake('job_pauses');
`;
