/** Upstream accounts, proxies, per-account refresh leases, the scheduler outbox and the master-key check. */
export const sql = `
CREATE TABLE secret_keys (
  purpose     text PRIMARY KEY,
  fingerprint text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE proxies (
  id              bigserial PRIMARY KEY,
  name            text NOT NULL,
  url_sealed      text NOT NULL,
  url_display     text NOT NULL,
  status          text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'expired', 'disabled')),
  expires_at      timestamptz,
  fallback_mode   text NOT NULL DEFAULT 'none' CHECK (fallback_mode IN ('none', 'proxy', 'direct')),
  backup_proxy_id bigint REFERENCES proxies(id) ON DELETE SET NULL,
  expired_at      timestamptz,
  created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX proxies_expiry_due ON proxies (expires_at) WHERE status = 'active' AND expires_at IS NOT NULL;

CREATE TABLE accounts (
  id                        bigserial PRIMARY KEY,
  platform                  text NOT NULL,
  name                      text NOT NULL,
  credentials_sealed        text NOT NULL,
  has_refresh_token         boolean NOT NULL,
  token_expires_at          timestamptz,
  token_version             bigint NOT NULL DEFAULT 1,
  status                    text NOT NULL DEFAULT 'active'
                            CHECK (status IN ('active', 'quota_exhausted', 'refreshing', 'expired', 'error', 'disabled', 'banned')),
  status_reason             text,
  status_before_refresh     text,
  schedulable               boolean NOT NULL DEFAULT true,
  expires_at                timestamptz,
  auto_pause_on_expired     boolean NOT NULL DEFAULT false,
  temp_unschedulable_until  timestamptz,
  temp_unschedulable_reason text,
  proxy_id                  bigint REFERENCES proxies(id) ON DELETE SET NULL,
  proxy_fallback_origin_id  bigint REFERENCES proxies(id) ON DELETE SET NULL,
  last_refresh_attempt_at   timestamptz,
  last_refresh_success_at   timestamptz,
  refresh_failures          integer NOT NULL DEFAULT 0,
  last_refresh_error        text,
  created_at                timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at                timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- The refresh scheduler's incremental sync reads changes since its last look.
CREATE INDEX accounts_updated ON accounts (updated_at);
CREATE INDEX accounts_autopause_due ON accounts (expires_at) WHERE auto_pause_on_expired AND schedulable;
CREATE INDEX accounts_proxy ON accounts (proxy_id);
CREATE INDEX accounts_proxy_origin ON accounts (proxy_fallback_origin_id) WHERE proxy_fallback_origin_id IS NOT NULL;

-- The seed's cross-process refresh lease: one owner identity per process, renewed while a refresh runs.
CREATE TABLE account_refresh_leases (
  account_id bigint PRIMARY KEY REFERENCES accounts(id) ON DELETE CASCADE,
  owner      text NOT NULL,
  expires_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX account_refresh_leases_expiry ON account_refresh_leases (expires_at);

-- Changes the scheduler snapshot must pick up (consumed by scheduler_snapshot, a later job).
CREATE TABLE scheduler_outbox (
  id          bigserial PRIMARY KEY,
  event_type  text NOT NULL,
  payload     jsonb NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
`;
