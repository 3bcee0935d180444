/** Users' balances, plans, subscriptions, payment orders with their audit trail, and the notification outbox. Money is integer minor units. */
export const sql = `
CREATE TABLE billing_users (
  id             bigserial PRIMARY KEY,
  external_id    text UNIQUE,
  email          text,
  balance        bigint NOT NULL DEFAULT 0 CHECK (balance >= 0),
  frozen_balance bigint NOT NULL DEFAULT 0 CHECK (frozen_balance >= 0),
  created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE plans (
  id            bigserial PRIMARY KEY,
  name          text NOT NULL,
  price         bigint NOT NULL CHECK (price >= 0),
  duration_days integer NOT NULL CHECK (duration_days > 0),
  active        boolean NOT NULL DEFAULT true,
  created_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE subscriptions (
  id         bigserial PRIMARY KEY,
  user_id    bigint NOT NULL REFERENCES billing_users(id),
  plan_id    bigint NOT NULL REFERENCES plans(id),
  starts_at  timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  status     text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'expired', 'cancelled')),
  created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  CHECK (expires_at > starts_at)
);
CREATE INDEX subscriptions_active_expiry ON subscriptions (expires_at) WHERE status = 'active';
CREATE INDEX subscriptions_user ON subscriptions (user_id);

CREATE TABLE payment_orders (
  id                bigserial PRIMARY KEY,
  user_id           bigint NOT NULL REFERENCES billing_users(id),
  amount            bigint NOT NULL CHECK (amount > 0),
  currency          text NOT NULL,
  provider          text NOT NULL,
  provider_order_id text NOT NULL,
  purpose           text NOT NULL CHECK (purpose IN ('balance', 'subscription')),
  plan_id           bigint REFERENCES plans(id),
  status            text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'paid', 'expired', 'failed', 'refunded')),
  expires_at        timestamptz NOT NULL,
  paid_at           timestamptz,
  last_checked_at   timestamptz,
  check_failures    integer NOT NULL DEFAULT 0,
  created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
  UNIQUE (provider, provider_order_id),
  CHECK (purpose = 'balance' OR plan_id IS NOT NULL)
);
CREATE INDEX payment_orders_pending ON payment_orders (expires_at) WHERE status = 'pending';

-- Every state change of an order, and every refused webhook that named one.
CREATE TABLE payment_order_events (
  id          bigserial PRIMARY KEY,
  order_id    bigint REFERENCES payment_orders(id),
  provider    text,
  event       text NOT NULL,
  from_status text,
  to_status   text,
  source      text NOT NULL,
  detail      jsonb,
  created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX payment_order_events_order ON payment_order_events (order_id);

-- The notification outbox and delivery log: the intent is a row before anything is sent.
CREATE TABLE notification_deliveries (
  id              bigserial PRIMARY KEY,
  dedup_key       text NOT NULL UNIQUE,
  channel         text NOT NULL,
  recipient       text NOT NULL,
  template        text NOT NULL,
  params          jsonb NOT NULL,
  status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sending', 'sent', 'failed', 'skipped')),
  attempts        integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  claimed_by      text,
  claimed_until   timestamptz,
  last_error      text,
  created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
  sent_at         timestamptz
);
-- Admin-editable notification settings (override the config file's defaults).
CREATE TABLE notification_settings (
  key        text PRIMARY KEY,
  value      jsonb NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX notification_deliveries_due ON notification_deliveries (next_attempt_at) WHERE status IN ('pending', 'sending');
`;
