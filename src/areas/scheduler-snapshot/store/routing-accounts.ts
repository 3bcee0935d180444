import type { Db } from '../../../store/db.js';
import { iso, num } from '../../../store/db.js';

/** One bucket of the snapshot: the accounts of a platform in a scheduling group ('' = no group). */
export interface BucketId {
  platform: string;
  group: string;
}

/** What the gateway needs to route to an account. Never a credential. */
export interface RoutingEntry {
  id: number;
  platform: string;
  group: string | null;
  priority: number;
  concurrency: number;
  proxy_id: number | null;
  status: string;
  temp_unschedulable_until: string | null;
  token_expires_at: string | null;
}

/** An account as the snapshot stores it: `entry` is null when it is not schedulable (a tombstone). */
export interface RoutingRow {
  id: number;
  version: number;
  bucket: BucketId;
  entry: RoutingEntry | null;
}

const COLUMNS = `id, platform, sched_group, priority, concurrency, proxy_id, scheduler_routing_status(status, status_before_refresh) AS rstatus,
  schedulable, temp_unschedulable_until, token_expires_at, sched_version`;

function toRow(r: Record<string, unknown>): RoutingRow {
  const status = String(r.rstatus);
  const group = (r.sched_group as string | null) ?? null;
  const bucket = { platform: String(r.platform), group: group ?? '' };
  const entry: RoutingEntry | null =
    r.schedulable && status === 'active'
      ? {
          id: num(r.id),
          platform: bucket.platform,
          group,
          priority: num(r.priority),
          concurrency: num(r.concurrency),
          proxy_id: r.proxy_id === null ? null : num(r.proxy_id),
          status,
          temp_unschedulable_until: iso(r.temp_unschedulable_until),
          token_expires_at: iso(r.token_expires_at),
        }
      : null;
  return { id: num(r.id), version: num(r.sched_version), bucket, entry };
}

/** The routing view of the accounts table: the truth the snapshot is built from and falls back to. */
export class RoutingAccounts {
  constructor(private readonly db: Db) {}

  /** Every account of one bucket, schedulable or not, by id. */
  async bucket(b: BucketId, signal?: AbortSignal): Promise<RoutingRow[]> {
    signal?.throwIfAborted();
    const { rows } = await this.db.query(`SELECT ${COLUMNS} FROM accounts WHERE platform = $1 AND COALESCE(sched_group, '') = $2 ORDER BY id`, [b.platform, b.group]);
    return rows.map(toRow);
  }

  async byIds(ids: number[]): Promise<RoutingRow[]> {
    if (!ids.length) return [];
    const { rows } = await this.db.query(`SELECT ${COLUMNS} FROM accounts WHERE id = ANY($1::bigint[])`, [ids]);
    return rows.map(toRow);
  }

  /** One chunk of a full scan in id order (keyset: no offset, no long snapshot held between chunks). */
  async scan(afterId: number, limit: number): Promise<RoutingRow[]> {
    const { rows } = await this.db.query(`SELECT ${COLUMNS} FROM accounts WHERE id > $1 ORDER BY id LIMIT $2`, [afterId, limit]);
    return rows.map(toRow);
  }

  async buckets(): Promise<BucketId[]> {
    const { rows } = await this.db.query(`SELECT DISTINCT platform, COALESCE(sched_group, '') AS g FROM accounts`);
    return rows.map((r) => ({ platform: String(r.platform), group: String(r.g) }));
  }

  /** A bucket's epoch high-water (`scheduler_bucket_epochs`); 0 for a bucket never recorded. */
  async epochOf(b: BucketId): Promise<number> {
    const { rows } = await this.db.query(`SELECT epoch FROM scheduler_bucket_epochs WHERE platform = $1 AND sched_group = $2`, [b.platform, b.group]);
    return rows[0] ? num(rows[0].epoch) : 0;
  }

  /** The high-water of each bucket, in the order given. */
  async epochsOf(bs: BucketId[]): Promise<number[]> {
    if (!bs.length) return [];
    const { rows } = await this.db.query(
      `SELECT b.i, COALESCE(e.epoch, 0) AS epoch FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS b(platform, grp, i)
       LEFT JOIN scheduler_bucket_epochs e ON e.platform = b.platform AND e.sched_group = b.grp ORDER BY b.i`,
      [bs.map((b) => b.platform), bs.map((b) => b.group)],
    );
    return rows.map((r) => num(r.epoch));
  }

  /**
   * Raises a bucket's high-water to at least `atLeast` (never lowers it) and returns it. Called
   * BEFORE a number can reach an answer: by writers before they write the bucket, by a PostgreSQL
   * answer before it returns. The row is updated only when it rises (no dead tuple per batch); a
   * raise committed after this statement's snapshot was concurrent with it, so returning the
   * value this statement saw keeps every answer at or above all answers completed before it.
   */
  async raiseEpoch(b: BucketId, atLeast: number): Promise<number> {
    const { rows } = await this.db.query(
      `WITH up AS (
         INSERT INTO scheduler_bucket_epochs AS e (platform, sched_group, epoch) VALUES ($1, $2, $3)
         ON CONFLICT (platform, sched_group) DO UPDATE SET epoch = EXCLUDED.epoch WHERE e.epoch < EXCLUDED.epoch
         RETURNING epoch)
       SELECT GREATEST((SELECT epoch FROM up), (SELECT epoch FROM scheduler_bucket_epochs WHERE platform = $1 AND sched_group = $2), $3::bigint) AS epoch`,
      [b.platform, b.group, atLeast],
    );
    return num(rows[0]!.epoch);
  }

  /** A version newer than any an account has had so far (tombstones of deleted accounts use it). */
  async nextVersion(): Promise<number> {
    return num((await this.db.query(`SELECT nextval('scheduler_snapshot_version') AS v`)).rows[0]!.v);
  }
}
