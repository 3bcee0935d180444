import type { RedisClient } from './redis-client.js';
import { Cluster } from 'ioredis';
import { CLUSTER_QUOTA_SHARDS, quotaCounterKey, quotaDirtyKey, quotaShard, type KeySpace } from './keys.js';
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
  private readonly shards: number;
  /** Where the next popDirty starts, so replicas do not all drain shard 0 first. */
  private cursor = 0;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: KeySpace,
  ) {
    this.s = redisScripts(redis);
    this.shards = redis instanceof Cluster ? CLUSTER_QUOTA_SHARDS : 1;
    this.cursor = Math.floor(Math.random() * this.shards);
  }

  private counter(member: string): string {
    return quotaCounterKey(this.keys, member, this.shards);
  }

  private dirtyOf(member: string): string {
    return quotaDirtyKey(this.keys, quotaShard(member, this.shards), this.shards);
  }

  async increment(member: string, amount: number) {
    const [used, seeded] = await this.s.quotaIncr(this.counter(member), this.dirtyOf(member), amount, member);
    return { used: Number(used), seeded: Number(seeded) === 1 };
  }

  async seed(member: string, used: number, epoch: number): Promise<void> {
    await this.s.quotaSeed(this.counter(member), used, epoch);
  }

  async reset(member: string, storedEpoch: number): Promise<number> {
    return Number(await this.s.quotaReset(this.counter(member), this.dirtyOf(member), member, storedEpoch));
  }

  async popDirty(count: number): Promise<string[]> {
    const out: string[] = [];
    for (let i = 0; i < this.shards && out.length < count; i++) {
      const shard = (this.cursor + i) % this.shards;
      out.push(...((await this.redis.spop(quotaDirtyKey(this.keys, shard, this.shards), count - out.length)) ?? []));
    }
    this.cursor = (this.cursor + 1) % this.shards;
    return out;
  }

  async markDirty(members: string[]): Promise<void> {
    for (const [shard, group] of this.byShard(members)) await this.redis.sadd(quotaDirtyKey(this.keys, shard, this.shards), ...group.map((g) => g.member));
  }

  async read(members: string[]): Promise<Array<CounterValue | null>> {
    const out = new Array<CounterValue | null>(members.length).fill(null);
    // One pipeline per shard: a Redis Cluster pipeline must stay within one slot.
    for (const group of this.byShard(members).values()) {
      const p = this.redis.pipeline();
      for (const { member } of group) p.hmget(this.counter(member), 'used', 'epoch', 'seeded');
      const res = (await p.exec()) ?? [];
      res.forEach(([err, v], i) => {
        if (err) throw err;
        const [used, epoch, seeded] = v as Array<string | null>;
        const { member, index } = group[i]!;
        out[index] = used === null ? null : { member, used: Number(used), epoch: Number(epoch ?? 0), seeded: seeded !== null };
      });
    }
    return out;
  }

  async dirtyCount(): Promise<number> {
    let n = 0;
    for (let shard = 0; shard < this.shards; shard++) n += await this.redis.scard(quotaDirtyKey(this.keys, shard, this.shards));
    return n;
  }

  private byShard(members: string[]): Map<number, Array<{ member: string; index: number }>> {
    const groups = new Map<number, Array<{ member: string; index: number }>>();
    members.forEach((member, index) => {
      const shard = quotaShard(member, this.shards);
      groups.set(shard, [...(groups.get(shard) ?? []), { member, index }]);
    });
    return groups;
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
