import { join } from 'node:path';
import { UsageStore } from './store/usage.js';
import { Rollups } from './store/rollups.js';
import { CleanupTasks } from './store/cleanup-tasks.js';
import { RecomputeTasks } from './store/recompute-tasks.js';
import { Recomputes } from './recomputes.js';
import { Idempotency } from './store/idempotency.js';
import { QuotaUsage } from './store/quota-usage.js';
import { DeadLetters } from '../../store/dead-letters.js';
import { MemoryQuotaCounters, RedisQuotaCounters } from '../../coordination/quota-counters.js';
import { UsageWriter } from './usage-writer.js';
import { UsageIngest } from './usage-ingest.js';
import { PlatformQuota } from './platform-quota.js';
import { QuotaFlushLoop } from './quota-flush-loop.js';
import { wired, type WiringContext } from '../../modules/wiring.js';

/** The usage area's services: the ingest path, the writer, the rollups, quotas and their shutdown flush. */
export function buildUsage(w: WiringContext) {
  const { config, db, redis, clock, log, metrics } = w;
  const u = config.usage;
  const usageStore = new UsageStore(db);
  const rollups = new Rollups(db, u.timezone);
  const deadLetters = new DeadLetters(db);
  const usageWriter = new UsageWriter(
    usageStore,
    { batchSize: u.batch_size, queueLimit: u.queue_limit, overflow: u.overflow, spillDir: join(config.database.data_dir, 'spill'), clock },
    metrics,
    log,
    deadLetters,
  );
  const counters = redis ? new RedisQuotaCounters(redis, { prefix: config.redis.key_prefix, env: config.instance.env }) : new MemoryQuotaCounters();
  const quota = new PlatformQuota(counters, new QuotaUsage(db), config.quota.flush_batch, metrics, log, deadLetters);
  // Started and stopped by the platform_quota_flusher job (onStart/onStop): the job off, nothing flushes but shutdown, as before.
  const delayMs = config.quota.flush_delay;
  const quotaFlush = new QuotaFlushLoop(quota, { clock, log: log.child({ area: 'quota' }), delayMs, backstopMs: w.wakes?.idleMs(delayMs) ?? delayMs, ticks: metrics.loopTicks });
  quota.onDirty = () => quotaFlush.dirtied();
  return wired({
    services: {
      usageStore,
      usageWriter,
      usage: new UsageIngest(usageWriter, clock, u.retention, u.max_events_per_request),
      rollups,
      cleanupTasks: new CleanupTasks(db),
      recomputes: new Recomputes(new RecomputeTasks(db), rollups, u.task_timeout),
      idempotency: new Idempotency(db, config.idempotency.ttl, config.idempotency.lock),
      quota,
      quotaFlush,
      deadLetters,
    },
    prepare: async () => {
      // Every day an event may be dated (the past window usage accepts and the days ahead): the
      // write path then never creates a partition while a console statement holds usage_logs.
      await usageStore.ensureAcceptedWindow(clock.now(), u.retention, u.partitions_ahead);
      const replayed = await usageWriter.replaySpills();
      if (replayed) log.info({ rows: replayed }, 'usage spilled by an earlier exit was written');
    },
    rungs: [
      // Invariant 4: every accepted usage event and quota increment is stored before the connections close.
      {
        name: 'usage writer',
        minMs: 2000,
        stop: async (by) => {
          const spilled = await usageWriter.stop(by);
          if (spilled) log.error({ spilled }, 'shutdown: usage events spilled to the data directory; written at the next start');
        },
      },
      {
        name: 'final quota flush',
        stop: async () => {
          const flushed = await quota.flushAll().catch((err) => {
            log.error({ err: (err as Error).message }, 'shutdown: final quota flush failed; the counters keep the values and stay dirty');
            return null;
          });
          if (flushed?.flushed) log.info({ flushed: flushed.flushed }, 'shutdown: quota counters flushed');
        },
      },
    ],
  });
}

/** What the usage area's jobs and routes use. */
export type UsageServices = ReturnType<typeof buildUsage>['services'];
