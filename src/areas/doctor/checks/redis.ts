import { redisInfo } from '../../../coordination/backend-identity.js';
import { formatDuration } from '../../../config/duration.js';
import { combine, fail, ok, warn, type DoctorCheck } from '../check.js';

const FIX_POLICY = 'set maxmemory-policy noeviction in redis.conf (or a volatile-* policy with memory to spare): an evicted lock key lets a second replica run the same round';

/**
 * Redis fit for locks: with an `allkeys-*` policy Redis may evict a held lock (a double run) or a
 * quota counter; `noeviction` refuses writes instead. `volatile-*` evicts only keys with a TTL —
 * our locks have one — so it is fine only while memory stays under `maxmemory`.
 */
export const redisEviction: DoctorCheck = {
  name: 'redis_eviction',
  group: 'redis',
  modes: ['cluster'],
  async run({ redis }) {
    const info = await redisInfo(redis!);
    const policy = info.maxmemory_policy ?? 'unknown';
    const max = Number(info.maxmemory ?? 0);
    const used = Number(info.used_memory ?? 0);
    const measured = `maxmemory-policy ${policy}, maxmemory ${max ? `${Math.round(max / 1048576)}MiB` : 'unlimited'}, used ${Math.round(used / 1048576)}MiB`;
    if (policy === 'noeviction') return ok(measured, FIX_POLICY);
    if (policy.startsWith('allkeys-')) return fail(`${measured}: any key, a held lock included, may be evicted`, FIX_POLICY);
    if (policy.startsWith('volatile-')) {
      if (max && used > 0.8 * max) return warn(`${measured}: over 80% of maxmemory, lock keys (they carry TTLs) are eviction candidates`, FIX_POLICY);
      return ok(`${measured} (lock keys carry TTLs; counters without TTL are never evicted)`, FIX_POLICY);
    }
    return warn(`${measured}: unknown policy`, FIX_POLICY);
  },
};

/**
 * Persistence against what docs/usage.md promises for quota counters: with AOF a crash loses about
 * the last second of increments not yet flushed; without it, up to one flush interval.
 */
export const redisPersistence: DoctorCheck = {
  name: 'redis_persistence',
  group: 'redis',
  modes: ['cluster'],
  async run({ redis, config }) {
    const info = await redisInfo(redis!);
    const every = formatDuration(config.quota.flush_delay);
    const fix = 'turn on appendonly yes with appendfsync everysec in redis.conf for the durability window docs/usage.md states';
    if (info.aof_last_write_status && info.aof_last_write_status !== 'ok')
      return fail(`AOF writes failing (aof_last_write_status ${info.aof_last_write_status})`, 'fix the Redis disk (space, permissions) so AOF writes succeed');
    if (info.rdb_last_bgsave_status && info.rdb_last_bgsave_status !== 'ok')
      return warn(`RDB snapshots failing (rdb_last_bgsave_status ${info.rdb_last_bgsave_status})`, 'fix the Redis disk so snapshots succeed');
    if (info.aof_enabled === '1') return ok('AOF on: a Redis crash loses about the last second of quota increments not yet flushed (docs/usage.md)', fix);
    return warn(`AOF off: a Redis crash loses up to ${every} (quota.flush_delay) of quota increments (docs/usage.md)`, fix);
  },
};

/** Topology seen: standalone, Sentinel or Cluster, role, replicas. Quota counters need one node (or Sentinel), never Redis Cluster. */
export const redisTopology: DoctorCheck = {
  name: 'redis_topology',
  group: 'redis',
  modes: ['cluster'],
  async run({ redis, config }) {
    const info = await redisInfo(redis!);
    const mode = info.redis_mode ?? 'standalone';
    const role = info.role ?? '?';
    const replicas = Number(info.connected_slaves ?? 0);
    const viaSentinel = /^redis\+sentinel:/.test(config.redis.url ?? '');
    const measured = `${mode}, role ${role}, ${replicas} replica(s)${viaSentinel ? ', through Sentinel' : ''}, Redis ${info.redis_version ?? '?'}`;
    const fix = 'use a single Redis node, or Sentinel (REDIS_URL redis+sentinel://host:port,host:port/<master>), for the quota counters';
    return combine(
      [
        mode === 'cluster' ? fail(`${measured}: quota counters touch two keys that are not in one hash slot (CROSSSLOT)`, fix) : ok(measured, fix),
        role !== 'master' ? fail(`${measured}: writes are refused on a replica`, 'point REDIS_URL at the master, or at Sentinel so failovers are followed') : ok(measured, fix),
        replicas > 0 && !viaSentinel
          ? warn(`${measured}: replicas but no Sentinel, so a failover is not followed`, 'use REDIS_URL redis+sentinel://host:port,host:port/<master> to follow failovers')
          : ok(measured, fix),
      ],
      ok(measured, fix),
    );
  },
};
