import { join } from 'node:path';
import type { Redis } from 'ioredis';
import type { Config } from '../config/load.js';
import type { Db } from '../store/db.js';
import type { SecretBox } from '../store/secret-box.js';
import { Accounts } from '../store/accounts.js';
import { Proxies } from '../store/proxies.js';
import { UsageStore } from '../store/usage.js';
import { Rollups } from '../store/rollups.js';
import { CleanupTasks } from '../store/cleanup-tasks.js';
import { Idempotency } from '../store/idempotency.js';
import { QuotaUsage } from '../store/quota-usage.js';
import { RefreshLeases } from '../coordination/refresh-lease.js';
import { MemoryQuotaCounters, RedisQuotaCounters } from '../coordination/quota-counters.js';
import { OAuthClient } from '../upstream/oauth-client.js';
import { resolveProviders } from '../upstream/oauth-providers.js';
import { Refresher } from '../jobs/accounts/refresher.js';
import { TokenRefreshService } from '../jobs/accounts/token-refresh-service.js';
import { TokenApi } from '../jobs/accounts/token-api.js';
import { UsageWriter } from '../jobs/usage/usage-writer.js';
import { UsageIngest } from '../jobs/usage/usage-ingest.js';
import { PlatformQuota } from '../jobs/usage/platform-quota.js';
import type { Services } from '../jobs/services.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { Logger } from '../telemetry/logger.js';
import type { Clock, Random } from '../time/clock.js';
import type { Stoppable } from './shutdown-ladder.js';
import { buildBilling } from './billing-wiring.js';

/** What every area's wiring gets: the connections and the runtime's shared parts. */
export interface WiringContext {
  config: Config;
  db: Db;
  redis: Redis | null;
  box: SecretBox;
  clock: Clock;
  random: Random;
  log: Logger;
  metrics: Metrics;
}

/** An area's services, and the shutdown rungs that stop them (run after the jobs' own onStop hooks). */
export interface Wired<T> {
  services: T;
  rungs: Stoppable[];
  /** Runs once after connecting, before the scheduler starts (e.g. replaying what an earlier exit spilled). */
  prepare?: () => Promise<void>;
}

function buildAccounts(w: WiringContext): Wired<Pick<Services, 'accounts' | 'proxies' | 'tokenRefresh' | 'tokens' | 'providers'>> {
  const { config, db, redis, box, clock, random, log, metrics } = w;
  const a = config.auth;
  const keys = { prefix: config.redis.key_prefix, env: config.instance.env };
  const leases = new RefreshLeases(db, redis, keys, config.instance.id, a.refresh_lease_ttl, (err) => {
    metrics.refreshLockRedisErrors.inc();
    log.warn({ err: err.message }, 'redis error: refresh lock taken with the PostgreSQL lease alone');
  });
  const oauth = new OAuthClient();
  const accounts = new Accounts(db, box);
  const providers = resolveProviders(config).providers;
  const refresher = new Refresher({
    accounts,
    leases,
    oauth,
    providers,
    clock,
    log,
    metrics,
    concurrency: a.refresh_concurrency,
    requestTimeoutMs: a.refresh_request_timeout,
    leaseTtlMs: a.refresh_lease_ttl,
    recoveryDelayMs: a.refresh_recovery_delay,
  });
  const marginMs = a.refresh_margin_seconds * 1000;
  const tokenRefresh = new TokenRefreshService(
    accounts,
    refresher,
    { enabled: a.refresh_enabled, marginMs, maxAttempts: a.refresh_max_attempts, backoffBaseMs: a.refresh_backoff_base, backoffMaxMs: a.refresh_backoff_max, recoveryDelayMs: a.refresh_recovery_delay },
    clock,
    random,
    log,
    metrics,
  );
  const tokens = new TokenApi(accounts, tokenRefresh, clock, { marginMs, waitMs: a.hot_path_wait, cooldownMs: a.oauth_401_cooldown }, metrics, log);
  return {
    services: { accounts, proxies: new Proxies(db, box), tokenRefresh, tokens, providers },
    rungs: [
      { name: 'refresh leases', stop: () => leases.releaseAll() },
      { name: 'oauth client', stop: () => oauth.close() },
    ],
  };
}

function buildUsage(w: WiringContext): Wired<Pick<Services, 'usageStore' | 'usageWriter' | 'usage' | 'rollups' | 'cleanupTasks' | 'idempotency' | 'quota'>> {
  const { config, db, redis, clock, log, metrics } = w;
  const u = config.usage;
  const usageStore = new UsageStore(db);
  const usageWriter = new UsageWriter(usageStore, { batchSize: u.batch_size, queueLimit: u.queue_limit, overflow: u.overflow, spillDir: join(config.database.data_dir, 'spill') }, metrics, log);
  const counters = redis ? new RedisQuotaCounters(redis, { prefix: config.redis.key_prefix, env: config.instance.env }) : new MemoryQuotaCounters();
  const quota = new PlatformQuota(counters, new QuotaUsage(db), config.quota.flush_batch, metrics, log);
  return {
    services: {
      usageStore,
      usageWriter,
      usage: new UsageIngest(usageWriter, clock, u.retention, u.max_events_per_request),
      rollups: new Rollups(db, u.timezone),
      cleanupTasks: new CleanupTasks(db),
      idempotency: new Idempotency(db, config.idempotency.ttl, config.idempotency.lock),
      quota,
    },
    prepare: async () => {
      const day = 86_400_000;
      const today = Math.floor(clock.now() / day) * day;
      await usageStore.ensurePartitions(Array.from({ length: u.partitions_ahead + 1 }, (_, i) => today + i * day));
      const replayed = await usageWriter.replaySpills();
      if (replayed) log.info({ rows: replayed }, 'usage spilled by an earlier exit was written');
    },
    rungs: [
      // Invariant 4: every accepted usage event and quota increment is stored before the connections close.
      {
        name: 'usage writer',
        minMs: 2000,
        stop: async (withinMs) => {
          const spilled = await usageWriter.stop(withinMs);
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
  };
}

/** Every area's services and their shutdown rungs, in the order they stop. Adding an area is one line here. */
export function wireServices(w: WiringContext): Wired<Services> {
  const parts = [buildAccounts(w), buildUsage(w), buildBilling(w)];
  return {
    services: Object.assign({ metrics: w.metrics }, ...parts.map((p) => p.services)) as Services,
    rungs: parts.flatMap((p) => p.rungs),
    prepare: async () => {
      for (const p of parts) await p.prepare?.();
    },
  };
}
