/**
 * Usage data: raw usage partitioned by UTC day, the request-id dedup index, hourly and daily
 * rollups, admin range-cleanup tasks, idempotency records and per-user platform quota usage.
 */
export const sql = `
CREATE TABLE usage_logs (
  id            bigserial,
  request_id    text NOT NULL,
  user_id       text NOT NULL,
  api_key_id    text,
  account_id    text,
  platform      text NOT NULL,
  model         text NOT NULL,
  input_tokens  bigint NOT NULL,
  output_tokens bigint NOT NULL,
  cache_tokens  bigint NOT NULL DEFAULT 0,
  cost          numeric(24, 10) NOT NULL,
  latency_ms    integer,
  status_code   integer,
  created_at    timestamptz NOT NULL,
  ingested_at   timestamptz NOT NULL DEFAULT clock_timestamp()
) PARTITION BY RANGE (created_at);
CREATE INDEX usage_logs_created ON usage_logs (created_at);
CREATE INDEX usage_logs_user ON usage_logs (user_id, created_at);

-- A request id is stored once however often the gateway sends it, across partitions.
CREATE TABLE usage_request_ids (
  request_id text PRIMARY KEY,
  created_at timestamptz NOT NULL
);
CREATE INDEX usage_request_ids_created ON usage_request_ids (created_at);

CREATE TABLE usage_hourly (
  bucket        timestamptz NOT NULL,
  user_id       text NOT NULL,
  account_id    text NOT NULL,
  platform      text NOT NULL,
  model         text NOT NULL,
  requests      bigint NOT NULL,
  input_tokens  bigint NOT NULL,
  output_tokens bigint NOT NULL,
  cache_tokens  bigint NOT NULL,
  cost          numeric(24, 10) NOT NULL,
  errors        bigint NOT NULL,
  latency_sum   bigint NOT NULL,
  latency_count bigint NOT NULL,
  PRIMARY KEY (bucket, user_id, account_id, platform, model)
);

CREATE TABLE usage_daily (
  day           date NOT NULL,
  user_id       text NOT NULL,
  account_id    text NOT NULL,
  platform      text NOT NULL,
  model         text NOT NULL,
  requests      bigint NOT NULL,
  input_tokens  bigint NOT NULL,
  output_tokens bigint NOT NULL,
  cache_tokens  bigint NOT NULL,
  cost          numeric(24, 10) NOT NULL,
  errors        bigint NOT NULL,
  latency_sum   bigint NOT NULL,
  latency_count bigint NOT NULL,
  PRIMARY KEY (day, user_id, account_id, platform, model)
);

CREATE TABLE usage_cleanup_tasks (
  id            bigserial PRIMARY KEY,
  user_id       text,
  account_id    text,
  range_start   timestamptz NOT NULL,
  range_end     timestamptz NOT NULL,
  status        text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'done', 'cancelled', 'failed')),
  claimed_by    text,
  heartbeat_at  timestamptz,
  deleted_rows  bigint NOT NULL DEFAULT 0,
  error         text,
  created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at   timestamptz,
  CHECK (range_end > range_start)
);
CREATE INDEX usage_cleanup_tasks_open ON usage_cleanup_tasks (created_at) WHERE status IN ('pending', 'running');

CREATE TABLE idempotency_records (
  scope           text NOT NULL,
  key             text NOT NULL,
  request_hash    text NOT NULL,
  status          text NOT NULL CHECK (status IN ('in_progress', 'completed')),
  response        jsonb,
  response_status integer,
  locked_until    timestamptz,
  created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
  expires_at      timestamptz NOT NULL,
  PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_records_expiry ON idempotency_records (expires_at);

-- Absolute per-user, per-platform usage as last flushed from the counters; epoch bumps on reset.
CREATE TABLE platform_quota_usage (
  user_id    text NOT NULL,
  platform   text NOT NULL,
  used       bigint NOT NULL,
  epoch      bigint NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (user_id, platform)
);
`;
