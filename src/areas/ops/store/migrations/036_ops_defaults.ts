/**
 * Issue 50. `ops_default_rules`: one row per default alert rule the ops plane ever installed (its
 * key, and the rule it became). The row outlives the rule: a default the operator deleted is
 * never installed again, and replicas starting at once install one set (the key is the primary
 * key, written in the transaction that creates the rule).
 * `ops_counter_increments`: what each replica's own counters (usage dropped or spilled, quota
 * flush errors) rose by, written only when they rose; the collector sums them per bucket.
 */
export const sql = `
CREATE TABLE ops_default_rules (
  key          text PRIMARY KEY,
  rule_id      bigint,
  installed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE ops_counter_increments (
  id          bigserial PRIMARY KEY,
  at          timestamptz NOT NULL DEFAULT clock_timestamp(),
  instance_id text NOT NULL,
  name        text NOT NULL,
  n           bigint NOT NULL
);
CREATE INDEX ops_counter_increments_at ON ops_counter_increments (at);
`;
