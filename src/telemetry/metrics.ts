import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { IntegrityMetrics } from './integrity-metrics.js';

/** An area's group of metrics (its metrics.ts): a class whose constructor registers them on a registry. */
export type MetricGroup<T extends object = object> = new (registry: Registry) => T;

/**
 * Every metric the runtime exposes on /metrics, on a registry of its own (several runtimes in one
 * test process never collide). Names: `relay_jobs_<area>_<what>`.
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly groups = new Map<MetricGroup, object>();

  /**
   * An area's metric group on this registry, made once: the runtime makes every listed area's
   * at wiring (AreaModule.metrics), so /metrics shows them from the start.
   */
  group<T extends object>(g: MetricGroup<T>): T {
    let m = this.groups.get(g) as T | undefined;
    if (!m) this.groups.set(g, (m = new g(this.registry)));
    return m;
  }

  readonly roundsTotal = new Counter({ name: 'relay_jobs_rounds_total', help: 'Rounds by outcome', labelNames: ['job', 'status', 'lock_backend'], registers: [this.registry] });
  readonly roundDuration = new Histogram({
    name: 'relay_jobs_round_duration_seconds',
    help: 'Duration of rounds that ran',
    labelNames: ['job'],
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 1800],
    registers: [this.registry],
  });
  readonly lockAcquire = new Counter({
    name: 'relay_jobs_lock_acquire_total',
    help: 'Leader lock attempts by backend and result',
    labelNames: ['job', 'backend', 'result'],
    registers: [this.registry],
  });
  readonly lockFallback = new Counter({
    name: 'relay_jobs_lock_fallback_total',
    help: 'Rounds that fell back to the PostgreSQL advisory lock after a Redis error',
    labelNames: ['job'],
    registers: [this.registry],
  });
  readonly leaseLost = new Counter({ name: 'relay_jobs_lease_lost_total', help: 'Rounds aborted because their lease could not be kept', labelNames: ['job'], registers: [this.registry] });
  readonly lockRenewFailures = new Counter({
    name: 'relay_jobs_lock_renew_failures_total',
    help: 'Leader-lock renewals that failed (the PostgreSQL lease stays authoritative)',
    labelNames: ['job'],
    registers: [this.registry],
  });
  readonly running = new Gauge({ name: 'relay_jobs_round_running', help: '1 while this instance runs a round of the job', labelNames: ['job'], registers: [this.registry] });
  // With roundStarted, lets one alert rule follow every job's own timeout (deploy/prometheus: RelayJobsLockHeldTooLong).
  readonly jobTimeout = new Gauge({ name: 'relay_jobs_job_timeout_seconds', help: "The job's own timeout (jobs.<name>.timeout) on this instance", labelNames: ['job'], registers: [this.registry] });
  readonly roundStarted = new Gauge({
    name: 'relay_jobs_round_started_timestamp_seconds',
    help: "When this instance's running round of the job started; 0 while none runs",
    labelNames: ['job'],
    registers: [this.registry],
  });
  readonly lastSuccess = new Gauge({
    name: 'relay_jobs_job_last_success_timestamp_seconds',
    help: 'When this instance last finished the job ok or no_work',
    labelNames: ['job'],
    registers: [this.registry],
  });
  /** Set by the instance heartbeat: refreshes `jobHealth` when the metrics are read (cached), so a replica nobody scrapes reads nothing for it. */
  jobHealthRefresh: (() => Promise<void>) | null = null;
  readonly jobHealth = new Gauge({
    name: 'relay_jobs_job_health',
    help: "1 for the job's current cluster-wide health state",
    labelNames: ['job', 'health'],
    registers: [this.registry],
    collect: async () => {
      await this.jobHealthRefresh?.();
    },
  });
  readonly clockSkew = new Gauge({ name: 'relay_jobs_clock_skew_seconds', help: "This replica's clock minus the database clock", registers: [this.registry] });
  readonly instanceConflict = new Gauge({ name: 'relay_jobs_instance_id_conflict', help: '1 while another live process uses this instance id', registers: [this.registry] });
  readonly dependencyUp = new Gauge({ name: 'relay_jobs_dependency_up', help: '1 when the dependency answered its last probe', labelNames: ['dependency'], registers: [this.registry] });
  readonly doctorCheck = new Gauge({
    name: 'relay_jobs_doctor_check',
    help: "1 for each doctor check's status (ok, warn, fail) at the newest doctor run on this replica",
    labelNames: ['check', 'status'],
    registers: [this.registry],
  });
  readonly ready = new Gauge({ name: 'relay_jobs_ready', help: '1 while /readyz answers 200', registers: [this.registry] });

  readonly loopTicks = new Counter({
    name: 'relay_jobs_loop_ticks_total',
    help: 'Ticks of the long-running loops by loop and outcome (ok, no_work, failed)',
    labelNames: ['loop', 'outcome'],
    registers: [this.registry],
  });
  readonly wakeups = new Counter({ name: 'relay_jobs_wakeups_total', help: 'Wake-up notifications received by channel', labelNames: ['channel'], registers: [this.registry] });
  readonly wakeListenerUp = new Gauge({ name: 'relay_jobs_wakeup_listener_up', help: '1 while this replica LISTENs for wake-ups', registers: [this.registry] });

  readonly poolWaiting = new Gauge({ name: 'relay_jobs_pool_waiting', help: 'Tasks queued in a worker pool', labelNames: ['pool'], registers: [this.registry] });
  readonly poolRunning = new Gauge({ name: 'relay_jobs_pool_running', help: 'Tasks running in a worker pool', labelNames: ['pool'], registers: [this.registry] });
  readonly poolDropped = new Counter({ name: 'relay_jobs_pool_dropped_total', help: 'Tasks dropped by a full pool (overflow policy drop)', labelNames: ['pool'], registers: [this.registry] });
  readonly poolSyncFallback = new Counter({
    name: 'relay_jobs_pool_sync_fallback_total',
    help: 'Tasks run inline because the pool was full or stopped',
    labelNames: ['pool'],
    registers: [this.registry],
  });
  readonly poolFailed = new Counter({ name: 'relay_jobs_pool_failed_total', help: 'Tasks that threw', labelNames: ['pool'], registers: [this.registry] });

  readonly refreshTotal = new Counter({
    name: 'relay_jobs_token_refresh_total',
    help: 'Token refresh requests by platform, trigger, result (refreshed, transient, permanent, config, superseded, lease_held, skipped) and reason',
    labelNames: ['platform', 'trigger', 'result', 'reason'],
    registers: [this.registry],
  });
  readonly refreshLockContention = new Counter({
    name: 'relay_jobs_token_refresh_lock_contention_total',
    help: "Refreshes that found the account's refresh lock held, by where (redis, postgres)",
    labelNames: ['held_in'],
    registers: [this.registry],
  });
  readonly refreshLockRedisErrors = new Counter({
    name: 'relay_jobs_token_refresh_lock_redis_errors_total',
    help: 'Refresh locks taken with the PostgreSQL lease alone because Redis failed',
    registers: [this.registry],
  });
  readonly refreshWait = new Histogram({
    name: 'relay_jobs_token_refresh_wait_seconds',
    help: "Time from a refresh request to its provider call (concurrency slot, rate limit, lock), or to another replica's refresh for the hot path",
    labelNames: ['trigger'],
    buckets: [0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120],
    registers: [this.registry],
  });
  readonly refreshCallDuration = new Histogram({
    name: 'relay_jobs_token_refresh_call_seconds',
    help: 'Duration of refresh calls to the OAuth provider',
    labelNames: ['platform'],
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15],
    registers: [this.registry],
  });
  readonly rotationPersistFailures = new Counter({
    name: 'relay_jobs_token_rotation_persist_failures_total',
    help: 'Failed writes of refreshed credentials (retried: the old refresh token is already dead)',
    registers: [this.registry],
  });
  readonly unauthorizedCooldowns = new Counter({
    name: 'relay_jobs_oauth_401_cooldowns_total',
    help: 'Accounts put into the OAuth 401 cooldown',
    labelNames: ['platform'],
    registers: [this.registry],
  });
  readonly refreshScheduled = new Gauge({ name: 'relay_jobs_token_refresh_scheduled', help: 'Accounts with a refresh timer in this process', registers: [this.registry] });
  readonly refreshLeaseAttempts = new Counter({
    name: 'relay_jobs_token_refresh_lease_attempts_total',
    help: 'Attempts to take an account refresh lease in this process, by trigger (with refresh sharding, about one per refresh cluster-wide)',
    labelNames: ['trigger'],
    registers: [this.registry],
  });
  readonly refreshShardMembers = new Gauge({
    name: 'relay_jobs_token_refresh_shard_members',
    help: 'Live replicas sharing the scheduled refreshes, as this replica last saw them',
    registers: [this.registry],
  });
  readonly refreshShardOwned = new Gauge({
    name: 'relay_jobs_token_refresh_shard_owned',
    help: 'Scheduled accounts this replica owns (the others it keeps as a backstop)',
    registers: [this.registry],
  });
  readonly refreshInFlight = new Gauge({ name: 'relay_jobs_token_refresh_in_flight', help: 'Refreshes requested and not finished in this process (waiting or running)', registers: [this.registry] });
  readonly accountsByStatus = new Gauge({ name: 'relay_jobs_accounts', help: 'Accounts by status', labelNames: ['status'], registers: [this.registry] });
  readonly accountsRefreshFailing = new Gauge({ name: 'relay_jobs_accounts_refresh_failing', help: 'Accounts whose last refresh attempt failed', registers: [this.registry] });
  readonly accountsAutoPaused = new Counter({ name: 'relay_jobs_accounts_auto_paused_total', help: 'Accounts made unschedulable by account_expiry', registers: [this.registry] });
  readonly proxyAccountsMoved = new Counter({
    name: 'relay_jobs_proxy_accounts_moved_total',
    help: 'Account moves by proxy_expiry (to a fallback) and back (restored)',
    labelNames: ['direction'],
    registers: [this.registry],
  });
  readonly proxiesExpiringSoon = new Gauge({ name: 'relay_jobs_proxies_expiring_soon', help: 'Active proxies expiring within jobs.proxy_expiry.expiring_soon', registers: [this.registry] });
  readonly proxiesExpired = new Gauge({ name: 'relay_jobs_proxies_expired', help: 'Proxies in status expired', registers: [this.registry] });

  readonly usageWaiting = new Gauge({ name: 'relay_jobs_usage_waiting', help: 'Usage events queued for the writer', registers: [this.registry] });
  readonly usageRunning = new Gauge({ name: 'relay_jobs_usage_running', help: 'Usage events in the batch being written', registers: [this.registry] });
  readonly usageWritten = new Counter({ name: 'relay_jobs_usage_written_total', help: 'Usage rows stored', registers: [this.registry] });
  readonly usageDuplicates = new Counter({ name: 'relay_jobs_usage_duplicates_total', help: 'Usage events skipped because their request id was already stored', registers: [this.registry] });
  readonly usageDropped = new Counter({ name: 'relay_jobs_usage_dropped_total', help: 'Usage events refused by a full queue (usage.overflow: drop)', registers: [this.registry] });
  readonly usageSyncFallback = new Counter({ name: 'relay_jobs_usage_sync_fallback_total', help: 'Usage events written inline because the queue was full or stopping', registers: [this.registry] });
  readonly usageFailedBatches = new Counter({ name: 'relay_jobs_usage_failed_batches_total', help: 'Usage batch writes that failed and were retried', registers: [this.registry] });
  readonly usageSpilled = new Counter({
    name: 'relay_jobs_usage_spilled_total',
    help: 'Usage events written to a spill file at exit because the database could not take them',
    registers: [this.registry],
  });
  readonly usageBatchSeconds = new Histogram({
    name: 'relay_jobs_usage_batch_seconds',
    help: 'Duration of usage batch writes',
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
    registers: [this.registry],
  });
  readonly usageDeleted = new Counter({
    name: 'relay_jobs_usage_deleted_total',
    help: 'Rows deleted by usage cleanup, by kind (raw_partition, raw_batch, hourly, daily, request_ids, task)',
    labelNames: ['kind'],
    registers: [this.registry],
  });
  readonly usageCleanupSeconds = new Histogram({
    name: 'relay_jobs_usage_cleanup_seconds',
    help: 'Duration of usage cleanup rounds and tasks',
    labelNames: ['kind'],
    buckets: [0.1, 1, 10, 60, 300, 1800],
    registers: [this.registry],
  });
  readonly aggregationWatermark = new Gauge({ name: 'relay_jobs_usage_aggregation_watermark_seconds', help: 'Hours before this time are covered by the rollups', registers: [this.registry] });
  readonly quotaFlush = new Counter({
    name: 'relay_jobs_quota_flush_total',
    help: 'Quota counter keys by outcome (dirty, flushed, stale, re_added, lost, errors)',
    labelNames: ['outcome'],
    registers: [this.registry],
  });

  readonly notifySent = new Counter({ name: 'relay_jobs_notifications_sent_total', help: 'Notifications delivered', labelNames: ['channel', 'template'], registers: [this.registry] });
  readonly notifyFailures = new Counter({ name: 'relay_jobs_notification_failures_total', help: 'Notification attempts that failed', labelNames: ['channel'], registers: [this.registry] });
  readonly notifyDeferred = new Counter({
    name: 'relay_jobs_notifications_deferred_total',
    help: 'Claimed notifications put back for later without an attempt, by channel and reason (rate_limit: the cluster-wide budget was full; channel_down: the channel failed this round)',
    labelNames: ['channel', 'reason'],
    registers: [this.registry],
  });
  readonly notifyChannelUp = new Gauge({ name: 'relay_jobs_notification_channel_up', help: "1 when the channel's last attempt succeeded", labelNames: ['channel'], registers: [this.registry] });
  readonly subscriptionsExpired = new Counter({ name: 'relay_jobs_subscriptions_expired_total', help: 'Subscriptions set expired', registers: [this.registry] });
  readonly remindersQueued = new Counter({ name: 'relay_jobs_subscription_reminders_queued_total', help: 'Reminder intents recorded', labelNames: ['days'], registers: [this.registry] });
  readonly ordersPaid = new Counter({
    name: 'relay_jobs_payment_orders_paid_total',
    help: 'Orders marked paid, by source (webhook, reconcile, expiry_check)',
    labelNames: ['source'],
    registers: [this.registry],
  });
  readonly ordersExpired = new Counter({ name: 'relay_jobs_payment_orders_expired_total', help: 'Orders expired after a last check at the provider', registers: [this.registry] });
  readonly providerFailures = new Counter({
    name: 'relay_jobs_payment_provider_failures_total',
    help: 'Provider queries or closes that failed (retried next round)',
    labelNames: ['provider'],
    registers: [this.registry],
  });
  readonly webhooksRejected = new Counter({ name: 'relay_jobs_payment_webhooks_rejected_total', help: 'Webhooks refused, by reason', labelNames: ['provider', 'reason'], registers: [this.registry] });
  readonly integrity = new IntegrityMetrics(this.registry);

  constructor(opts: { defaultMetrics?: boolean } = {}) {
    if (opts.defaultMetrics) {
      // Node's standard names, unprefixed (process_cpu_seconds_total, nodejs_heap_size_used_bytes, …),
      // so the usual Node.js dashboards match. prom-client's three `nodejs_active_*_total` gauges break
      // the Prometheus naming rules (`promtool check metrics`); `sum(nodejs_active_handles)` and the
      // other per-type gauges it also exports give the same totals.
      collectDefaultMetrics({ register: this.registry });
      for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) this.registry.removeSingleMetric(name);
    }
  }
}
