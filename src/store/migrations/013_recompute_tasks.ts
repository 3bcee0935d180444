// Usage recomputes as claimable rows (they were an in-memory map on the replica that took the
// request): bounded, cancellable, resumable from `next_start` after a restart or a lost claim.
export const sql = `
CREATE TABLE usage_recompute_tasks (
  id            bigserial PRIMARY KEY,
  range_start   timestamptz NOT NULL,
  range_end     timestamptz NOT NULL,
  next_start    timestamptz NOT NULL,
  status        text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'done', 'cancelled', 'failed')),
  claimed_by    text,
  heartbeat_at  timestamptz,
  chunks        integer NOT NULL,
  chunks_done   integer NOT NULL DEFAULT 0,
  rows_rebuilt  bigint NOT NULL DEFAULT 0,
  error         text,
  created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  finished_at   timestamptz,
  CHECK (range_end > range_start)
);
CREATE INDEX usage_recompute_tasks_open ON usage_recompute_tasks (created_at) WHERE status IN ('pending', 'running');
`;
