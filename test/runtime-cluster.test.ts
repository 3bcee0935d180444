import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { createLogger } from '../src/telemetry/logger.js';
import { systemClock, type Clock } from '../src/time/clock.js';
import { captureLogs } from './helpers/log-capture.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

describe('cluster runtime start-up checks (real PostgreSQL and Redis)', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  const prefix = uniqueName('rjrt');
  beforeAll(async () => {
    db = await freshDatabase();
  });
  afterAll(async () => {
    await dropRedisPrefix(prefix);
    await db.drop();
  });

  it('warns about the connection budget and clock skew, exports the skew, never logs the password', async () => {
    const url = new URL(db.url);
    url.password = 'not-a-real-secret';
    const config = loadConfig({
      env: {
        DATABASE_URL: url.toString(), // trust auth ignores the password; the logs must too
        REDIS_URL,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS_INSTANCE_ID: 'skewed',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
        RELAY_JOBS__DATABASE__POOL_SIZE: '10',
        RELAY_JOBS__CLUSTER__EXPECTED_REPLICAS: '50',
      },
    });
    const out = captureLogs();
    // This replica's clock runs 10 s fast.
    const fast: Clock = { ...systemClock, now: () => Date.now() + 10_000 };
    const rt = await Runtime.create(config, { clock: fast, logger: createLogger({ level: 'info', instanceId: 'skewed', env: 'test', destination: out.stream }) });
    try {
      const warnings = out.lines.filter((l) => l.level === 'warn').map((l) => String(l.msg));
      expect(warnings.some((m) => /database\.pool_size \(10\) × cluster\.expected_replicas \(50\) = 500 exceeds the server's \d+ usable connections/.test(m))).toBe(true);
      // The offset is measured over a query's round trip; on a loaded machine that can take a while,
      // so the figures are checked within 2 s of the 10 s set here, far from the 0 s of an unmeasured clock.
      const offsets = warnings.map((m) => /clock is (\d+)ms off the database clock/.exec(m)?.[1]).filter((v) => v !== undefined);
      expect(offsets.map(Number)).toEqual([expect.toSatisfy((ms: number) => ms > 8000 && ms < 12_000)]);
      const skew = await rt.metrics.registry.getSingleMetricAsString('relay_jobs_clock_skew_seconds');
      const value = Number(/^relay_jobs_clock_skew_seconds (\S+)$/m.exec(skew)![1]);
      expect(value).toBeGreaterThan(8);
      expect(value).toBeLessThan(12);
      // Slots are computed on the database clock despite the fast local clock (10 s off).
      expect(Math.abs(rt.scheduler.clusterNow() - Date.now())).toBeLessThan(2000);
      expect(JSON.stringify(out.lines)).not.toContain('not-a-real-secret');
    } finally {
      await rt.shutdown();
    }
  });
});
