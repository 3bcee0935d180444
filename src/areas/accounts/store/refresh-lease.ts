import { randomBytes } from 'node:crypto';
import type { RedisClient } from '../../../coordination/redis-client.js';
import type { Db } from '../../../store/db.js';
import type { KeySpace } from '../../../coordination/keys.js';
import { redisScripts, type LockScripts } from '../../../coordination/redis-scripts.js';
import { RenewalBatch } from '../../../coordination/renewal-batch.js';
import { holderDeadSql } from '../../../coordination/instance-registry.js';
import { leaseFreeSql as kernelLeaseFree } from '../../../store/liveness-sql.js';

/** The per-account refresh lock (`oauth:refresh_lock:{account}` in the issue), shared with the hot path. */
export function refreshLockKey(ks: KeySpace, accountId: number): string {
  return `${ks.prefix}:${ks.env}:oauth:refresh_lock:{${accountId}}`;
}

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

/**
 * SQL: the `account_refresh_leases` row may be taken by `EXCLUDED.owner`: free by the one lease
 * rule (the kernel's `leaseFreeSql`: expired, or its owner's liveness gone), or already ours (a
 * process re-enters its own lease).
 */
export const leaseFreeSql = (windowMs: string) =>
  `(${kernelLeaseFree('account_refresh_leases.expires_at', { owner: 'account_refresh_leases.owner', windowMs })} OR account_refresh_leases.owner = EXCLUDED.owner)`;

