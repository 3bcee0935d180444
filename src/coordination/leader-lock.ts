import { randomBytes } from 'node:crypto';
import type { RedisClient } from './redis-client.js';
import type { Clock } from '../time/clock.js';
import { leaderKey, type KeySpace } from './keys.js';
import { redisScripts } from './redis-scripts.js';

export type LockBackend = 'redis' | 'postgres' | 'memory';

export interface LockHandle {
  readonly backend: LockBackend;
  /** Extends the lock; false when it is no longer ours. Throws when the backend cannot be reached. */
  renew(ttlMs: number): Promise<boolean>;
  /** Gives the lock up if still ours. Never throws: a lock we cannot release expires on its own. */
  release(): Promise<void>;
}

export type Acquisition =
  | { acquired: true; handle: LockHandle }
  | {
      acquired: false;
      backend: LockBackend;
      holder: string | null;
      /** The slot (epoch ms) the holder took the lock for; null for a manual round or an unknown value. */
      heldForSlot: number | null;
      /**
       * Redis only: replaces the holder's value with ours if it is unchanged. Called only after the
       * PostgreSQL claim took the lease over from a dead holder, never to decide anything.
       */
      takeOver?: (ttlMs: number) => Promise<LockHandle>;
    };

/** The efficiency layer of invariant 1: saves replicas from racing for a slot. Correctness is the slot claim's job. */
export interface LeaderLock {
  /** `slotMs`: the slot the round is for (null: manual), written into the lock so a later slot can tell a stale holder. */
  acquire(job: string, ttlMs: number, slotMs?: number | null): Promise<Acquisition>;
}

/** `<instance>:<slot ms | m>:<nonce>`: who holds the lock, for which slot, and a nonce that makes it ours alone. */
function ownerValue(instanceId: string, slotMs: number | null = null): string {
  return `${instanceId}:${slotMs ?? 'm'}:${randomBytes(8).toString('hex')}`;
}

function parseOwner(v: string | null): { holder: string | null; slot: number | null } {
  if (!v) return { holder: null, slot: null };
  const m = /^(.*):(\d+|m):[0-9a-f]{16}$/.exec(v);
  if (!m) return { holder: v.replace(/:[0-9a-f]{16}$/, ''), slot: null };
  return { holder: m[1]!, slot: m[2] === 'm' ? null : Number(m[2]) };
}

/** Redis `SET key owner NX PX ttl`; compare-and-delete release, compare-and-extend renewal (Lua). */
export class RedisLeaderLock implements LeaderLock {
  private readonly scripts;
  private nxGet = true;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: KeySpace,
    private readonly instanceId: string,
  ) {
    this.scripts = redisScripts(redis);
  }

  async acquire(job: string, ttlMs: number, slotMs: number | null = null): Promise<Acquisition> {
    const key = leaderKey(this.keys, job);
    const owner = ownerValue(this.instanceId, slotMs);
    const seen = await this.setNx(key, owner, ttlMs);
    if (seen !== null) {
      const { holder, slot } = parseOwner(seen);
      return {
        acquired: false,
        backend: 'redis',
        holder,
        heldForSlot: slot,
        takeOver: async (ttl) => {
          const ok = (await this.scripts.compareAndSet(key, seen, owner, ttl).catch(() => 0)) === 1;
          return this.handle(key, owner, ok);
        },
      };
    }
    return { acquired: true, handle: this.handle(key, owner, true) };
  }

  /** Null when set; else the holder's value. SET NX GET (Redis ≥ 7) answers both in one round trip; older servers get SET NX, then GET. */
  private async setNx(key: string, owner: string, ttlMs: number): Promise<string | null> {
    if (this.nxGet) {
      try {
        return (await this.redis.call('SET', key, owner, 'PX', String(ttlMs), 'NX', 'GET')) as string | null;
      } catch (err) {
        if (!/syntax|wrong number/i.test((err as Error).message)) throw err;
        this.nxGet = false;
      }
    }
    if ((await this.redis.set(key, owner, 'PX', ttlMs, 'NX')) === 'OK') return null;
    return (await this.redis.get(key).catch(() => null)) ?? '';
  }

  private handle(key: string, owner: string, held: boolean): LockHandle {
    const scripts = this.scripts;
    return {
      backend: 'redis',
      renew: async (ttl) => held && (await scripts.compareAndExtend(key, owner, ttl)) === 1,
      release: async () => {
        if (held) await scripts.compareAndDelete(key, owner).catch(() => undefined);
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

  async acquire(job: string, ttlMs: number, slotMs: number | null = null): Promise<Acquisition> {
    try {
      return await this.primary.acquire(job, ttlMs, slotMs);
    } catch (err) {
      this.onPrimaryError(err as Error, job);
      return this.fallback.acquire(job, ttlMs, slotMs);
    }
  }
}

/** In-process locks for embedded mode (one process owns the data directory). */
export class MemoryLeaderLock implements LeaderLock {
  private readonly held = new Map<string, { owner: string; until: number }>();

  constructor(
    private readonly clock: Clock,
    private readonly instanceId = 'embedded',
  ) {}

  async acquire(job: string, ttlMs: number): Promise<Acquisition> {
    const now = this.clock.now();
    const cur = this.held.get(job);
    if (cur && cur.until > now) return { acquired: false, backend: 'memory', holder: this.instanceId, heldForSlot: null };
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
