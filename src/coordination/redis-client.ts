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
  redis.on('error', () => undefined); // reported by readiness and lock metrics, not as crashes
  try {
    await redis.connect();
    await redis.ping();
  } catch (err) {
    redis.disconnect();
    const e = err as NodeJS.ErrnoException;
    const why = e.code === 'ECONNREFUSED' ? 'connection refused (is the server running and listening there?)' : e.message.split('\n')[0];
    throw new UserError(`cannot connect to Redis at ${redactUrl(url)} (REDIS_URL): ${scrubUrlSecrets(why, url)}`);
  }
  return redis;
}
