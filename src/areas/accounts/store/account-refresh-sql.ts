/**
 * The statements that make a refresh cost three commits (docs/token-refresh.md, "Statements per
 * refresh"): the begin (read + PostgreSQL refresh lease + `refreshing` stamp), the record of the
 * request just before it is sent (issue 29), and the wrapper that lets the ending account write
 * drop the lease and that record in the same statement.
 */
// $1 id, $2 lease owner, $3 lease ms, $4 expected version (or null), $5 allowed statuses, $6 recovery cut-off (or null),
// $7 liveness window ms (the parameter of `leaseFree`, coordination's test of a free lease: expired, ours, or its holder dead).
// One snapshot reads the account and decides; the lease upsert waits for a concurrent holder's row and
// re-checks it on the latest version; the stamp compares the version it read (a concurrent
// writer makes it match nothing: superseded). The request a dead sender left (refresh_sent_*) comes back as read.
const beginRefresh = (leaseFree: string) => `
WITH a AS (
  SELECT a.id, a.platform, a.status, a.token_version, a.token_expires_at, a.credentials_sealed, a.metadata, a.last_refresh_attempt_at, a.last_refresh_error, p.url_sealed,
         a.refresh_sent_at, a.refresh_sent_fp, a.refresh_sent_by, (extract(epoch FROM clock_timestamp() - a.refresh_sent_at) * 1000)::float8 AS sent_age_ms,
         CASE WHEN $4::bigint IS NOT NULL AND a.token_version <> $4::bigint THEN 'superseded'
              WHEN NOT (a.status = ANY($5::text[])) THEN 'not_eligible'
              WHEN NOT a.has_refresh_token THEN 'no_refresh_token'
              WHEN $6::timestamptz IS NOT NULL AND a.last_refresh_attempt_at > $6::timestamptz THEN 'recently_attempted'
         END AS skip
    FROM accounts a LEFT JOIN proxies p ON p.id = a.proxy_id WHERE a.id = $1
), lease AS (
  INSERT INTO account_refresh_leases (account_id, owner, expires_at, updated_at)
  SELECT id, $2, clock_timestamp() + $3 * interval '1 millisecond', clock_timestamp() FROM a WHERE skip IS NULL
  ON CONFLICT (account_id) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at
  WHERE ${leaseFree}
  RETURNING account_id
), mark AS (
  UPDATE accounts SET status_before_refresh = CASE WHEN status = 'refreshing' THEN COALESCE(status_before_refresh, 'active') ELSE status END,
         status = 'refreshing', last_refresh_attempt_at = clock_timestamp(), updated_at = clock_timestamp()
   WHERE id = $1 AND token_version = (SELECT token_version FROM a) AND status IN ('active', 'quota_exhausted', 'refreshing', 'expired', 'error')
     AND EXISTS (SELECT 1 FROM lease)
  RETURNING id
)
SELECT a.*, EXISTS (SELECT 1 FROM lease) AS leased, EXISTS (SELECT 1 FROM mark) AS marked FROM a`;

const beginCache = new Map<string, string>();
/** The begin statement with coordination's lease test (`leaseFreeSql('$7')`): built once per test text. */
export function beginRefreshSql(leaseFree: string): string {
  let sql = beginCache.get(leaseFree);
  if (!sql) beginCache.set(leaseFree, (sql = beginRefresh(leaseFree)));
  return sql;
}

/**
 * Just before the provider call: which refresh token is presented (fingerprint), when, by whom.
 * Compares the version (not sent: someone wrote meanwhile), and refuses a refresh token already
 * rejected as dead (issue 47: a dead token is never presented again). One statement, no extra
 * round trip. $1 id, $2 version, $3 fp, $4 owner
 */
export const MARK_SENT = `WITH dead AS (SELECT reason, rejected_at FROM dead_refresh_tokens WHERE fingerprint = $3),
sent AS (
  UPDATE accounts SET refresh_sent_at = clock_timestamp(), refresh_sent_fp = $3, refresh_sent_by = $4
   WHERE id = $1 AND token_version = $2 AND status = 'refreshing' AND NOT EXISTS (SELECT 1 FROM dead)
  RETURNING id
)
SELECT EXISTS (SELECT 1 FROM sent) AS sent, (SELECT reason FROM dead) AS dead_reason, (SELECT rejected_at FROM dead) AS dead_at`;

/** What every write that stores a provider's answer sets: the request is no longer in flight. */
export const CLEAR_SENT = `refresh_sent_at = NULL, refresh_sent_fp = NULL, refresh_sent_by = NULL`;

/**
 * Wraps an account write that ends a refresh so the same statement drops the refresh lease of
 * `owner` (parameter \$n): the last of a refresh's three committing statements. The write's
 * RETURNING row comes back as is (a row of nulls when the write matched nothing).
 */
export function withRelease(update: string, release: { owner: string } | undefined, n: number): string {
  if (!release) return update;
  return `WITH w AS (${update}), rel AS (DELETE FROM account_refresh_leases WHERE account_id = $1 AND owner = $${n})
SELECT w.* FROM (SELECT 1) one LEFT JOIN w ON true`;
}

/**
 * The refresh scheduler's read (`Accounts.candidates`): accounts changed at or after `$1` (all when
 * null), and the watermark for the next read. One statement even when nothing changed: the
 * database clock comes with an empty answer too (issue 26). The watermark (`db_now`) is held back
 * to the start of the oldest transaction still open on this database: a row is stamped
 * (`updated_at`) when written, not when committed, so a row of a long transaction (an import of
 * thousands of accounts on a loaded machine) committed after this read carries a stamp older than
 * the read; it is at or after its transaction's start, so the next read sees it
 * (test/refresh-sync-watermark.test.ts).
 */
export const REFRESH_CANDIDATES_SQL = `SELECT n.db_now, a.* FROM (SELECT least(clock_timestamp(),
        (SELECT min(xact_start) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid())) AS db_now) n LEFT JOIN LATERAL (
   SELECT id, platform, status, has_refresh_token, token_expires_at, token_version, refresh_failures, last_refresh_attempt_at, last_refresh_success_at, updated_at
     FROM accounts WHERE $1::timestamptz IS NULL OR updated_at >= $1) a ON true`;
