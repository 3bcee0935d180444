/**
 * The scheduler snapshot's epoch high-water, one row per bucket, never lowered.
 *
 * A bucket's epoch is a number from `scheduler_snapshot_version` that only rises. This row is its
 * durable upper bound: whoever is about to let an answer carry a higher number (the outbox
 * consumer and the builders before they write Redis, a PostgreSQL answer before it returns)
 * raises the row first, and a (re)built bucket is served only at or above the row as read after
 * it was opened. So no answer, from Redis or from PostgreSQL, on any replica, is ever older than
 * one given before, even after Redis lost its data or a replica restarted.
 *
 * Seeded at the version counter's current value for every bucket accounts are in: snapshot
 * buckets written before this migration may carry epochs taken from the whole counter.
 */
export const sql = `
CREATE TABLE scheduler_bucket_epochs (
  platform    text NOT NULL,
  sched_group text NOT NULL,
  epoch       bigint NOT NULL,
  PRIMARY KEY (platform, sched_group)
);
INSERT INTO scheduler_bucket_epochs (platform, sched_group, epoch)
SELECT DISTINCT platform, COALESCE(sched_group, ''), (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM scheduler_snapshot_version)
FROM accounts;
`;
