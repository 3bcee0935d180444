import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Config } from '../config/load.js';
import { formatDuration } from '../config/duration.js';
import type { Db } from '../store/db.js';
import { PgDb } from '../store/pg-db.js';
import { PgliteDb } from '../store/pglite-db.js';
import { DataDirLock } from '../store/data-dir-lock.js';
import { migrate } from '../store/migrate.js';
import { AdminSessions } from '../store/admin-sessions.js';
import { connectRedis } from '../coordination/redis-client.js';
import { FallbackLeaderLock, MemoryLeaderLock, PgAdvisoryLock, RedisLeaderLock, type LeaderLock } from '../coordination/leader-lock.js';
import { Scheduler } from '../scheduler/scheduler.js';
import { RoundRunner, type RoundReport } from '../scheduler/round-runner.js';
import { RunRecords, type RunRecord } from '../scheduler/run-records.js';
import { InstanceRegistry, type InstanceInfo } from '../scheduler/instance-registry.js';
import { judgeHealth, type HealthVerdict } from '../scheduler/health.js';
import { WorkerPool, type WorkerPoolOptions } from '../workers/worker-pool.js';
import { buildJobs, type AnyJobModule } from '../jobs/registry.js';
import type { BuiltJob } from '../jobs/define-job.js';
import { Metrics } from '../telemetry/metrics.js';
import { createLogger, type Logger } from '../telemetry/logger.js';
import { systemClock, type Clock, type Random } from '../time/clock.js';
import { VERSION } from '../version.js';
import { UserError } from '../config/errors.js';
import { SecretBox } from '../store/secret-box.js';
import { Accounts } from '../store/accounts.js';
import { Proxies } from '../store/proxies.js';
import { RefreshLeases } from '../coordination/refresh-lease.js';
import { OAuthClient } from '../upstream/oauth-client.js';
import { resolveProviders } from '../upstream/oauth-providers.js';
import { Refresher } from '../jobs/accounts/refresher.js';
import { TokenRefreshService } from '../jobs/accounts/token-refresh-service.js';
import { TokenApi } from '../jobs/accounts/token-api.js';
import type { Services } from '../jobs/services.js';
import { UsageStore } from '../store/usage.js';
import { Rollups } from '../store/rollups.js';
import { CleanupTasks } from '../store/cleanup-tasks.js';
import { Idempotency } from '../store/idempotency.js';
import { QuotaUsage } from '../store/quota-usage.js';
import { UsageWriter } from '../jobs/usage/usage-writer.js';
import { UsageIngest } from '../jobs/usage/usage-ingest.js';
import { PlatformQuota } from '../jobs/usage/platform-quota.js';
import { MemoryQuotaCounters, RedisQuotaCounters } from '../coordination/quota-counters.js';
import { Billing } from '../store/billing.js';
import { Notifications } from '../store/notifications.js';
import { Notifier } from '../jobs/billing/notifier.js';
import { Payments } from '../jobs/billing/payments.js';
import { SmtpChannel, WebhookChannel, type Channel } from '../upstream/notifier.js';
import { GenericJsonProvider, type PaymentProvider } from '../upstream/payment-provider.js';

export interface RuntimeOptions {
  clock?: Clock;
  random?: Random;
  logger?: Logger;
  /** False for one-shot CLI commands: no row in `instances`, no heartbeat. */
  register?: boolean;
  /** A library user's own jobs, declared with `defineJob`, run beside the built-in ones. */
  jobs?: readonly AnyJobModule[];
}

/** What takes requests in: closed right after readiness goes false, before pools drain. */
export interface Ingress {
  close(): Promise<void>;
}

export interface JobView {
  name: string;
  description: string;
  scope: string;
  enabled: boolean;
  schedule: { every?: string; cron?: string; timezone?: string };
  timeout: string;
  lock_ttl: string;
  jitter: string;
  health: HealthVerdict['health'];
  health_reason: string;
  expected_by: string | null;
  next_attempt: string | null;
  last_slot: string | null;
  lease_holder: string | null;
  last_run: RunRecord | null;
  last_success_at: string | null;
}

const HEALTH_STATES = ['healthy', 'idle', 'late', 'stuck', 'failing', 'disabled'] as const;
const PRUNE_EVERY_MS = 3_600_000;

