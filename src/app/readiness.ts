import type { Db } from '../store/db.js';
import type { RedisClient } from '../coordination/redis-client.js';
import type { Metrics } from '../telemetry/metrics.js';
import { withTimeout } from '../time/clock.js';

/**
 * `GET /readyz`: the database (and Redis in cluster mode) answer within a second and shutdown has
 * not begun; the readiness and dependency gauges follow the answer.
 */
export async function readiness(o: { db: Db; redis: RedisClient | null; metrics: Metrics; shuttingDown: boolean }): Promise<{ ready: boolean; checks: Record<string, string> }> {
  const { db, redis, metrics } = o;
  const checks: Record<string, string> = {};
  checks.shutdown = o.shuttingDown ? 'shutting down' : 'ok';
  const probe = (ping: Promise<unknown>) =>
    withTimeout(ping, 1000).then(
      () => 'ok',
      (err: Error) => `unreachable: ${err.message}`,
    );
  checks.database = await probe(db.ping());
  if (redis) checks.redis = await probe(redis.ping());
  const ready = Object.values(checks).every((v) => v === 'ok');
  metrics.ready.set(ready ? 1 : 0);
  metrics.dependencyUp.set({ dependency: 'database' }, checks.database === 'ok' ? 1 : 0);
  if (redis) metrics.dependencyUp.set({ dependency: 'redis' }, checks.redis === 'ok' ? 1 : 0);
  return { ready, checks };
}
