import { randomBytes } from 'node:crypto';
import type { RedisClient } from './redis-client.js';
import type { Db } from '../store/db.js';
import { refreshLockKey, type KeySpace } from './keys.js';
import { redisScripts, type LockScripts } from './redis-scripts.js';
import { RenewalBatch } from './renewal-batch.js';

export interface RefreshLeaseHandle {
  /** Which locks were taken: Redis is skipped (and counted) while it is down. */
  readonly redis: boolean;
  /** Extends the PostgreSQL lease (authoritative) and the Redis lock; false when the lease is no longer ours. */
  renewLease(): Promise<boolean>;
  renewLock(): Promise<boolean>;
  release(): Promise<void>;
  /** The PostgreSQL row was already dropped by the statement that ended the refresh: release Redis only. */
  releaseRedis(): Promise<void>;
}

export type RefreshLeaseResult = { acquired: true; handle: RefreshLeaseHandle } | { acquired: false; heldIn: 'redis' | 'postgres' };

/** `acquireWith`: the PostgreSQL step is the caller's statement (which may do more under the same lease). */
export type RefreshLeaseWith<T> = ({ acquired: true; handle: RefreshLeaseHandle } | { acquired: false; heldIn: 'redis' | 'postgres' }) & { value: T | null };

const ACQUIRE_SQL = `
INSERT INTO account_refresh_leases (account_id, owner, expires_at, updated_at)
VALUES ($1, $2, clock_timestamp() + $3 * interval '1 millisecond', clock_timestamp())
ON CONFLICT (account_id) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at
WHERE account_refresh_leases.expires_at <= clock_timestamp() OR account_refresh_leases.owner = EXCLUDED.owner
RETURNING account_id`;
// Every refresh lease this process renews at one instant, in one statement (renewal-batch.ts).
const RENEW_MANY_SQL = `UPDATE account_refresh_leases SET expires_at = clock_timestamp() + $3 * interval '1 millisecond', updated_at = clock_timestamp()
 WHERE account_id = ANY($1::bigint[]) AND owner = $2 RETURNING account_id`;
const RELEASE_SQL = `DELETE FROM account_refresh_leases WHERE account_id = $1 AND owner = $2`;

/**
 * One refresh of one account at a time, cluster-wide, whoever asks (scheduler, hot path, 401,
 * admin). Two layers:
 * - Redis `SET NX PX` with this process's owner value, released by compare-and-delete: cheap,
 *   and what other gateways in the cluster already check;
 * - the seed's `account_refresh_leases` row in PostgreSQL, always taken after Redis: it keeps
 *   refreshes single while Redis is down, so there is no split brain between the two (Sub2API's
 *   fallback lock was independent of the primary and both could be held by different replicas).
 * The owner is one identity per process, so a process can re-enter its own lease after a crash
 * of the refresh code path but never two processes share one.
 */
export class RefreshLeases {
  readonly owner: string;
  private readonly scripts: LockScripts | null;
  private readonly renewals: RenewalBatch<number>;

  constructor(
    private readonly db: Db,
    private readonly redis: RedisClient | null,
    private readonly keys: KeySpace,
    instanceId: string,
    private readonly ttlMs: number,
    private readonly onRedisError: (err: Error) => void = () => undefined,
  ) {
    this.owner = `${instanceId}:${process.pid}:${randomBytes(6).toString('hex')}`;
    this.scripts = redis ? redisScripts(redis) : null;
    this.renewals = new RenewalBatch(async (ids) => {
      const { rows } = await this.db.query<{ account_id: unknown }>(RENEW_MANY_SQL, [ids, this.owner, this.ttlMs]);
      const renewed = new Set(rows.map((r) => Number(r.account_id)));
      return ids.map((id) => renewed.has(id));
    });
  }

  async acquire(accountId: number): Promise<RefreshLeaseResult> {
    const r = await this.acquireWith(accountId, async () => ({ leased: (await this.db.query(ACQUIRE_SQL, [accountId, this.owner, this.ttlMs])).rowCount === 1, value: null }));
    return r.acquired ? { acquired: true, handle: r.handle } : { acquired: false, heldIn: r.heldIn };
  }

  /**
   * Redis first, then `takePg(owner, ttlMs)`: a statement that takes the `account_refresh_leases`
   * row for `owner` (and may read and stamp the account in the same statement) and says whether
   * it did. Its value comes back either way.
   */
  async acquireWith<T>(accountId: number, takePg: (owner: string, ttlMs: number) => Promise<{ leased: boolean; value: T }>): Promise<RefreshLeaseWith<T>> {
    const key = refreshLockKey(this.keys, accountId);
    let redisHeld = false;
    if (this.redis) {
      try {
        const ok = await this.redis.set(key, this.owner, 'PX', this.ttlMs, 'NX');
        if (ok !== 'OK') {
          // Our own key (a previous attempt of this process that could not release): re-enter.
          const holder = await this.redis.get(key);
          if (holder !== this.owner) return { acquired: false, heldIn: 'redis', value: null };
        }
        redisHeld = true;
      } catch (err) {
        this.onRedisError(err as Error);
      }
    }
    let pg: { leased: boolean; value: T };
    try {
      pg = await takePg(this.owner, this.ttlMs);
    } catch (err) {
      if (redisHeld) await this.releaseRedis(key);
      throw err;
    }
    if (!pg.leased) {
      if (redisHeld) await this.releaseRedis(key);
      return { acquired: false, heldIn: 'postgres', value: pg.value };
    }
    return {
      acquired: true,
      value: pg.value,
      handle: {
        redis: redisHeld,
        renewLease: () => this.renewals.renew(accountId),
        renewLock: async () => (redisHeld && this.scripts ? (await this.scripts.compareAndExtend(key, this.owner, this.ttlMs)) === 1 : true),
        release: async () => {
          await this.db.query(RELEASE_SQL, [accountId, this.owner]).catch(() => undefined);
          if (redisHeld) await this.releaseRedis(key);
        },
        releaseRedis: async () => {
          if (redisHeld) await this.releaseRedis(key);
        },
      },
    };
  }

  private async releaseRedis(key: string): Promise<void> {
    await this.scripts!.compareAndDelete(key, this.owner).catch(() => undefined);
  }

  /** Shutdown: drop every lease this process still holds (a crash leaves them to expire). */
  async releaseAll(): Promise<void> {
    await this.db.query(`DELETE FROM account_refresh_leases WHERE owner = $1`, [this.owner]).catch(() => undefined);
  }
}
