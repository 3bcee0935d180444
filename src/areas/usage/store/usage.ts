import type { Db, Queryable } from '../../../store/db.js';
import { num, toDate } from '../../../store/db.js';
import { delay } from '../../../time/wall.js';

/** Row shape accepted by `insert` (see jobs/usage/usage-event.ts for validation). */
export interface UsageRow {
  request_id: string;
  user_id: string;
  api_key_id: string | null;
  account_id: string | null;
  platform: string;
  model: string;
  input_tokens: number;
  output_tokens: number;
  cache_tokens: number;
  cost: string;
  latency_ms: number | null;
  status_code: number | null;
  created_at: string;
}

const DAY_MS = 86_400_000;
const COLUMNS = 'request_id, user_id, api_key_id, account_id, platform, model, input_tokens, output_tokens, cache_tokens, cost, latency_ms, status_code, created_at';

// One statement: claim each request id in the dedup index, insert only the rows whose id was new.
const INSERT = `
WITH input AS (
  SELECT DISTINCT ON (request_id) * FROM jsonb_to_recordset($1::jsonb) AS x(
    request_id text, user_id text, api_key_id text, account_id text, platform text, model text,
    input_tokens bigint, output_tokens bigint, cache_tokens bigint, cost numeric, latency_ms integer, status_code integer, created_at timestamptz)
), fresh AS (
  INSERT INTO usage_request_ids (request_id, created_at) SELECT request_id, created_at FROM input
  ON CONFLICT (request_id) DO NOTHING RETURNING request_id
)
INSERT INTO usage_logs (${COLUMNS}) SELECT ${COLUMNS.split(', ')
  .map((c) => `i.${c}`)
  .join(', ')} FROM input i JOIN fresh f USING (request_id)
RETURNING request_id`;

/** `usage_logs_p20261130` holds [2026-11-30 00:00 UTC, 2026-12-01 00:00 UTC). */
export function partitionName(dayStartMs: number): string {
  return `usage_logs_p${new Date(dayStartMs).toISOString().slice(0, 10).replace(/-/g, '')}`;
}

export function utcDayStart(ms: number): number {
  return Math.floor(ms / DAY_MS) * DAY_MS;
}

/** Rewrites the parent's own statistics target unchanged (SHARE UPDATE EXCLUSIVE, as ATTACH takes; null, the default, on PostgreSQL 17+): a second invalidation of its cached partitions. */
const REFRESH_PARTITIONS = `DO $$ BEGIN EXECUTE format('ALTER TABLE ONLY usage_logs ALTER COLUMN request_id SET STATISTICS %s',
  (SELECT coalesce(attstattarget, -1) FROM pg_attribute WHERE attrelid = 'usage_logs'::regclass AND attname = 'request_id')); END $$`;

/** How long one partition DDL statement may wait for a table lock before it gives up and retries. */
const DDL_LOCK_TIMEOUT_MS = 200;
/** Tries of a partition DDL transaction that met a lock held elsewhere (backoff 100 ms, doubling). */
const DDL_TRIES = 5;

/** PostgreSQL's `lock_not_available`: a `lock_timeout` fired. */
function isLockTimeout(err: unknown): boolean {
  return (err as { code?: unknown })?.code === '55P03';
}

/**
 * PostgreSQL's "no partition of relation usage_logs found for row": SQLSTATE 23514 on the parent
 * with no constraint named (a CHECK constraint's 23514 names its constraint).
 */
function isMissingPartition(err: unknown): boolean {
  const e = err as { code?: unknown; table?: unknown; constraint?: unknown };
  return e?.code === '23514' && e.table === 'usage_logs' && !e.constraint;
}

/**
 * The UTC days whose partitions usage must find ready: from the oldest day an event is accepted
 * for (`usage.retention` minus the hour `normalizeUsage` keeps clear of the sweep) to `ahead` days
 * after today (at least the one day ahead an event may be dated).
 */
export function acceptedDays(nowMs: number, retentionMs: number, ahead: number): number[] {
  const first = utcDayStart(nowMs - retentionMs + 3_600_000);
  const last = utcDayStart(nowMs) + Math.max(1, ahead) * DAY_MS;
  const days: number[] = [];
  for (let d = first; d <= last; d += DAY_MS) days.push(d);
  return days;
}