/**
 * The composition root. `create` connects and migrates (every failure a one-line UserError);
 * `start` begins scheduling and heartbeats; `shutdown` runs the ladder of invariant 4:
 * not ready → rounds aborted with a grace period → worker pools drained → instance marked
 * stopped → Redis and PostgreSQL closed → data directory unlocked.
 */
export class Runtime {
  readonly metrics = new Metrics({ defaultMetrics: true });
  readonly scheduler: Scheduler;
  readonly sessions: AdminSessions;
  readonly registry: InstanceRegistry;
  readonly records: RunRecords;
  readonly services: Services;
  private readonly leases: RefreshLeases;
  private readonly oauth = new OAuthClient();
  private readonly runner: RoundRunner;
  private readonly pools: WorkerPool<unknown>[] = [];
  private readonly shutdownController = new AbortController();
  private offsetMs = 0;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private lastPrune = 0;
  private shuttingDown: Promise<void> | null = null;
  private ingress: Ingress | null = null;
  readonly startedAt = new Date();
  adminToken: string | undefined;

  private constructor(
    readonly config: Config,
    readonly db: Db,
    readonly redis: Redis | null,
    private readonly dataDirLock: DataDirLock | null,
    readonly log: Logger,
    readonly clock: Clock,
    random: Random,
    readonly jobs: BuiltJob[],
    box: SecretBox,
    bindServices: (s: Services) => void,
  ) {
    const instanceId = config.instance.id;
    const keys = { prefix: config.redis.key_prefix, env: config.instance.env };
    let lock: LeaderLock;
    if (redis) {
      lock = new FallbackLeaderLock(new RedisLeaderLock(redis, keys, instanceId), new PgAdvisoryLock(db, keys), (err, job) => {
        this.metrics.dependencyUp.set({ dependency: 'redis' }, 0);
        this.metrics.lockFallback.inc({ job });
        log.warn({ job, err: err.message }, 'redis error: falling back to the PostgreSQL advisory lock for this round');
      });
    } else {
      lock = new MemoryLeaderLock(clock, instanceId);
    }
    const runner = (this.runner = new RoundRunner({ db, clock, lock, log, metrics: this.metrics, instanceId, toleratedFutureMs: 500, shutdown: this.shutdownController.signal }));
    this.records = new RunRecords(db);
    this.scheduler = new Scheduler({
      jobs,
      runner,
      clock,
      random,
      log,
      clockOffsetMs: () => this.offsetMs,
      lastSlot: (job) => runner.slotClaims.lastSlot(job),
    });
    this.sessions = new AdminSessions(db);
    this.leases = new RefreshLeases(db, redis, keys, instanceId, config.auth.refresh_lease_ttl, (err) => {
      this.metrics.refreshLockRedisErrors.inc();
      log.warn({ err: err.message }, 'redis error: refresh lock taken with the PostgreSQL lease alone');
    });
    this.services = this.buildServices(box, random);
    bindServices(this.services);
    this.registry = new InstanceRegistry(db, clock, {
      instanceId,
      env: config.instance.env,
      mode: config.mode,
      httpPort: config.http.port,
      version: VERSION,
      heartbeatMs: config.cluster.instance_heartbeat,
    });
  }

