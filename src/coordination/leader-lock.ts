import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Clock } from '../time/clock.js';
import type { Db, PinnedConnection } from '../store/db.js';
import { advisoryLockName, leaderKey, type KeySpace } from './keys.js';
import { redisScripts } from './redis-scripts.js';

export type LockBackend = 'redis' | 'postgres' | 'memory';

export interface LockHandle {
  readonly backend: LockBackend;
  /** Extends the lock; false when it is no longer ours. Throws when the backend cannot be reached. */
  renew(ttlMs: number): Promise<boolean>;
  /** Gives the lock up if still ours. Never throws: a lock we cannot release expires on its own. */
  release(): Promise<void>;
}

export type Acquisition = { acquired: true; handle: LockHandle } | { acquired: false; backend: LockBackend; holder: string | null };

/** The efficiency layer of invariant 1: saves replicas from racing for a slot. Correctness is the slot claim's job. */
export interface LeaderLock {
  acquire(job: string, ttlMs: number): Promise<Acquisition>;
}

function ownerValue(instanceId: string): string {
  return `${instanceId}:${randomBytes(8).toString('hex')}`;
}

/** Redis `SET key owner NX PX ttl`; compare-and-delete release, compare-and-extend renewal (Lua). */
export class RedisLeaderLock implements LeaderLock {
  private readonly scripts;

  constructor(private readonly redis: Redis, private readonly keys: KeySpace, private readonly instanceId: string) {
    this.scripts = redisScripts(redis);
  }

  async acquire(job: string, ttlMs: number): Promise<Acquisition> {
    const key = leaderKey(this.keys, job);
    const owner = ownerValue(this.instanceId);
    const ok = await this.redis.set(key, owner, 'PX', ttlMs, 'NX');
    if (ok !== 'OK') {
      const holder = await this.redis.get(key).catch(() => null);
      return { acquired: false, backend: 'redis', holder: holder?.replace(/:[0-9a-f]{16}$/, '') ?? null };
    }
    const scripts = this.scripts;
    return {
      acquired: true,
      handle: {
        backend: 'redis',
        renew: async (ttl) => (await scripts.compareAndExtend(key, owner, ttl)) === 1,
        release: async () => {
          await scripts.compareAndDelete(key, owner).catch(() => undefined);
        },
      },
    };
  }
}

/**
 * Session advisory lock on a pinned connection, held for the round. The lock lives exactly as
 * long as the connection, so "renewal" proves the connection is still alive.
 */
export class PgAdvisoryLock implements LeaderLock {
  constructor(private readonly db: Db, private readonly keys: KeySpace) {}

  async acquire(job: string, _ttlMs: number): Promise<Acquisition> {
    const name = advisoryLockName(this.keys, job);
    const conn: PinnedConnection = await this.db.pin();
    let ok: boolean;
    try {
      const { rows } = await conn.query<{ ok: boolean }>('SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS ok', [name]);
      ok = rows[0]!.ok === true;
    } catch (err) {
      conn.release(true);
      throw err;
    }
    if (!ok) {
      conn.release();
      return { acquired: false, backend: 'postgres', holder: null };
    }
    let released = false;
    return {
      acquired: true,
      handle: {
        backend: 'postgres',
        renew: async () => {
          await conn.query('SELECT 1');
          return true;
        },
        release: async () => {
          if (released) return;
          released = true;
          try {
            await conn.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [name]);
            conn.release();
          } catch {
            conn.release(true); // closing the session frees its advisory locks
          }
        },
      },
    };
  }
}

/**
 * Redis first; on a Redis *error* (not "held") the PostgreSQL advisory lock for this round.
 * Two replicas can then hold different backends at once (Sub2API's split brain): harmless
 * here, because the round still has to win the PostgreSQL slot claim and lease.
 */
export class FallbackLeaderLock implements LeaderLock {
  constructor(
    private readonly primary: LeaderLock,
    private readonly fallback: LeaderLock,
    private readonly onPrimaryError: (err: Error, job: string) => void,
  ) {}

  async acquire(job: string, ttlMs: number): Promise<Acquisition> {
    try {
      return await this.primary.acquire(job, ttlMs);
    } catch (err) {
      this.onPrimaryError(err as Error, job);
      return this.fallback.acquire(job, ttlMs);
    }
  }
}

/** In-process locks for embedded mode (one process owns the data directory). */
export class MemoryLeaderLock implements LeaderLock {
  private readonly held = new Map<string, { owner: string; until: number }>();

  constructor(private readonly clock: Clock, private readonly instanceId = 'embedded') {}

  async acquire(job: string, ttlMs: number): Promise<Acquisition> {
    const now = this.clock.now();
    const cur = this.held.get(job);
    if (cur && cur.until > now) return { acquired: false, backend: 'memory', holder: this.instanceId };
    const owner = ownerValue(this.instanceId);
    this.held.set(job, { owner, until: now + ttlMs });
    const mine = () => this.held.get(job)?.owner === owner && this.held.get(job)!.until > this.clock.now();
    return {
      acquired: true,
      handle: {
        backend: 'memory',
        renew: async (ttl) => {
          if (!mine()) return false;
          this.held.set(job, { owner, until: this.clock.now() + ttl });
          return true;
        },
        release: async () => {
          if (this.held.get(job)?.owner === owner) this.held.delete(job);
        },
      },
    };
  }
}
