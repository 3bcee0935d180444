/** Runtime core: instances, job coordination state, round records, fenced cursors, admin sessions, canary. */
export const sql = `
CREATE TABLE instances (
  instance_id   text PRIMARY KEY,
  boot_id       text NOT NULL,
  env           text NOT NULL,
  mode          text NOT NULL,
  hostname      text NOT NULL,
  pid           integer NOT NULL,
  http_port     integer,
  version       text NOT NULL,
  started_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  heartbeat_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  stopped_at    timestamptz,
  clock_skew_ms integer
);

-- One row per job: the authoritative lease, the fencing-token counter and the last claimed slot.
CREATE TABLE job_state (
  job_name        text PRIMARY KEY,
  fencing_token   bigint NOT NULL DEFAULT 0,
  last_slot       timestamptz,
  holder_instance text,
  lease_until     timestamptz,
  created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE job_runs (
  id            bigserial PRIMARY KEY,
  job_name      text NOT NULL,
  slot          timestamptz NOT NULL,
  scope         text NOT NULL CHECK (scope IN ('cluster', 'instance')),
  trigger       text NOT NULL CHECK (trigger IN ('schedule', 'manual')),
  instance_id   text NOT NULL,
  fencing_token bigint,
  status        text NOT NULL CHECK (status IN ('running', 'ok', 'no_work', 'skipped_not_leader', 'failed', 'timed_out')),
  lock_backend  text CHECK (lock_backend IN ('redis', 'postgres', 'memory')),
  started_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  deadline_at   timestamptz,
  finished_at   timestamptz,
  duration_ms   integer,
  items         integer,
  note          text,
  error         text
);
-- Invariant 1 as a constraint: one claimed scheduled round per (job, slot), whatever the lock backend.
CREATE UNIQUE INDEX job_runs_one_claim_per_slot ON job_runs (job_name, slot)
  WHERE scope = 'cluster' AND trigger = 'schedule' AND fencing_token IS NOT NULL;
CREATE INDEX job_runs_by_job ON job_runs (job_name, started_at DESC);
CREATE INDEX job_runs_running ON job_runs (job_name) WHERE status = 'running';
CREATE INDEX job_runs_started ON job_runs (started_at);

-- Job state that must never move backwards, written only with a token at least as new as the stored one.
CREATE TABLE job_cursors (
  job_name      text NOT NULL,
  key           text NOT NULL,
  value         jsonb NOT NULL,
  fencing_token bigint NOT NULL,
  updated_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (job_name, key)
);

CREATE TABLE admin_sessions (
  id         text PRIMARY KEY,
  token_hash text NOT NULL UNIQUE,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  expires_at timestamptz NOT NULL
);
CREATE INDEX admin_sessions_expires ON admin_sessions (expires_at);

CREATE TABLE canary_runs (
  id            bigserial PRIMARY KEY,
  slot          timestamptz NOT NULL,
  instance_id   text NOT NULL,
  fencing_token bigint NOT NULL,
  phase         text NOT NULL CHECK (phase IN ('start', 'end')),
  at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX canary_runs_slot ON canary_runs (slot);
`;