  private buildServices(box: SecretBox, random: Random): Services {
    const { config, db, clock, log, metrics } = this;
    const a = config.auth;
    const accounts = new Accounts(db, box);
    const proxies = new Proxies(db, box);
    const providers = resolveProviders(config).providers;
    const refresher = new Refresher({
      accounts,
      leases: this.leases,
      oauth: this.oauth,
      providers,
      clock,
      log,
      metrics,
      concurrency: a.refresh_concurrency,
      requestTimeoutMs: a.refresh_request_timeout,
      leaseTtlMs: a.refresh_lease_ttl,
      recoveryDelayMs: a.refresh_recovery_delay,
    });
    const tokenRefresh = new TokenRefreshService(
      accounts,
      refresher,
      { enabled: a.refresh_enabled, marginMs: a.refresh_margin_seconds * 1000, maxAttempts: a.refresh_max_attempts, backoffBaseMs: a.refresh_backoff_base, backoffMaxMs: a.refresh_backoff_max, recoveryDelayMs: a.refresh_recovery_delay },
      clock,
      random,
      log,
      metrics,
    );
    const tokens = new TokenApi(accounts, tokenRefresh, clock, { marginMs: a.refresh_margin_seconds * 1000, waitMs: a.hot_path_wait, cooldownMs: a.oauth_401_cooldown }, metrics, log);
    const u = config.usage;
    const usageStore = new UsageStore(db);
    const usageWriter = new UsageWriter(usageStore, { batchSize: u.batch_size, queueLimit: u.queue_limit, overflow: u.overflow, spillDir: join(config.database.data_dir, 'spill') }, metrics, log);
    const counters = this.redis ? new RedisQuotaCounters(this.redis, { prefix: config.redis.key_prefix, env: config.instance.env }) : new MemoryQuotaCounters();
    return {
      accounts,
      proxies,
      tokenRefresh,
      tokens,
      metrics,
      providers,
      usageStore,
      usageWriter,
      usage: new UsageIngest(usageWriter, clock, u.retention, u.max_events_per_request),
      rollups: new Rollups(db, u.timezone),
      cleanupTasks: new CleanupTasks(db),
      idempotency: new Idempotency(db, config.idempotency.ttl, config.idempotency.lock),
      quota: new PlatformQuota(counters, new QuotaUsage(db), config.quota.flush_batch, metrics, log),
      ...this.buildBilling(),
    };
  }

  private buildBilling(): Pick<Services, 'billing' | 'notifications' | 'notifier' | 'payments'> {
    const { config, db, clock, log, metrics } = this;
    const n = config.notify;
    const channels = new Map<string, Channel>();
    if (n.smtp) channels.set('email', new SmtpChannel(n.smtp, n.send_timeout));
    if (n.webhook) channels.set('webhook', new WebhookChannel(n.webhook, n.send_timeout));
    const notifications = new Notifications(db);
    const notifier = new Notifier(notifications, channels, { perSecond: n.per_second, maxAttempts: n.max_attempts, retryBaseMs: n.retry_base, batch: n.batch, sendTimeoutMs: n.send_timeout }, clock, metrics, log);
    const providers = new Map<string, PaymentProvider>(
      Object.entries(config.payments.providers).map(([name, c]) => [name, new GenericJsonProvider(name, c, config.payments.request_timeout, config.payments.webhook_tolerance)]),
    );
    const billing = new Billing(db);
    return { billing, notifications, notifier, payments: new Payments(billing, providers, clock, metrics, log) };
  }

  static async create(config: Config, opts: RuntimeOptions = {}): Promise<Runtime> {
    const clock = opts.clock ?? systemClock;
    const log = opts.logger ?? createLogger({ level: config.logging.level, format: config.logging.format, instanceId: config.instance.id, env: config.instance.env });
    for (const w of config.warnings ?? []) log.warn(`config: ${w}`);
    // Jobs are built (their config checked) before any connection; their services are bound once connected.
    let bound: Services | null = null;
    const jobs = buildJobs(
      config,
      () => {
        if (!bound) throw new Error('job services used before the runtime bound them');
        return bound;
      },
      opts.jobs,
    );
    if (config.mode === 'cluster' && !config.security.master_key) {
      throw new UserError('RELAY_JOBS_MASTER_KEY is not set: cluster mode encrypts account credentials with it; give every replica the same 32 random bytes in base64 (e.g. `openssl rand -base64 32`)');
    }
    let db: Db | null = null;
    let redis: Redis | null = null;
    let dirLock: DataDirLock | null = null;
    try {
      if (config.mode === 'cluster') {
        log.info('connecting to PostgreSQL (DATABASE_URL) and Redis (REDIS_URL)');
        db = await PgDb.connect({ url: config.database.url!, poolSize: config.database.pool_size, connectTimeoutMs: config.database.connect_timeout, onError: (err) => log.warn({ err: err.message }, 'idle PostgreSQL connection failed') });
        redis = await connectRedis(config.redis.url!, config.redis.command_timeout, config.database.connect_timeout);
      } else {
        dirLock = DataDirLock.acquire(config.database.data_dir, { httpPort: config.http.port });
        log.info({ data_dir: config.database.data_dir }, 'opening the embedded database (PGlite; the first start takes several seconds)');
        db = await PgliteDb.open(config.database.data_dir);
      }
      if (config.database.auto_migrate) {
        const applied = await migrate(db, undefined, (m) => log.info({ migration: `${m.version}_${m.name}` }, 'applying migration'));
        if (applied.length) log.info({ migrations: applied.map((m) => `${m.version}_${m.name}`) }, 'migrations applied');
      }
      const box = config.security.master_key ? SecretBox.fromBase64(config.security.master_key) : SecretBox.forDataDir(config.database.data_dir);
      await checkMasterKey(db, box);
      const rt = new Runtime(config, db, redis, dirLock, log, clock, opts.random ?? Math.random, jobs, box, (s) => (bound = s));
      rt.adminToken = config.http.admin_token ?? (config.mode === 'embedded' ? embeddedAdminToken(config.database.data_dir, log) : undefined);
      if (!rt.adminToken) log.warn('RELAY_JOBS_ADMIN_TOKEN is not set: the /api/v1 admin API answers 401 until it is');
      await rt.runtimeChecks();
      await rt.runner.slotClaims.ensureJobs(jobs.map((j) => j.name));
      await rt.prepareUsage();
      if (opts.register !== false) await rt.registry.register();
      return rt;
    } catch (err) {
      redis?.disconnect();
      await db?.close().catch(() => undefined);
      dirLock?.release();
      throw err;
    }
  }

