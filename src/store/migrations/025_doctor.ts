/**
 * `relay-jobs doctor` (issue 27): each replica records the identity of the backends it talks to
 * (Redis `run_id` and role, the database's `system_identifier` and name, its pool size and lock
 * key prefix), refreshed by its heartbeat, so one replica can tell that another is on a different
 * Redis or database. `doctor_checks` keeps the newest result of each check, written by the
 * scheduled `doctor` job under its fencing token; `doctor_db_size` the size samples growth is
 * measured from.
 */
export const sql = `
ALTER TABLE instances ADD COLUMN backends jsonb;

CREATE TABLE doctor_checks (
  name          text PRIMARY KEY,
  grp           text NOT NULL,
  status        text NOT NULL CHECK (status IN ('ok', 'warn', 'fail')),
  measured      text NOT NULL,
  fix           text NOT NULL,
  checked_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  instance_id   text NOT NULL,
  fencing_token bigint NOT NULL
);

-- One database size sample per doctor round (cluster mode's disk headroom: growth per day); 35 days kept.
CREATE TABLE doctor_db_size (
  at    timestamptz PRIMARY KEY,
  bytes bigint NOT NULL
);
`;