/**
 * Raw usage in PostgreSQL, partitioned by UTC day. Every partition the accepted window needs is
 * created ahead (at start and by the retention sweep; `ensureAcceptedWindow`), so the write path
 * finds them ready; one it does not know is created before the batch that needs it.
 *
 * Invariant (issue 51): partition DDL never makes usage writes wait on a reader. A console
 * statement holds ACCESS SHARE on `usage_logs` for up to `sql.statement_timeout`; `CREATE TABLE …
 * PARTITION OF` and `DROP TABLE <partition>` need ACCESS EXCLUSIVE on the parent, so they would
 * queue behind the reader and every insert would queue behind them. So a partition is created as
 * a plain table and attached (`ATTACH PARTITION` takes SHARE UPDATE EXCLUSIVE on the parent, which
 * neither readers nor inserts conflict with), and every DDL transaction runs under a short
 * `lock_timeout`, retried with backoff: whatever it waits on, it leaves the lock queue within
 * 200 ms. The advisory lock (taken before the timeout is set) keeps replicas from racing on DDL.
 */
export class UsageStore {
  private readonly knownDays = new Set<number>();

  constructor(readonly db: Db) {}

  /** Inserts a batch in one statement; returns how many rows were new (repeated request ids are skipped). */
  async insert(rows: UsageRow[]): Promise<number> {
    return (await this.insertNew(rows)).size;
  }

  /** Inserts the rows whose request id is new; returns those request ids (the others were duplicates). */
  async insertNew(rows: UsageRow[]): Promise<Set<string>> {
    if (!rows.length) return new Set();
    const days = new Set(rows.map((r) => utcDayStart(Date.parse(r.created_at))));
    const missing = [...days].filter((d) => !this.knownDays.has(d));
    if (missing.length) await this.ensurePartitions(missing);
    const payload = JSON.stringify(rows);
    const insert = async () => new Set((await this.db.query<{ request_id: string }>(INSERT, [payload])).rows.map((r) => r.request_id));
    try {
      return await insert();
    } catch (err) {
      if (!isMissingPartition(err)) throw err;
      // A day this replica knew has no partition in the statement's eyes: dropped since (another
      // replica, an operator), or the connection still holds a list of partitions from before an
      // attach another replica had not yet followed with its refresh (see ensurePartitions). Both
      // are the store's state, not the rows' fault: read the catalog again, create what is gone,
      // invalidate the cached lists, and try once more. A row still refused is the rows' (the
      // writer sets it aside in dead_letters).
      for (const d of days) this.knownDays.delete(d);
      await this.ensurePartitions([...days], { refresh: true });
      return insert();
    }
  }

  /**
   * Creates the partitions of the given UTC days that do not exist yet; returns the names created.
   * `refresh`: invalidate every connection's cached partition list even when none was created.
   */
  async ensurePartitions(dayStarts: number[], opts: { refresh?: boolean } = {}): Promise<string[]> {
    const created = await this.ddl(async (q) => {
      const names: string[] = [];
      const existing = new Set((await this.partitions(q)).map((p) => p.name));
      for (const day of new Set(dayStarts)) {
        const name = partitionName(day);
        if (existing.has(name)) continue;
        existing.add(name);
        const range = `FROM ('${new Date(day).toISOString()}') TO ('${new Date(day + DAY_MS).toISOString()}')`;
        await q.query(`CREATE TABLE ${name} (LIKE usage_logs INCLUDING DEFAULTS)`);
        await q.query(`ALTER TABLE usage_logs ATTACH PARTITION ${name} FOR VALUES ${range}`);
        names.push(name);
      }
      return names;
    });
    // A backend whose statement built its list of usage_logs' partitions while the ATTACH committed
    // can keep that list, without the new partition, across its later transactions (seen on
    // PostgreSQL 15: a pooled connection read a day's rows as missing and would refuse inserts for
    // that day, while a new connection saw them). A second invalidation, sent after the ATTACH has
    // committed, makes every such backend rebuild the list at its next statement
    // (test/usage-partition-locks.test.ts failed 6 times in 30 runs under load without it, 0 in 25 with it).
    if (created.length || opts.refresh) await this.ddl((q) => q.query(REFRESH_PARTITIONS));
    for (const d of dayStarts) this.knownDays.add(d);
    return created;
  }

  /**
   * The partitions of every day usage accepts at `nowMs` (see `acceptedDays`). In embedded mode
   * only today and the days ahead: there the console reads a copy of the data directory, so no
   * reader ever holds the live `usage_logs`, and the past window's 90-odd tables would cost PGlite
   * seconds at every fresh start (measured 2.2 s; 0.8 s on PostgreSQL, once per database).
   */
  async ensureAcceptedWindow(nowMs: number, retentionMs: number, ahead: number): Promise<string[]> {
    const days = acceptedDays(nowMs, retentionMs, ahead);
    return this.ensurePartitions(this.db.kind === 'postgres' ? days : days.filter((d) => d >= utcDayStart(nowMs)));
  }