  /** Partitions for today and the days ahead, and any usage spilled by an earlier exit. */
  private async prepareUsage(): Promise<void> {
    const day = 86_400_000;
    const today = Math.floor(this.clock.now() / day) * day;
    await this.services.usageStore.ensurePartitions(Array.from({ length: this.config.usage.partitions_ahead + 1 }, (_, i) => today + i * day));
    const replayed = await this.services.usageWriter.replaySpills();
    if (replayed) this.log.info({ rows: replayed }, 'usage spilled by an earlier exit was written');
  }

  /** The seed's multi-instance checks that need the servers: connection budget and clock skew. */
  private async runtimeChecks(): Promise<void> {
    await this.measureSkew(true);
    if (this.config.mode !== 'cluster') return;
    const { rows } = await this.db.query<{ max_connections: string; reserved: string }>(
      `SELECT current_setting('max_connections') AS max_connections, current_setting('superuser_reserved_connections') AS reserved`,
    );
    const budget = Number(rows[0]!.max_connections) - Number(rows[0]!.reserved);
    const need = this.config.database.pool_size * this.config.cluster.expected_replicas;
    if (need > budget) {
      this.log.warn(
        { pool_size: this.config.database.pool_size, expected_replicas: this.config.cluster.expected_replicas, max_connections: budget },
        `database.pool_size (${this.config.database.pool_size}) × cluster.expected_replicas (${this.config.cluster.expected_replicas}) = ${need} exceeds the server's ${budget} usable connections; lower the pool size or raise max_connections`,
      );
    }
  }

  private async measureSkew(atStart = false): Promise<void> {
    const skew = await this.registry.measureSkew();
    this.offsetMs = -skew;
    this.metrics.clockSkew.set(skew / 1000);
    if (Math.abs(skew) > this.config.cluster.max_clock_skew) {
      this.log.warn(
        { clock_skew_ms: Math.round(skew), max_clock_skew_ms: this.config.cluster.max_clock_skew },
        `${atStart ? 'at start: ' : ''}this replica's clock is ${Math.round(skew)}ms off the database clock (cluster.max_clock_skew ${formatDuration(this.config.cluster.max_clock_skew)}); slots use the database clock, but fix NTP`,
      );
    }
  }

  start(ingress?: Ingress): void {
    this.ingress = ingress ?? null;
    this.scheduler.start();
    for (const job of this.jobs) if (job.settings.enabled) void job.start?.(this.log.child({ job: job.name }));
    this.metrics.ready.set(1);
    void this.heartbeat();
  }

  get isShuttingDown(): boolean {
    return this.shuttingDown !== null;
  }

  /** A worker pool that the shutdown ladder drains. */
  createPool<T>(handler: (task: T, signal: AbortSignal) => Promise<void>, opts: Omit<WorkerPoolOptions, 'metrics' | 'onError'>): WorkerPool<T> {
    const pool = new WorkerPool<T>(handler, { ...opts, metrics: this.metrics, onError: (err) => this.log.error({ pool: opts.name, err: (err as Error)?.message }, 'worker task failed') });
    this.pools.push(pool as WorkerPool<unknown>);
    return pool;
  }

