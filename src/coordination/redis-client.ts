import { Redis } from 'ioredis';
import { UserError } from '../config/errors.js';
import { redactUrl, scrubUrlSecrets } from '../config/redact-url.js';

/**
 * A Redis client for coordination: commands fail fast while Redis is down (no offline queue,
 * one retry, a command timeout) so a lock attempt turns into the PostgreSQL fallback within
 * about `commandTimeoutMs` instead of hanging; the connection itself keeps retrying.
 */
export async function connectRedis(url: string, commandTimeoutMs: number, connectTimeoutMs: number): Promise<Redis> {
  const redis = new Redis(url, {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    commandTimeout: commandTimeoutMs,
    connectTimeout: connectTimeoutMs,
    retryStrategy: (times) => Math.min(100 * times, 1000),
  });
  // ioredis rejects connect() with "Connection is closed." and reports the real cause
  // (ECONNREFUSED, ENOTFOUND, an auth error) only as an 'error' event: keep the last one.
  let cause: Error | null = null;
  const onError = (err: Error) => (cause = err);
  redis.on('error', onError);
  try {
    await redis.connect();
    await redis.ping();
  } catch (err) {
    redis.disconnect();
    throw new UserError(`cannot connect to Redis at ${redactUrl(url)} (REDIS_URL): ${scrubUrlSecrets(describeRedisError(cause ?? (err as Error)), url)}`);
  } finally {
    redis.off('error', onError);
  }
  redis.on('error', () => undefined); // reported by readiness and lock metrics, not as crashes
  return redis;
}

/** One line naming the cause of a failed Redis connection, with the address where the system gave one. */
export function describeRedisError(err: Error): string {
  const e = err as NodeJS.ErrnoException & { address?: string; port?: number; hostname?: string; errors?: Error[] };
  if (!e.message && e.errors?.length) return e.errors.map(describeRedisError).join('; ');
  const at = e.address ? ` at ${e.address}${e.port ? `:${e.port}` : ''}` : '';
  if (e.code === 'ECONNREFUSED') return `connection refused${at} (ECONNREFUSED: is redis-server running and listening there?)`;
  if (e.code === 'ENOTFOUND') return `host not found (ENOTFOUND ${e.hostname ?? ''})`.replace(' )', ')');
  if (e.code === 'ETIMEDOUT') return `no answer${at} (ETIMEDOUT: is the host reachable and the port open?)`;
  if (/NOAUTH|WRONGPASS/.test(e.message)) return `${e.message.split('\n')[0]} (check the password in REDIS_URL)`;
  return `${e.message.split('\n')[0]}${e.code ? ` (${e.code})` : ''}`;
}
