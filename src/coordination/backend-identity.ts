import { createHash } from 'node:crypto';
import { Cluster } from 'ioredis';
import type { RedisClient } from './redis-client.js';
import type { Db } from '../store/db.js';

/** The Redis a replica talks to, as its `INFO` names it: a restart changes `run_id`, another server always does. */
export interface RedisIdentity {
  run_id: string;
  role: string;
  /** `standalone`, `sentinel` or `cluster` (INFO server `redis_mode`). */
  mode: string;
}

/** What a replica reports through its heartbeat so another can tell it shares (or does not share) the backends. */
export interface BackendIdentity {
  redis: RedisIdentity | null;
  /** `pg_control_system().system_identifier` (one per PostgreSQL cluster) and the database name; null where unreadable (PGlite). */
  database: { system_identifier: string | null; name: string } | null;
  pool_size: number | null;
  key_prefix: string | null;
}

const DB_IDENTITY = `SELECT current_database() AS name, (SELECT system_identifier::text FROM pg_control_system()) AS system_identifier`;
const DB_NAME = `SELECT current_database() AS name`;

/** `INFO` text as a map of its `key:value` lines. */
export function parseInfo(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split(/\r?\n/)) {
    const i = line.indexOf(':');
    if (i > 0 && !line.startsWith('#')) out[line.slice(0, i)] = line.slice(i + 1).trim();
  }
  return out;
}

/** The sections of `INFO` the doctor reads, in one round trip. */
export async function redisInfo(redis: RedisClient): Promise<Record<string, string>> {
  return parseInfo(await redis.info());
}

export async function readRedisIdentity(redis: RedisClient): Promise<RedisIdentity> {
  if (redis instanceof Cluster) {
    // INFO answers from whichever node the client picks; the set of primaries' node ids is the
    // cluster's identity (the same from every node, changed only by a reshard or failover).
    const nodes = String(await redis.cluster('NODES'));
    const primaries = nodes
      .split('\n')
      .filter((l) => /\bmaster\b/.test(l) && !/\bfail\b/.test(l))
      .map((l) => l.split(' ')[0]!)
      .sort();
    return { run_id: createHash('sha256').update(primaries.join(',')).digest('hex').slice(0, 40), role: 'cluster', mode: 'cluster' };
  }
  const info = parseInfo(await redis.info('server').then(async (s) => s + '\n' + (await redis.info('replication'))));
  return { run_id: info.run_id ?? '', role: info.role ?? '', mode: info.redis_mode ?? 'standalone' };
}

/** The database's identity; PGlite has no control file to read, so only its name. */
export async function readDbIdentity(db: Db): Promise<BackendIdentity['database']> {
  try {
    const { rows } = await db.query<{ name: string; system_identifier: string | null }>(DB_IDENTITY);
    return { name: rows[0]!.name, system_identifier: rows[0]!.system_identifier };
  } catch {
    const { rows } = await db.query<{ name: string }>(DB_NAME);
    return { name: rows[0]!.name, system_identifier: null };
  }
}

/** Both identities; a Redis that does not answer is reported as null (the doctor says so), never thrown. */
export async function readBackendIdentity(db: Db, redis: RedisClient | null, extra: { poolSize: number | null; keyPrefix: string | null }): Promise<BackendIdentity> {
  const r = redis ? await readRedisIdentity(redis).catch(() => null) : null;
  return { redis: r, database: await readDbIdentity(db), pool_size: extra.poolSize, key_prefix: extra.keyPrefix };
}