  async readiness(): Promise<{ ready: boolean; checks: Record<string, string> }> {
    const checks: Record<string, string> = {};
    checks.shutdown = this.isShuttingDown ? 'shutting down' : 'ok';
    checks.database = await withTimeout(this.db.ping(), 1000).then(
      () => 'ok',
      (err: Error) => `unreachable: ${err.message}`,
    );
    if (this.redis) {
      checks.redis = await withTimeout(this.redis.ping(), 1000).then(
        () => 'ok',
        (err: Error) => `unreachable: ${err.message}`,
      );
    }
    const ready = Object.values(checks).every((v) => v === 'ok');
    this.metrics.ready.set(ready ? 1 : 0);
    this.metrics.dependencyUp.set({ dependency: 'database' }, checks.database === 'ok' ? 1 : 0);
    if (this.redis) this.metrics.dependencyUp.set({ dependency: 'redis' }, checks.redis === 'ok' ? 1 : 0);
    return { ready, checks };
  }

  async jobViews(): Promise<JobView[]> {
    const snapshots = await this.records.snapshots();
    const since = await this.clusterSince();
    return this.jobs.map((job) => {
      const snap = snapshots.get(job.name);
      const verdict = judgeHealth({ settings: job.settings, snapshot: snap, since, abortGraceMs: this.config.scheduler.abort_grace });
      const s = job.settings.schedule;
      return {
        name: job.name,
        description: job.description,
        scope: job.scope,
        enabled: job.settings.enabled,
        schedule: s.kind === 'every' ? { every: formatDuration(s.everyMs) } : { cron: s.expr, timezone: s.timezone },
        timeout: formatDuration(job.settings.timeoutMs),
        lock_ttl: formatDuration(job.settings.lockTtlMs),
        jitter: formatDuration(job.settings.jitterMs),
        health: verdict.health,
        health_reason: verdict.reason,
        expected_by: verdict.expectedBy?.toISOString() ?? null,
        next_attempt: this.scheduler.nextAttempt(job.name)?.toISOString() ?? null,
        last_slot: snap?.lastSlot?.toISOString() ?? null,
        lease_holder: snap?.leaseUntil && snap.leaseUntil > snap.dbNow ? snap.holder : null,
        last_run: snap?.lastRun ?? null,
        last_success_at: snap?.lastSuccessAt?.toISOString() ?? null,
      };
    });
  }

  /** Start of the cluster's current life: the oldest live replica's start. Health of a job that never ran counts from here. */
  private async clusterSince(): Promise<Date> {
    const live = (await this.registry.list()).filter((i) => i.alive);
    return live.reduce((min, i) => (i.started_at < min ? i.started_at : min), this.startedAt);
  }

  instances(): Promise<InstanceInfo[]> {
    return this.registry.list();
  }

  runNow(name: string, onStart?: (r: { runId: number; token: number }) => void): Promise<RoundReport> {
    return this.scheduler.runNow(name, onStart);
  }

  private async heartbeat(): Promise<void> {
    if (this.isShuttingDown) return;
    try {
      await this.measureSkew();
      const mine = await this.registry.beat(-this.offsetMs);
      this.metrics.instanceConflict.set(mine ? 0 : 1);
      if (!mine) {
        this.log.error(
          { instance_id: this.config.instance.id },
          `INSTANCE ID CONFLICT: another live process registered instance id "${this.config.instance.id}"; two replicas share one id. Give each replica its own RELAY_JOBS_INSTANCE_ID`,
        );
      }
      for (const view of await this.jobViews()) {
        for (const h of HEALTH_STATES) this.metrics.jobHealth.set({ job: view.name, health: h }, view.health === h ? 1 : 0);
      }
      if (this.clock.now() - this.lastPrune > PRUNE_EVERY_MS) {
        this.lastPrune = this.clock.now();
        const pruned = await this.records.prune(this.config.scheduler.run_retention);
        if (pruned) this.log.info({ pruned }, 'old job_runs records pruned');
      }
    } catch (err) {
      this.log.warn({ err: (err as Error).message }, 'instance heartbeat failed');
    }
    if (!this.isShuttingDown) this.heartbeatTimer = setTimeout(() => void this.heartbeat(), this.config.cluster.instance_heartbeat);
  }

  /** Idempotent: a second call returns the first call's promise. */
  shutdown(reason = 'shutdown requested'): Promise<void> {
    this.shuttingDown ??= this.runShutdown(reason);
    return this.shuttingDown;
  }