  /**
   * One partition DDL transaction: the advisory lock, then `lock_timeout`, then `fn`; a lock
   * timeout rolls it back and it is tried again after a backoff (100 ms, doubling), up to
   * `DDL_TRIES` times, then the last error is thrown.
   */
  private async ddl<T>(fn: (q: Queryable) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.db.tx(async (q) => {
          await q.query(`SELECT pg_advisory_xact_lock(hashtext('relay-jobs:usage_partitions'))`);
          await q.query(`SET LOCAL lock_timeout = ${DDL_LOCK_TIMEOUT_MS}`);
          return fn(q);
        });
      } catch (err) {
        if (!isLockTimeout(err) || attempt >= DDL_TRIES) throw err;
        await delay(100 * 2 ** (attempt - 1));
      }
    }
  }

  async partitions(q: Queryable = this.db): Promise<Array<{ name: string; dayStart: number }>> {
    const { rows } = await q.query<{ name: string }>(
      `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'usage_logs' ORDER BY 1`,
    );
    return rows
      .map((r) => ({ name: r.name, m: /^usage_logs_p(\d{4})(\d{2})(\d{2})$/.exec(r.name) }))
      .filter((r) => r.m)
      .map((r) => ({ name: r.name, dayStart: Date.UTC(Number(r.m![1]), Number(r.m![2]) - 1, Number(r.m![3])) }));
  }

  /** Drops a whole day: instant, whatever its size. */
  async dropPartition(name: string, dayStart: number): Promise<number> {
    const n = num((await this.db.query(`SELECT count(*) AS n FROM ${name}`)).rows[0]!.n);
    // DROP needs ACCESS EXCLUSIVE on the parent: under the short lock_timeout it never holds up the
    // inserts queued behind it for long; after the last try the error reaches the sweep, whose next round drops it.
    await this.ddl((q) => q.query(`DROP TABLE IF EXISTS ${name}`));
    this.knownDays.delete(dayStart);
    return n;
  }

  /**
   * Deletes about `limit` of the oldest rows matching the filter, in one short transaction: the
   * batch is bounded by the created_at of the limit-th row, so it is an index range delete (ties
   * on that timestamp may add a few rows). Callers pass the previous batch's `latest` as `from`,
   * so each batch's index scan starts past the dead entries of the batches before it (without
   * that, a 10-million-row delete slows down quadratically until vacuum runs).
   */
  async deleteBatch(
    f: { before?: Date; from?: Date; to?: Date; userId?: string | null; accountId?: string | null },
    limit: number,
  ): Promise<{ deleted: number; earliest: Date | null; latest: Date | null }> {
    const where = `($1::timestamptz IS NULL OR created_at < $1) AND ($2::timestamptz IS NULL OR created_at >= $2) AND ($3::timestamptz IS NULL OR created_at < $3)
      AND ($4::text IS NULL OR user_id = $4) AND ($5::text IS NULL OR account_id = $5)`;
    const { rows } = await this.db.query<{ n: string; earliest: unknown; latest: unknown }>(
      `WITH edge AS (SELECT created_at FROM usage_logs WHERE ${where} ORDER BY created_at OFFSET $6 - 1 LIMIT 1),
       gone AS (DELETE FROM usage_logs WHERE ${where} AND created_at <= coalesce((SELECT created_at FROM edge), 'infinity') RETURNING created_at)
       SELECT count(*) AS n, min(created_at) AS earliest, max(created_at) AS latest FROM gone`,
      [f.before ?? null, f.from ?? null, f.to ?? null, f.userId ?? null, f.accountId ?? null, limit],
    );
    return { deleted: num(rows[0]!.n), earliest: toDate(rows[0]!.earliest), latest: toDate(rows[0]!.latest) };
  }

  /** Old entries of the request-id index (kept as long as the raw rows they guard). */
  async deleteRequestIds(before: Date, limit: number): Promise<number> {
    const { rowCount } = await this.db.query(`DELETE FROM usage_request_ids WHERE request_id IN (SELECT request_id FROM usage_request_ids WHERE created_at < $1 LIMIT $2)`, [before, limit]);
    return rowCount;
  }

  async oldest(): Promise<Date | null> {
    return toDate((await this.db.query(`SELECT min(created_at) AS t FROM usage_logs`)).rows[0]!.t);
  }

  /** Whether any raw row lies in [from, to) (from null = the beginning). */
  async any(from: Date | null, to: Date): Promise<boolean> {
    return (await this.db.query(`SELECT 1 FROM usage_logs WHERE ($1::timestamptz IS NULL OR created_at >= $1) AND created_at < $2 LIMIT 1`, [from, to])).rowCount > 0;
  }
}
