import type { Db } from './db.js';
import { iso, num } from './db.js';

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

  /** The version counter now: every version assigned so far is at most this (an epoch floor). */
  async currentVersion(): Promise<number> {
    return num((await this.db.query(`SELECT last_value AS v FROM scheduler_snapshot_version`)).rows[0]!.v);
  }

  /** A version newer than any an account has had so far (tombstones of deleted accounts use it). */
  async nextVersion(): Promise<number> {
    return num((await this.db.query(`SELECT nextval('scheduler_snapshot_version') AS v`)).rows[0]!.v);
  }
}
