/**
 * Paid image batches (batch_image_worker). Money is bigint minor units. The queue lives here,
 * next to the money, so a batch's hold, its record and its queue row are written in one
 * transaction and can never disagree (see docs/image-batches.md).
 */
export const sql = `
CREATE TABLE image_batches (
  id                bigserial PRIMARY KEY,
  user_id           bigint NOT NULL REFERENCES billing_users(id),
  idempotency_key   text NOT NULL,
  request_hash      text NOT NULL,
  model             text NOT NULL,
  size              text NOT NULL,
  n                 integer NOT NULL CHECK (n > 0),
  prompts           jsonb NOT NULL,
  image_count       integer NOT NULL CHECK (image_count > 0),
  price_per_image   bigint NOT NULL CHECK (price_per_image >= 0),
  hold_amount       bigint NOT NULL CHECK (hold_amount >= 0),
  state             text NOT NULL DEFAULT 'created' CHECK (state IN ('created', 'uploading', 'submitted', 'running', 'indexing', 'settling', 'completed', 'failed', 'cancelled', 'output_deleted')),
  reason            text,
  cancel_requested  boolean NOT NULL DEFAULT false,
  input_file_id     text,
  create_sent_at    timestamptz,
  provider_batch_id text UNIQUE,
  provider_status   text,
  output_file_id    text,
  error_file_id     text,
  succeeded         integer NOT NULL DEFAULT 0,
  failed            integer NOT NULL DEFAULT 0,
  captured          bigint NOT NULL DEFAULT 0,
  errors            integer NOT NULL DEFAULT 0,
  ended_at          timestamptz,
  inputs_deleted_at timestamptz,
  created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
  UNIQUE (user_id, idempotency_key),
  CHECK (captured <= hold_amount)
);
CREATE INDEX image_batches_stuck ON image_batches (updated_at) WHERE state IN ('created', 'uploading');
CREATE INDEX image_batches_ended ON image_batches (ended_at) WHERE ended_at IS NOT NULL AND state <> 'output_deleted';
CREATE INDEX image_batches_user ON image_batches (user_id, id);

-- Every state change, with time and reason.
CREATE TABLE image_batch_events (
  id         bigserial PRIMARY KEY,
  batch_id   bigint NOT NULL REFERENCES image_batches(id),
  from_state text,
  to_state   text NOT NULL,
  reason     text,
  at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX image_batch_events_batch ON image_batch_events (batch_id, id);

-- Per prompt (idx) the outcome; images are objects in the object store.
CREATE TABLE image_batch_results (
  batch_id    bigint NOT NULL REFERENCES image_batches(id),
  idx         integer NOT NULL,
  status      text NOT NULL CHECK (status IN ('succeeded', 'failed')),
  images      integer NOT NULL DEFAULT 0,
  object_keys jsonb NOT NULL DEFAULT '[]',
  error       text,
  PRIMARY KEY (batch_id, idx)
);

-- The money dedup rows: one per (batch, step). A second capture or release, or a capture
-- after a release, hits a unique index and changes nothing.
CREATE TABLE image_batch_money (
  batch_id   bigint NOT NULL REFERENCES image_batches(id),
  step       text NOT NULL CHECK (step IN ('hold', 'capture', 'release')),
  amount     bigint NOT NULL CHECK (amount >= 0),
  refunded   bigint NOT NULL DEFAULT 0 CHECK (refunded >= 0),
  at         timestamptz NOT NULL DEFAULT clock_timestamp(),
  PRIMARY KEY (batch_id, step)
);
CREATE UNIQUE INDEX image_batch_money_settled_once ON image_batch_money (batch_id) WHERE step IN ('capture', 'release');

-- The work queue: ready (due now), delayed (due at run_at), active (leased until locked_until
-- by locked_by under fence). A row exists exactly while its batch is not terminal.
CREATE TABLE image_batch_queue (
  batch_id     bigint PRIMARY KEY REFERENCES image_batches(id),
  status       text NOT NULL DEFAULT 'ready' CHECK (status IN ('ready', 'delayed', 'active')),
  run_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
  locked_by    text,
  locked_until timestamptz,
  fence        bigint NOT NULL DEFAULT 0,
  attempts     integer NOT NULL DEFAULT 0
);
CREATE INDEX image_batch_queue_ready ON image_batch_queue (run_at) WHERE status = 'ready';
CREATE INDEX image_batch_queue_delayed ON image_batch_queue (run_at) WHERE status = 'delayed';
CREATE INDEX image_batch_queue_active ON image_batch_queue (locked_until) WHERE status = 'active';
`;
