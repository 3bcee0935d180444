import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** Token refresh, account and proxy expiry: what the accounts area counts (jobs token_refresh, account_expiry, proxy_expiry). */
export class AccountMetrics {
  readonly refreshTotal: Counter<'platform' | 'trigger' | 'result' | 'reason'>;
  readonly refreshLockContention: Counter<'held_in'>;
  readonly refreshLockRedisErrors: Counter;
  readonly refreshWait: Histogram<'trigger'>;
  readonly refreshCallDuration: Histogram<'platform'>;
  readonly rotationPersistFailures: Counter;
  readonly unauthorizedCooldowns: Counter<'platform'>;
  readonly refreshScheduled: Gauge;
  readonly refreshLeaseAttempts: Counter<'trigger'>;
  readonly refreshShardOwned: Gauge;
  readonly refreshShardMembers: Gauge;
  readonly refreshInFlight: Gauge;
  readonly accountsByStatus: Gauge<'status'>;
  readonly accountsRefreshFailing: Gauge;
  readonly accountsAutoPaused: Counter;
  readonly proxyAccountsMoved: Counter<'direction'>;
  readonly proxiesExpiringSoon: Gauge;
  readonly proxiesExpired: Gauge;
  readonly tokenCache: Counter<'result'>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.refreshTotal = new Counter({
      name: 'relay_jobs_token_refresh_total',
      help: 'Token refresh requests by platform, trigger, result (refreshed, transient, permanent, config, superseded, lease_held, skipped) and reason',
      labelNames: ['platform', 'trigger', 'result', 'reason'],
      registers,
    });
    this.refreshLockContention = new Counter({
      name: 'relay_jobs_token_refresh_lock_contention_total',
      help: "Refreshes that found the account's refresh lock held, by where (redis, postgres)",
      labelNames: ['held_in'],
      registers,
    });
    this.refreshLockRedisErrors = new Counter({
      name: 'relay_jobs_token_refresh_lock_redis_errors_total',
      help: 'Refresh locks taken with the PostgreSQL lease alone because Redis failed',
      registers,
    });
    this.refreshWait = new Histogram({
      name: 'relay_jobs_token_refresh_wait_seconds',
      help: "Time from a refresh request to its provider call (concurrency slot, rate limit, lock), or to another replica's refresh for the hot path",
      labelNames: ['trigger'],
      buckets: [0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120],
      registers,
    });
    this.refreshCallDuration = new Histogram({
      name: 'relay_jobs_token_refresh_call_seconds',
      help: 'Duration of refresh calls to the OAuth provider',
      labelNames: ['platform'],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15],
      registers,
    });
    this.rotationPersistFailures = new Counter({
      name: 'relay_jobs_token_rotation_persist_failures_total',
      help: 'Failed writes of refreshed credentials (retried: the old refresh token is already dead)',
      registers,
    });
    this.unauthorizedCooldowns = new Counter({
      name: 'relay_jobs_oauth_401_cooldowns_total',
      help: 'Accounts put into the OAuth 401 cooldown',
      labelNames: ['platform'],
      registers,
    });
    this.refreshScheduled = new Gauge({ name: 'relay_jobs_token_refresh_scheduled', help: 'Accounts with a refresh timer in this process', registers });
    this.refreshLeaseAttempts = new Counter({
      name: 'relay_jobs_token_refresh_lease_attempts_total',
      help: 'Attempts to take an account refresh lease in this process, by trigger (with refresh sharding, about one per refresh cluster-wide)',
      labelNames: ['trigger'],
      registers,
    });
    this.refreshShardOwned = new Gauge({
      name: 'relay_jobs_token_refresh_shard_owned',
      help: 'Scheduled accounts this replica owns (the others it keeps as a backstop)',
      registers,
    });
    // Set when the area's membership changes (wiring.ts): the live replicas the heartbeat last reported.
    this.refreshShardMembers = new Gauge({
      name: 'relay_jobs_token_refresh_shard_members',
      help: 'Live replicas sharing the scheduled refreshes, as this replica last saw them',
      registers,
    });
    this.refreshInFlight = new Gauge({ name: 'relay_jobs_token_refresh_in_flight', help: 'Refreshes requested and not finished in this process (waiting or running)', registers });
    this.accountsByStatus = new Gauge({ name: 'relay_jobs_accounts', help: 'Accounts by status', labelNames: ['status'], registers });
    this.accountsRefreshFailing = new Gauge({ name: 'relay_jobs_accounts_refresh_failing', help: 'Accounts whose last refresh attempt failed', registers });
    this.accountsAutoPaused = new Counter({ name: 'relay_jobs_accounts_auto_paused_total', help: 'Accounts made unschedulable by account_expiry', registers });
    this.proxyAccountsMoved = new Counter({
      name: 'relay_jobs_proxy_accounts_moved_total',
      help: 'Account moves by proxy_expiry (to a fallback) and back (restored)',
      labelNames: ['direction'],
      registers,
    });
    this.proxiesExpiringSoon = new Gauge({ name: 'relay_jobs_proxies_expiring_soon', help: 'Active proxies expiring within jobs.proxy_expiry.expiring_soon', registers });
    this.proxiesExpired = new Gauge({ name: 'relay_jobs_proxies_expired', help: 'Proxies in status expired', registers });
    this.tokenCache = new Counter({
      name: 'relay_jobs_token_cache_total',
      help: 'Token answers of the hot path by how the token cache served them: hit (memory), miss (read), cold (read: not fresh, auth.token_cache_max_age)',
      labelNames: ['result'],
      registers,
    });
  }
}