// $1 account, $2 owner, $3 lease ms, $4 liveness window ms
const ACQUIRE_SQL = `
INSERT INTO account_refresh_leases (account_id, owner, expires_at, updated_at)
VALUES ($1, $2, clock_timestamp() + $3 * interval '1 millisecond', clock_timestamp())
ON CONFLICT (account_id) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, updated_at = EXCLUDED.updated_at
WHERE ${leaseFreeSql('$4')}
RETURNING account_id`;
const HOLDER_DEAD_SQL = `SELECT ${holderDeadSql('$1::text', '$2')} AS dead`;
// Accounts left `refreshing` whose refresh nobody can still be running: no lease row, an expired
// one, or one whose holder is dead. $1 liveness window ms
const ORPHANS_SQL = `
SELECT a.id, a.token_version FROM accounts a LEFT JOIN account_refresh_leases l ON l.account_id = a.id
 WHERE a.status = 'refreshing' AND (l.account_id IS NULL OR ${kernelLeaseFree('l.expires_at', { owner: 'l.owner', windowMs: '$1' })})`;
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
 *
 * Takeover (issue 29): once the process is registered (`identify`), its owner is
 * `<instance id>:<boot id>`, the same value in Redis and PostgreSQL, so any replica can tell
 * whether the holder of a lock or lease is still alive by the one liveness test of the cluster
 * (`holderDeadSql`). A dead holder's PostgreSQL lease is free at once (in the acquiring
 * statement itself) and its Redis lock is taken over by compare-and-set on the dead value: the
 * key never disappears in between, so a gateway that only checks whether the Redis key exists
 * sees "a refresh is running" throughout and keeps waiting for the new token; a value that is
 * not a registered owner (a gateway's own lock) is never taken over, only waited out.
 */
export class RefreshLeases {
  private ownerId: string;
  private readonly scripts: LockScripts | null;
  private readonly renewals: RenewalBatch<number>;

  constructor(
    private readonly db: Db,
    private readonly redis: RedisClient | null,
    private readonly keys: KeySpace,
    private readonly instanceId: string,
    private readonly ttlMs: number,
    private readonly onRedisError: (err: Error) => void = () => undefined,
    /** The liveness window (three heartbeats): a holder without a liveness session is dead once its beat is this old. */
    private readonly livenessMs = 15_000,
    private readonly onTakeover: (accountId: number, from: string, held: 'redis') => void = () => undefined,
  ) {
    this.ownerId = `${instanceId}:${process.pid}:${randomBytes(6).toString('hex')}`;
    this.scripts = redis ? redisScripts(redis) : null;
    this.renewals = new RenewalBatch(async (ids) => {
      const { rows } = await this.db.query<{ account_id: unknown }>(RENEW_MANY_SQL, [ids, this.owner, this.ttlMs]);
      const renewed = new Set(rows.map((r) => Number(r.account_id)));
      return ids.map((id) => renewed.has(id));
    });
  }

  get owner(): string {
    return this.ownerId;
  }

  /** The liveness window the acquiring statements judge a holder by (`leaseFreeSql`'s parameter). */
  get windowMs(): number {
    return this.livenessMs;
  }

  /**
   * Called once the process is registered in `instances` (before any refresh): from now on its
   * leases name it by instance and boot id, so they are taken over the moment its liveness ends.
   */
  identify(bootId: string): void {
    this.ownerId = `${this.instanceId}:${bootId}`;
  }

  /** Accounts left `refreshing` that no live process is refreshing (their holder died, or the lease lapsed). */
  async orphans(): Promise<Array<{ id: number; version: number }>> {
    const { rows } = await this.db.query<{ id: unknown; token_version: unknown }>(ORPHANS_SQL, [this.livenessMs]);
    return rows.map((r) => ({ id: Number(r.id), version: Number(r.token_version) }));
  }

  async acquire(accountId: number): Promise<RefreshLeaseResult> {
    const r = await this.acquireWith(accountId, async () => ({ leased: (await this.db.query(ACQUIRE_SQL, [accountId, this.owner, this.ttlMs, this.livenessMs])).rowCount === 1, value: null }));
    return r.acquired ? { acquired: true, handle: r.handle } : { acquired: false, heldIn: r.heldIn };
  }

  /**
   * Redis first, then `takePg(owner, ttlMs, windowMs)`: a statement that takes the
   * `account_refresh_leases` row for `owner` when `leaseFreeSql(windowMs)` allows (and may read
   * and stamp the account in the same statement) and says whether it did. Its value comes back either way.
   */
  async acquireWith<T>(accountId: number, takePg: (owner: string, ttlMs: number, windowMs: number) => Promise<{ leased: boolean; value: T }>): Promise<RefreshLeaseWith<T>> {
    const key = refreshLockKey(this.keys, accountId);
    let redisHeld = false;
    if (this.redis) {
      try {
        const ok = await this.redis.set(key, this.owner, 'PX', this.ttlMs, 'NX');
        if (ok !== 'OK') {
          // Our own key (a previous attempt of this process that could not release): re-enter.
          const holder = await this.redis.get(key);
          if (holder !== null && holder !== this.owner) {
            // A dead holder's lock is replaced in one step (compare-and-set on the value we judged), never deleted first.
            if (!(await this.holderDead(holder)) || (await this.scripts!.compareAndSet(key, holder, this.owner, this.ttlMs)) !== 1) return { acquired: false, heldIn: 'redis', value: null };
            this.onTakeover(accountId, holder, 'redis');
          } else if (holder === null && (await this.redis.set(key, this.owner, 'PX', this.ttlMs, 'NX')) !== 'OK') return { acquired: false, heldIn: 'redis', value: null };
        }
        redisHeld = true;
      } catch (err) {
        this.onRedisError(err as Error);
      }
    }
    let pg: { leased: boolean; value: T };
    try {
      pg = await takePg(this.owner, this.ttlMs, this.livenessMs);
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

  /** True when `holder` is a registered owner whose liveness has ended (judged in PostgreSQL, database clock). */
  private async holderDead(holder: string): Promise<boolean> {
    const { rows } = await this.db.query<{ dead: boolean }>(HOLDER_DEAD_SQL, [holder, this.livenessMs]);
    return rows[0]?.dead === true;
  }

  private async releaseRedis(key: string): Promise<void> {
    await this.scripts!.compareAndDelete(key, this.owner).catch(() => undefined);
  }

  /** Shutdown: drop every lease this process still holds (a crash leaves them to expire). */
  async releaseAll(): Promise<void> {
    await this.db.query(`DELETE FROM account_refresh_leases WHERE owner = $1`, [this.owner]).catch(() => undefined);
  }
}
