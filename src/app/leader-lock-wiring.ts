import type { Config } from '../config/load.js';
import type { Logger } from '../telemetry/logger.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { Clock } from '../time/clock.js';
import type { Backends } from './backends.js';
import type { LivenessSession } from '../coordination/liveness.js';
import { FallbackLeaderLock, MemoryLeaderLock, RedisLeaderLock, type LeaderLock } from '../coordination/leader-lock.js';
import { PgAdvisoryLock } from '../coordination/advisory-lock.js';

/**
 * Which leader lock this process takes: Redis SET NX with the PostgreSQL advisory lock as its
 * fallback in cluster mode, in-process in embedded mode. `fallback` is the advisory lock (closed at
 * shutdown), null in embedded mode.
 */
export function buildLeaderLock(
  config: Config,
  backends: Pick<Backends, 'sessionDb' | 'redis'>,
  liveness: LivenessSession | null,
  metrics: Metrics,
  log: Logger,
  clock: Clock,
): { lock: LeaderLock; fallback: PgAdvisoryLock | null } {
  const { sessionDb, redis } = backends;
  if (!redis) return { lock: new MemoryLeaderLock(clock, config.instance.id), fallback: null };
  const keys = { prefix: config.redis.key_prefix, env: config.instance.env };
  const fallback = new PgAdvisoryLock(sessionDb, keys, liveness ?? undefined, config.instance.id);
  const lock = new FallbackLeaderLock(new RedisLeaderLock(redis, keys, config.instance.id), fallback, (err, job) => {
    metrics.dependencyUp.set({ dependency: 'redis' }, 0);
    metrics.lockFallback.inc({ job });
    log.warn({ job, err: err.message }, 'redis error: falling back to the PostgreSQL advisory lock for this round');
  });
  return { lock, fallback };
}