  private async runShutdown(reason: string): Promise<void> {
    const graceMs = this.config.shutdown.grace;
    const deadline = Date.now() + graceMs;
    this.log.info({ reason, grace: formatDuration(graceMs) }, 'shutdown: readiness false, closing HTTP, stopping rounds');
    this.metrics.ready.set(0);
    if (this.heartbeatTimer) clearTimeout(this.heartbeatTimer);
    await this.ingress?.close().catch((err) => this.log.warn({ err: (err as Error).message }, 'closing the HTTP server failed'));
    this.shutdownController.abort();
    const busy = await this.scheduler.stop(Math.max(0, deadline - Date.now()));
    if (busy.length) this.log.warn({ jobs: busy }, 'shutdown: rounds still running after the grace period; their leases will expire');
    for (const job of [...this.jobs].reverse()) {
      if (!job.stop || !job.settings.enabled) continue;
      const left = await job.stop(Math.max(1000, deadline - Date.now())).catch((err) => this.log.error({ job: job.name, err: (err as Error).message }, 'shutdown: stopping the job failed'));
      if (left) this.log.warn({ job: job.name, still_running: left }, 'shutdown: work still running after the grace period');
    }
    await this.leases.releaseAll();
    await this.oauth.close();
    // Invariant 4: every accepted usage event and quota increment is stored before the connections close.
    const spilled = await this.services.usageWriter.stop(Math.max(2000, deadline - Date.now()));
    if (spilled) this.log.error({ spilled }, 'shutdown: usage events spilled to the data directory; written at the next start');
    const flushed = await this.services.quota.flushAll().catch((err) => {
      this.log.error({ err: (err as Error).message }, 'shutdown: final quota flush failed; the counters keep the values and stay dirty');
      return null;
    });
    if (flushed?.flushed) this.log.info({ flushed: flushed.flushed }, 'shutdown: quota counters flushed');
    this.services.notifier.close();
    for (const pool of this.pools) {
      const { drained, remaining } = await pool.stopAndWait(Math.max(1000, deadline - Date.now()));
      if (!drained) this.log.error({ remaining }, 'shutdown: a worker pool did not drain before the deadline');
    }
    await this.registry.markStopped().catch((err) => this.log.warn({ err: (err as Error).message }, 'could not mark instance stopped'));
    if (this.redis) await this.redis.quit().catch(() => this.redis!.disconnect());
    await this.db.close().catch((err) => this.log.warn({ err: (err as Error).message }, 'closing the database failed'));
    this.dataDirLock?.release();
    this.log.info('shutdown complete');
  }
}

/** Every replica must seal with the same key: the first start records the key's fingerprint, later starts compare. */
async function checkMasterKey(db: Db, box: SecretBox): Promise<void> {
  await db.query(`INSERT INTO secret_keys (purpose, fingerprint) VALUES ('master', $1) ON CONFLICT (purpose) DO NOTHING`, [box.fingerprint]);
  const { rows } = await db.query<{ fingerprint: string }>(`SELECT fingerprint FROM secret_keys WHERE purpose = 'master'`);
  if (rows[0]!.fingerprint !== box.fingerprint) {
    throw new UserError('RELAY_JOBS_MASTER_KEY does not match the key this database was encrypted with: every replica needs the same key (a new key cannot read stored credentials)');
  }
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no answer within ${ms}ms`)), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}

const ADMIN_TOKEN_FILE = 'admin-token';

/** The admin token embedded mode keeps in its data directory, if one was generated. */
export function readEmbeddedAdminToken(dataDir: string): string | undefined {
  const path = join(dataDir, ADMIN_TOKEN_FILE);
  return existsSync(path) ? readFileSync(path, 'utf8').trim() : undefined;
}

/** Embedded mode keeps an admin token in the data directory (mode 0600) so the API works out of the box. */
function embeddedAdminToken(dataDir: string, log: Logger): string {
  const existing = readEmbeddedAdminToken(dataDir);
  if (existing) return existing;
  const path = join(dataDir, ADMIN_TOKEN_FILE);
  const token = randomBytes(24).toString('base64url');
  writeFileSync(path, token + '\n', { mode: 0o600 });
  log.info({ path }, 'generated an admin token for the API; read it from this file');
  return token;
}
