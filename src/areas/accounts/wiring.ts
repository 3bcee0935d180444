import { Accounts } from './store/accounts.js';
import { Proxies } from './store/proxies.js';
import { RefreshLeases } from './store/refresh-lease.js';
import { REFRESH_MEMBERSHIP, RefreshShards } from './refresh-shards.js';
import { OAuthClient } from './oauth-client.js';
import { resolveProviders } from './providers/registry.js';
import { ProbeClient } from '../../upstream/probe-client.js';
import { AccountTester } from './account-tester.js';
import { Refresher } from './refresher.js';
import { TokenRefreshService, type TokenRefreshSettings } from './token-refresh-service.js';
import { TokenApi } from './token-api.js';
import { TokenCache } from './token-cache.js';
import { TokenReads } from './store/token-reads.js';
import { wired, type WiringContext } from '../../modules/wiring.js';
import { refreshForcedExit } from './forced-exit.js';
import { AccountMetrics } from './metrics.js';

/** The refresh scheduler's settings from `auth.*` (and the heartbeat, which bounds the first wait for a member list). */
export function tokenRefreshSettings(config: WiringContext['config']): TokenRefreshSettings {
  const a = config.auth;
  return {
    enabled: a.refresh_enabled,
    marginMs: a.refresh_margin_seconds * 1000,
    maxAttempts: a.refresh_max_attempts,
    backoffBaseMs: a.refresh_backoff_base,
    backoffMaxMs: a.refresh_backoff_max,
    retryFloorMs: a.refresh_retry_floor,
    recoveryDelayMs: a.refresh_recovery_delay,
    backstopMs: a.refresh_shard_backstop,
    shardsWaitMs: 2 * config.cluster.instance_heartbeat + 1000,
    leaseTtlMs: a.refresh_lease_ttl,
  };
}

/** The accounts area's services: the stores, the refresher and the hot-path token API. */
export function buildAccounts(w: WiringContext) {
  const { config, db, redis, box, clock, random, log, metrics } = w;
  const am = metrics.group(AccountMetrics);
  const a = config.auth;
  const keys = { prefix: config.redis.key_prefix, env: config.instance.env };
  const leases = new RefreshLeases(
    db,
    redis,
    keys,
    config.instance.id,
    a.refresh_lease_ttl,
    (err) => {
      am.refreshLockRedisErrors.inc();
      log.warn({ err: err.message }, 'redis error: refresh lock taken with the PostgreSQL lease alone');
    },
    // The liveness window of the instance registry (three heartbeats): the same test the refresh shards use.
    3 * config.cluster.instance_heartbeat,
    (accountId, from) => log.warn({ account_id: accountId, dead_holder: from }, 'refresh lock of a dead replica taken over'),
  );
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
    metrics: am,
    concurrency: a.refresh_concurrency,
    requestTimeoutMs: a.refresh_request_timeout,
    replyTimeoutMs: a.refresh_reply_timeout,
    breakerThreshold: a.refresh_breaker_threshold,
    breakerOpenMs: a.refresh_breaker_open,
    leaseTtlMs: a.refresh_lease_ttl,
    recoveryDelayMs: a.refresh_recovery_delay,
  });
  const refreshSettings = tokenRefreshSettings(config);
  const { marginMs } = refreshSettings;
  // The area's membership (area.ts), kept by the kernel's heartbeat: which replica owns which account's scheduled refresh.
  const shards = new RefreshShards(w.memberships.get(REFRESH_MEMBERSHIP));
  shards.onChange(() => {
    am.refreshShardMembers.set(shards.members?.length ?? 0);
    log.info({ members: shards.members }, 'refresh shard members changed: scheduled refreshes re-balanced');
  });
  const tokenRefresh = new TokenRefreshService(accounts, refresher, refreshSettings, clock, random, log, metrics, shards);
  // Served from memory only while this replica hears its own pings on the wake-up listener (token-cache.ts).
  const tokenCache = new TokenCache(new TokenReads(db, box), {
    maxAgeMs: a.token_cache_max_age,
    maxEntries: 100_000,
    listening: () => w.wakes?.listening ?? false,
    onResult: (result) => am.tokenCache.inc({ result }),
  });
  w.wakes?.on('tokens', (detail) => tokenCache.onNotification(detail));
  const tokens = new TokenApi(accounts, tokenRefresh, clock, { marginMs, waitMs: a.hot_path_wait, cooldownMs: a.oauth_401_cooldown }, metrics, log, tokenCache);
  // Account tests (scheduled, on demand, and monitors that use an account) go through this one transport.
  const testClient = new ProbeClient();
  const tester = new AccountTester(db, accounts, tokens, providers, testClient);
  return wired({
    services: { accounts, proxies: new Proxies(db, box), tokenRefresh, tokens, providers, tester },
    rungs: [
      { name: 'refresh leases', stop: () => leases.releaseAll() },
      { name: 'oauth client', stop: () => oauth.close() },
      { name: 'account test client', stop: () => testClient.close() },
    ],
    // Registered: this process's refresh leases now name its instance and boot, so the others take them over when it dies.
    registered: (bootId) => leases.identify(bootId),
    forcedExit: refreshForcedExit(refresher, log),
  });
}

/** What the accounts area's jobs and routes use. */
export type AccountsServices = ReturnType<typeof buildAccounts>['services'];
