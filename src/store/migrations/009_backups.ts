/**
 * Backups: one row per backup attempt. A running row carries the instance writing it and a
 * lease (`lease_until`, database clock) that instance renews; only an expired lease lets
 * another replica mark it failed and remove its partial objects. The partial unique index
 * makes "at most one running backup cluster-wide" a property of the table, not of a lock.
 */
export const sql = `
CREATE TABLE backups (
  id              text PRIMARY KEY,
  trigger         text NOT NULL CHECK (trigger IN ('schedule', 'manual')),
  state           text NOT NULL CHECK (state IN ('running', 'completed', 'verified', 'verify_failed', 'failed')),
  instance_id     text NOT NULL,
  lease_until     timestamptz,
  storage         text NOT NULL CHECK (storage IN ('fs', 's3')),
  location        text NOT NULL,
  object_key      text NOT NULL,
  format          text NOT NULL CHECK (format IN ('pg_dump', 'pglite')),
  compression     text NOT NULL,
  size_bytes      bigint,
  sha256          text,
  server_version  text,
  table_counts    jsonb,
  job_run_id      bigint,
  started_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at     timestamptz,
  duration_ms     integer,
  verified_at     timestamptz,
  verify_error    text,
  error           text
);

CREATE UNIQUE INDEX backups_one_running ON backups ((true)) WHERE state = 'running';
CREATE INDEX backups_started ON backups (started_at DESC);
`;
