/**
 * Fleet probes: channel monitors (claimed from `next_due_at` with a lease and a fence), their raw
 * results and minute rollups, scheduled account-test plans and results, and the account audit.
 */
export const sql = `
CREATE TABLE monitors (
  id             bigserial PRIMARY KEY,
  name           text NOT NULL,
  base_url       text,
  model          text NOT NULL,
  api_key_sealed text,
  account_id     bigint REFERENCES accounts(id) ON DELETE CASCADE,
  interval_ms    integer NOT NULL CHECK (interval_ms > 0),
  timeout_ms     integer NOT NULL CHECK (timeout_ms > 0),
  jitter_ms      integer NOT NULL DEFAULT 0 CHECK (jitter_ms >= 0),
  enabled        boolean NOT NULL DEFAULT true,
  labels         jsonb NOT NULL DEFAULT '{}',
  -- The claim: due when next_due_at <= now() and no live lease; every claim bumps fence.
  next_due_at    timestamptz NOT NULL,
  lease_owner    text,
  lease_until    timestamptz,
  fence          bigint NOT NULL DEFAULT 0,
  last_probe_at  timestamptz,
  last_status    integer,
  last_error_class text,
  last_latency_ms integer,
  created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
  CHECK (account_id IS NOT NULL OR (base_url IS NOT NULL AND api_key_sealed IS NOT NULL))
);
CREATE INDEX monitors_due ON monitors (next_due_at) WHERE enabled;
CREATE INDEX monitors_account ON monitors (account_id) WHERE account_id IS NOT NULL;

-- No foreign key: a result written just after its monitor was deleted must not fail the batch it rides in.
CREATE TABLE monitor_results (
  id            bigserial PRIMARY KEY,
  monitor_id    bigint NOT NULL,
  fence         bigint NOT NULL,
  scheduled_for timestamptz NOT NULL,
  started_at    timestamptz NOT NULL,
  ok            boolean NOT NULL,
  status        integer,
  latency_ms    integer NOT NULL,
  ttfb_ms       integer,
  error_class   text,
  instance_id   text NOT NULL,
  -- Whole intervals that passed unprobed before this probe's claim (pool full, replicas down): recorded, never silent.
  missed        integer NOT NULL DEFAULT 0,
  -- True when the lease had already passed to another claim when the result arrived.
  fenced_out    boolean NOT NULL DEFAULT false
);
CREATE INDEX monitor_results_monitor ON monitor_results (monitor_id, started_at);
CREATE INDEX monitor_results_started ON monitor_results (started_at);

CREATE TABLE monitor_rollups (
  monitor_id   bigint NOT NULL,
  minute       timestamptz NOT NULL,
  probes       integer NOT NULL,
  ok           integer NOT NULL,
  p50_ms       double precision,
  p95_ms       double precision,
  errors       jsonb NOT NULL DEFAULT '{}',
  PRIMARY KEY (monitor_id, minute)
);
CREATE INDEX monitor_rollups_minute ON monitor_rollups (minute);

-- The rollup watermark: complete minutes before upto are aggregated; written only by the newest fence.
CREATE TABLE probe_watermarks (
  name       text PRIMARY KEY,
  upto       timestamptz NOT NULL,
  fence      bigint NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE account_test_plans (
  id           bigserial PRIMARY KEY,
  account_id   bigint NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  cron         text NOT NULL,
  timezone     text NOT NULL DEFAULT 'UTC',
  model        text NOT NULL,
  max_results  integer NOT NULL CHECK (max_results > 0),
  auto_recover boolean NOT NULL DEFAULT false,
  enabled      boolean NOT NULL DEFAULT true,
  next_run_at  timestamptz NOT NULL,
  lease_owner  text,
  lease_until  timestamptz,
  fence        bigint NOT NULL DEFAULT 0,
  last_run_at  timestamptz,
  last_ok      boolean,
  created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX account_test_plans_due ON account_test_plans (next_run_at) WHERE enabled;
CREATE INDEX account_test_plans_leased ON account_test_plans (lease_until) WHERE lease_until IS NOT NULL;

CREATE TABLE account_test_results (
  id          bigserial PRIMARY KEY,
  plan_id     bigint NOT NULL REFERENCES account_test_plans(id) ON DELETE CASCADE,
  account_id  bigint NOT NULL,
  -- The cron occurrence this test ran for: one result per occurrence, whoever ran it.
  occurrence  timestamptz NOT NULL,
  started_at  timestamptz NOT NULL,
  ok          boolean NOT NULL,
  status      integer,
  latency_ms  integer NOT NULL,
  ttfb_ms     integer,
  error_class text,
  recovered   boolean NOT NULL DEFAULT false,
  instance_id text NOT NULL,
  UNIQUE (plan_id, occurrence)
);

CREATE TABLE account_audit (
  id         bigserial PRIMARY KEY,
  account_id bigint NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  action     text NOT NULL,
  actor      text NOT NULL,
  detail     jsonb NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX account_audit_account ON account_audit (account_id, id);
`;
