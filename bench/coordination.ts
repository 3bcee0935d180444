/**
 * Per-round coordination overhead on loopback Redis and PostgreSQL: a no-op cluster job run
 * through the real RoundRunner (Redis SET NX + PostgreSQL slot claim/lease/fencing/record +
 * completion + compare-and-delete), against a bare SET NX / DEL lock round in the same run.
 */
import { Redis } from 'ioredis';
import { PgDb } from '../src/store/pg-db.js';
import { migrate } from '../src/app/migrations.js';
import { RedisLeaderLock } from '../src/coordination/leader-lock.js';
import { RoundRunner } from '../src/scheduler/round-runner.js';
import type { JobDefinition } from '../src/scheduler/job.js';
import { Metrics } from '../src/telemetry/metrics.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { systemClock } from '../src/time/clock.js';
import { REDIS_URL, dropRedisPrefix, freshDatabase, uniqueName } from '../test/helpers/services.js';

export interface Stats {
  rounds: number;
  medianMs: number;
  p99Ms: number;
  redisCommandsPerRound: number;
  pgStatementsPerRound: number;
}

function summarize(samples: number[], redisCmds: number, pgStmts: number): Stats {
  const s = [...samples].sort((a, b) => a - b);
  return {
    rounds: s.length,
    medianMs: s[Math.floor(s.length / 2)]!,
    p99Ms: s[Math.floor(s.length * 0.99)]!,
    redisCommandsPerRound: redisCmds / s.length,
    pgStatementsPerRound: pgStmts / s.length,
  };
}

function countCommands(redis: Redis): { n: number } {
  const counter = { n: 0 };
  const original = redis.sendCommand.bind(redis);
  redis.sendCommand = ((...args: Parameters<Redis['sendCommand']>) => {
    counter.n++;
    return original(...args);
  }) as Redis['sendCommand'];
  return counter;
}

export async function benchCoordination(rounds = 2000): Promise<{ baseline: Stats; full: Stats }> {
  const fresh = await freshDatabase();
  const prefix = uniqueName('rjbench');
  const db = await PgDb.connect({ url: fresh.url, poolSize: 5, connectTimeoutMs: 5000 });
  await migrate(db);
  const redis = new Redis(REDIS_URL);
  const cmds = countCommands(redis);
  try {
    // Baseline: the bare Redis lock the reference systems use.
    const key = `${prefix}:baseline`;
    const base: number[] = [];
    for (let i = 0; i < 200; i++) await redis.set(key, 'x', 'PX', 5000, 'NX').then(() => redis.del(key)); // warm-up
    cmds.n = 0;
    for (let i = 0; i < rounds; i++) {
      const t = performance.now();
      await redis.set(key, 'owner', 'PX', 5000, 'NX');
      await redis.del(key);
      base.push(performance.now() - t);
    }
    const baseline = summarize(base, cmds.n, 0);

    // Full round through the runtime's own code path.
    const job: JobDefinition = {
      name: 'bench_noop',
      description: 'no-op',
      scope: 'cluster',
      settings: { enabled: true, schedule: { kind: 'every', everyMs: 1000 }, timeoutMs: 5000, lockTtlMs: 10_000, jitterMs: 0 },
      run: async () => ({ items: 0 }),
    };
    const runner = new RoundRunner({
      db,
      clock: systemClock,
      lock: new RedisLeaderLock(redis, { prefix, env: 'bench' }, 'bench'),
      log: silentLogger(),
      metrics: new Metrics(),
      instanceId: 'bench',
      toleratedFutureMs: 500,
      shutdown: new AbortController().signal,
    });
    await runner.slotClaims.ensureJobs([job.name]);
    const first = Math.floor(Date.now() / 1000) * 1000 - (rounds + 300) * 1000;
    for (let i = 0; i < 200; i++) await runner.run(job, new Date(first + i * 1000)); // warm-up
    const full: number[] = [];
    cmds.n = 0;
    const q0 = db.stats.queries;
    for (let i = 0; i < rounds; i++) {
      const t = performance.now();
      const r = await runner.run(job, new Date(first + (300 + i) * 1000));
      full.push(performance.now() - t);
      if (!r.ran) throw new Error(`bench round not run: ${r.reason}`);
    }
    return { baseline, full: summarize(full, cmds.n, db.stats.queries - q0) };
  } finally {
    redis.disconnect();
    await dropRedisPrefix(prefix);
    await db.close();
    await fresh.drop();
  }
}
