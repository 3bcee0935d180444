import type { Redis } from 'ioredis';
import { quotaCounterKey, quotaDirtyKey, type KeySpace } from './keys.js';
import { redisScripts, type QuotaScripts } from './redis-scripts.js';

/** `user` and `platform` as one dirty-set member (URI-encoded, so any id is safe). */
export function quotaMember(userId: string, platform: string): string {
  return `${encodeURIComponent(userId)}:${encodeURIComponent(platform)}`;
}

export function parseMember(member: string): { userId: string; platform: string } {
  const [u, p] = member.split(':');
  return { userId: decodeURIComponent(u!), platform: decodeURIComponent(p!) };
}

export interface CounterValue {
  member: string;
  used: number;
  epoch: number;
  /** False until the counter was seeded from PostgreSQL; such a value is not flushed. */
  seeded: boolean;
}

/**
 * Per-user, per-platform usage counters the hot path increments, with a dirty set the flusher
 * drains. Redis in cluster mode (atomic Lua), process memory in embedded mode: same contract.
 */
export interface QuotaCounters {
  /** Adds `amount`; `seeded` false means the caller must seed the counter from PostgreSQL. */
  increment(member: string, amount: number): Promise<{ used: number; seeded: boolean }>;
  seed(member: string, used: number, epoch: number): Promise<void>;
  reset(member: string, storedEpoch: number): Promise<number>;
  popDirty(count: number): Promise<string[]>;
  markDirty(members: string[]): Promise<void>;
  read(members: string[]): Promise<Array<CounterValue | null>>;
  dirtyCount(): Promise<number>;
}

export class RedisQuotaCounters implements QuotaCounters {
  private readonly s: QuotaScripts;
  private readonly dirty: string;

  constructor(
    private readonly redis: Redis,
    private readonly keys: KeySpace,
  ) {
    this.s = redisScripts(redis);
    this.dirty = quotaDirtyKey(keys);
  }

  async increment(member: string, amount: number) {
    const [used, seeded] = await this.s.quotaIncr(quotaCounterKey(this.keys, member), this.dirty, amount, member);
    return { used: Number(used), seeded: Number(seeded) === 1 };
  }

  async seed(member: string, used: number, epoch: number): Promise<void> {
    await this.s.quotaSeed(quotaCounterKey(this.keys, member), used, epoch);
  }

  async reset(member: string, storedEpoch: number): Promise<number> {
    return Number(await this.s.quotaReset(quotaCounterKey(this.keys, member), this.dirty, member, storedEpoch));
  }

  async popDirty(count: number): Promise<string[]> {
    return (await this.redis.spop(this.dirty, count)) ?? [];
  }

  async markDirty(members: string[]): Promise<void> {
    if (members.length) await this.redis.sadd(this.dirty, ...members);
  }

  async read(members: string[]): Promise<Array<CounterValue | null>> {
    const p = this.redis.pipeline();
    for (const m of members) p.hmget(quotaCounterKey(this.keys, m), 'used', 'epoch', 'seeded');
    const res = (await p.exec()) ?? [];
    return res.map(([err, v], i) => {
      if (err) throw err;
      const [used, epoch, seeded] = v as Array<string | null>;
      return used === null ? null : { member: members[i]!, used: Number(used), epoch: Number(epoch ?? 0), seeded: seeded !== null };
    });
  }

  async dirtyCount(): Promise<number> {
    return this.redis.scard(this.dirty);
  }
}

/** Embedded mode: the same contract in process memory (one process owns the data directory). */
export class MemoryQuotaCounters implements QuotaCounters {
  private readonly values = new Map<string, { used: number; epoch: number; seeded: boolean }>();
  private readonly dirty = new Set<string>();

  async increment(member: string, amount: number) {
    const v = this.values.get(member) ?? { used: 0, epoch: 0, seeded: false };
    v.used += amount;
    this.values.set(member, v);
    this.dirty.add(member);
    return { used: v.used, seeded: v.seeded };
  }

  async seed(member: string, used: number, epoch: number): Promise<void> {
    const v = this.values.get(member) ?? { used: 0, epoch: 0, seeded: false };
    if (v.seeded) return;
    v.used += used;
    v.epoch = epoch;
    v.seeded = true;
    this.values.set(member, v);
  }

  async reset(member: string, storedEpoch: number): Promise<number> {
    const v = this.values.get(member);
    const epoch = Math.max(v?.epoch ?? 0, storedEpoch) + 1;
    this.values.set(member, { used: 0, epoch, seeded: true });
    this.dirty.add(member);
    return epoch;
  }

  async popDirty(count: number): Promise<string[]> {
    const out: string[] = [];
    for (const m of this.dirty) {
      if (out.length >= count) break;
      out.push(m);
    }
    for (const m of out) this.dirty.delete(m);
    return out;
  }

  async markDirty(members: string[]): Promise<void> {
    for (const m of members) this.dirty.add(m);
  }

  async read(members: string[]): Promise<Array<CounterValue | null>> {
    return members.map((m) => {
      const v = this.values.get(m);
      return v ? { member: m, ...v } : null;
    });
  }

  async dirtyCount(): Promise<number> {
    return this.dirty.size;
  }
}
