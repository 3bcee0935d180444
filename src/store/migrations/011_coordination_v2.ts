/**
 * Coordination v2 (docs/coordination.md):
 * - `job_state.holder_alive_key`: the liveness key (session advisory lock) of the replica that
 *   holds the lease, so a claim can take over at once when that session is gone;
 * - `instances.alive_key`: the same key per replica, for the refresh sharding's view of who is alive;
 * - `job_skip_counts`: rounds a replica did not run (another replica led), counted per replica
 *   and job and written by the heartbeat instead of one `job_runs` row per skipped round.
 */
export const sql = `
ALTER TABLE job_state ADD COLUMN holder_alive_key integer;
ALTER TABLE instances ADD COLUMN alive_key integer;

CREATE TABLE job_skip_counts (
  job_name     text NOT NULL,
  instance_id  text NOT NULL,
  skipped      bigint NOT NULL DEFAULT 0,
  last_skip_at timestamptz,
  last_reason  text,
  PRIMARY KEY (job_name, instance_id)
);
`;
