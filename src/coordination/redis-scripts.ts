import { readFileSync } from 'node:fs';
import type { RedisClient } from './redis-client.js';

/** Lua scripts, one per file; the number before `.lua` is the key count. */
function load(file: string): { lua: string; numberOfKeys: number } {
  const lua = readFileSync(new URL(`./scripts/${file}`, import.meta.url), 'utf8');
  const numberOfKeys = Number(/-(\d+)\.lua$/.exec(file)![1]);
  return { lua, numberOfKeys };
}

export interface LockScripts {
  compareAndDelete(key: string, owner: string): Promise<number>;
  compareAndExtend(key: string, owner: string, ttlMs: number): Promise<number>;
  compareAndSet(key: string, seen: string, owner: string, ttlMs: number): Promise<number>;
}

export interface QuotaScripts {
  quotaIncr(counterKey: string, dirtyKey: string, amount: number, member: string): Promise<[number, number]>;
  quotaSeed(counterKey: string, used: number, epoch: number): Promise<number>;
  quotaReset(counterKey: string, dirtyKey: string, member: string, storedEpoch: number): Promise<number>;
}

export interface SnapshotScripts {
  snapshotOpen(bucketKey: string, registryKey: string, gen: string, reset: '0' | '1', member: string, nowMs: number, floor: number): Promise<string>;
  snapshotApply(bucketKey: string, nowMs: number, ...fieldValues: string[]): Promise<number>;
  snapshotComplete(bucketKey: string, gen: string, nowMs: number, floor: number): Promise<number>;
  snapshotRaise(bucketKey: string, epoch: number): Promise<number>;
}

const scripts = {
  compareAndDelete: load('compare-and-delete-1.lua'),
  compareAndExtend: load('compare-and-extend-1.lua'),
  compareAndSet: load('compare-and-set-1.lua'),
  quotaIncr: load('quota-incr-2.lua'),
  quotaSeed: load('quota-seed-1.lua'),
  quotaReset: load('quota-reset-2.lua'),
  snapshotOpen: load('snapshot-open-2.lua'),
  snapshotApply: load('snapshot-apply-1.lua'),
  snapshotComplete: load('snapshot-complete-1.lua'),
  snapshotRaise: load('snapshot-raise-1.lua'),
};

/** Registers the scripts on a client (ioredis sends EVALSHA and falls back to EVAL after a Redis restart). */
export function redisScripts(redis: RedisClient): LockScripts & QuotaScripts & SnapshotScripts {
  for (const [name, def] of Object.entries(scripts)) {
    if (!(name in redis)) redis.defineCommand(name, def);
  }
  return redis as unknown as LockScripts & QuotaScripts & SnapshotScripts;
}
