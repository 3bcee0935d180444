/** The operations plane: per-bucket metrics and their rollups, alert rules with their fenced state, events, silences, scheduled reports, retention overrides. */
export const sql = `
-- One row per collected bucket, cluster-wide; a gap means the collector did not run.
CREATE TABLE ops_metrics_minute (
  bucket         timestamptz PRIMARY KEY,
  bucket_seconds integer NOT NULL,
  metrics        jsonb NOT NULL,
  instances      jsonb NOT NULL DEFAULT '[]',
  fencing_token  bigint NOT NULL,
  collected_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE ops_metrics_hourly (
  bucket     timestamptz PRIMARY KEY,
  metrics    jsonb NOT NULL,
  samples    integer NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE ops_metrics_daily (
  bucket     timestamptz PRIMARY KEY,
  metrics    jsonb NOT NULL,
  samples    integer NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE ops_alert_rules (
  id               bigserial PRIMARY KEY,
  name             text NOT NULL UNIQUE,
  metric           text NOT NULL,
  operator         text NOT NULL CHECK (operator IN ('>', '>=', '<', '<=', '==', '!=')),
  threshold        double precision NOT NULL,
  window_seconds   integer NOT NULL CHECK (window_seconds > 0),
  sustained        integer NOT NULL CHECK (sustained >= 1),
  severity         text NOT NULL CHECK (severity IN ('info', 'warning', 'critical')),
  cooldown_seconds integer NOT NULL DEFAULT 0 CHECK (cooldown_seconds >= 0),
  labels           jsonb NOT NULL DEFAULT '{}',
  enabled          boolean NOT NULL DEFAULT true,
  notify           boolean NOT NULL DEFAULT true,
  created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- A rule's evaluation state. Written only by the evaluator round holding the newest fencing
-- token; the streak advances once per evaluated bucket, so a re-run never counts a bucket twice.
CREATE TABLE ops_alert_state (
  rule_id        bigint PRIMARY KEY REFERENCES ops_alert_rules (id) ON DELETE CASCADE,
  streak         integer NOT NULL DEFAULT 0,
  last_bucket    timestamptz,
  last_value     double precision,
  event_id       bigint,
  resolved_at    timestamptz,
  fencing_token  bigint NOT NULL,
  updated_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE ops_alert_events (
  id            bigserial PRIMARY KEY,
  rule_id       bigint NOT NULL,
  rule_name     text NOT NULL,
  metric        text NOT NULL,
  severity      text NOT NULL,
  state         text NOT NULL CHECK (state IN ('firing', 'resolved')),
  value         double precision,
  threshold     double precision NOT NULL,
  labels        jsonb NOT NULL,
  silenced      boolean NOT NULL DEFAULT false,
  fired_bucket  timestamptz NOT NULL,
  fired_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
  resolved_at   timestamptz,
  fencing_token bigint NOT NULL
);
-- At most one open event per rule, whatever the evaluator does.
CREATE UNIQUE INDEX ops_alert_events_open ON ops_alert_events (rule_id) WHERE state = 'firing';
CREATE INDEX ops_alert_events_fired ON ops_alert_events (fired_at);

CREATE TABLE ops_silences (
  id         bigserial PRIMARY KEY,
  rule_id    bigint,
  matchers   jsonb NOT NULL DEFAULT '{}',
  starts_at  timestamptz NOT NULL,
  ends_at    timestamptz NOT NULL CHECK (ends_at > starts_at),
  reason     text NOT NULL,
  author     text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE ops_reports (
  id         bigserial PRIMARY KEY,
  name       text NOT NULL UNIQUE,
  kind       text NOT NULL CHECK (kind IN ('daily_summary', 'weekly_summary', 'error_digest', 'account_health')),
  cron       text NOT NULL,
  timezone   text NOT NULL,
  recipients jsonb NOT NULL,
  params     jsonb NOT NULL DEFAULT '{}',
  enabled    boolean NOT NULL DEFAULT true,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- One row per occurrence of a report: the exactly-once record (sent, skipped as empty, or
-- coalesced into a later occurrence after downtime).
CREATE TABLE ops_report_runs (
  report_id  bigint NOT NULL REFERENCES ops_reports (id) ON DELETE CASCADE,
  occurrence timestamptz NOT NULL,
  status     text NOT NULL CHECK (status IN ('queued', 'skipped_empty', 'coalesced')),
  note       text,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (report_id, occurrence)
);

-- Runtime overrides of ops_cleanup retention (days; 0 empties, negative skips).
CREATE TABLE ops_retention (
  target     text PRIMARY KEY,
  days       integer NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
`;
