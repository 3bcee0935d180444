import { setMaxListeners } from 'node:events';
import type { Logger } from '../../telemetry/logger.js';
import type { Metrics } from '../../telemetry/metrics.js';
import type { Clock } from '../../time/clock.js';
import { sleep } from '../../time/clock.js';
import type { Accounts, AccountSecrets, AccountStatus } from '../../store/accounts.js';
import type { RefreshLeases } from '../../coordination/refresh-lease.js';
import { LeaseKeeper } from '../../coordination/lease-keeper.js';
import type { OAuthClient, RefreshCallResult } from '../../upstream/oauth-client.js';
import type { OAuthProvider } from '../../upstream/oauth-providers.js';
import { Semaphore } from '../../workers/semaphore.js';
import { RateLimiter } from '../../workers/rate-limiter.js';

/** Who asked: the scheduler's timers, its retries and recoveries, the hot path, an upstream 401, an admin. */
export type RefreshTrigger = 'schedule' | 'retry' | 'recovery' | 'hot_path' | 'unauthorized' | 'admin';

/**
 * What one request came to. `lease_held` is a skip (another process is refreshing this
 * account), not a success and not a failure; `superseded` means the token changed since the
 * caller looked, so there is nothing to do but read the new one.
 */
export type RefreshOutcome =
  | { result: 'refreshed'; version: number; tokenExpiresAt: Date | null }
  | { result: 'superseded'; version: number; tokenExpiresAt: Date | null }
  | { result: 'lease_held'; heldIn: 'redis' | 'postgres' }
  | { result: 'skipped'; reason: 'gone' | 'not_eligible' | 'no_refresh_token' | 'recently_attempted' | 'stopped'; status?: AccountStatus }
  | { result: 'transient'; reason: string; detail: string; retryAfterMs: number | null; failures: number }
  | { result: 'permanent'; reason: string; detail: string; status: AccountStatus }
  | { result: 'config'; reason: string; detail: string };

export interface RefresherOptions {
  accounts: Accounts;
  leases: RefreshLeases;
  oauth: OAuthClient;
  providers: Map<string, OAuthProvider>;
  clock: Clock;
  log: Logger;
  metrics: Metrics;
  concurrency: number;
  requestTimeoutMs: number;
  leaseTtlMs: number;
  /** Recovery attempts are skipped when any replica attempted this recently. */
  recoveryDelayMs: number;
}

const URGENT: ReadonlySet<RefreshTrigger> = new Set(['hot_path', 'unauthorized', 'admin']);
const ADMIN_REFRESHABLE: ReadonlySet<AccountStatus> = new Set(['active', 'quota_exhausted', 'refreshing', 'expired', 'error']);
const AUTO_REFRESHABLE: ReadonlySet<AccountStatus> = new Set(['active', 'quota_exhausted', 'refreshing']);

/**
 * The one guard every refresh goes through, whoever asks: an in-flight map (a second request
 * for the same account joins the first), a concurrency limit (`auth.refresh_concurrency`,
 * hot-path requests served first), a per-platform rate limit, then the cluster-wide account
 * lease. Under the lease the account is re-read, and the provider is called only if the token
 * version is still the one the caller saw: that is what keeps a refresh token from being used
 * twice. Every write compares and bumps the version.
 */
export class Refresher {
  private readonly inFlight = new Map<number, { outcome: Promise<RefreshOutcome>; promote: () => void }>();
  private readonly slots: Semaphore;
  private readonly limiters = new Map<string, RateLimiter>();
  private readonly stopController = new AbortController();
  private gaveUp = false;

  constructor(private readonly o: RefresherOptions) {
    this.slots = new Semaphore(Math.max(1, o.concurrency));
    // Every waiting refresh combines its own signal with this one: one listener per refresh is expected.
    setMaxListeners(0, this.stopController.signal);
  }

  get inFlightCount(): number {
    return this.inFlight.size;
  }

  isInFlight(id: number): boolean {
    return this.inFlight.has(id);
  }

  /** Refreshes `id` if its token version is still `expectedVersion` (any version when omitted). */
  request(id: number, trigger: RefreshTrigger, expectedVersion?: number): Promise<RefreshOutcome> {
    const existing = this.inFlight.get(id);
    if (existing) {
      // A hot-path caller joining a scheduled refresh that still waits for a slot moves it up.
      if (URGENT.has(trigger)) existing.promote();
      return existing.outcome;
    }
    const ticket = this.slots.ticket(URGENT.has(trigger));
    const outcome = this.run(id, trigger, expectedVersion, ticket.granted).finally(() => {
      this.inFlight.delete(id);
      this.o.metrics.refreshInFlight.set(this.inFlight.size);
    });
    this.inFlight.set(id, { outcome, promote: ticket.promote });
    this.o.metrics.refreshInFlight.set(this.inFlight.size);
    return outcome;
  }

  /** No new provider calls; running refreshes finish (their results must be stored). */
  async stop(deadlineMs: number): Promise<number> {
    this.stopController.abort();
    const end = Date.now() + deadlineMs;
    while (this.inFlight.size && Date.now() < end) await Promise.race([Promise.allSettled([...this.inFlight.values()].map((f) => f.outcome)), new Promise((r) => setTimeout(r, 50))]);
    this.gaveUp = this.inFlight.size > 0;
    return this.inFlight.size;
  }

  private async run(id: number, trigger: RefreshTrigger, expectedVersion: number | undefined, slot: Promise<void>): Promise<RefreshOutcome> {
    const requested = this.o.clock.now();
    await slot;
    try {
      if (this.stopController.signal.aborted) return { result: 'skipped', reason: 'stopped' };
      const outcome = await this.guarded(id, trigger, expectedVersion, requested);
      return outcome;
    } catch (err) {
      // Store unreachable and the like: a transient failure that was not recorded anywhere.
      this.o.log.warn({ account_id: id, trigger, err: (err as Error).message }, 'refresh could not run');
      return { result: 'transient', reason: 'store_error', detail: (err as Error).message, retryAfterMs: null, failures: 0 };
    } finally {
      this.slots.release();
    }
  }

  private async guarded(id: number, trigger: RefreshTrigger, expectedVersion: number | undefined, requested: number): Promise<RefreshOutcome> {
    const { log, metrics } = this.o;
    const lease = await this.o.leases.acquire(id);
    if (!lease.acquired) {
      metrics.refreshLockContention.inc({ held_in: lease.heldIn });
      log.debug({ account_id: id, trigger, held_in: lease.heldIn }, 'refresh lease held by another process: skipped');
      return this.count('unknown', trigger, { result: 'lease_held', heldIn: lease.heldIn });
    }
    const abort = new AbortController();
    const keeper = new LeaseKeeper({
      clock: this.o.clock,
      leaseMs: this.o.leaseTtlMs,
      renewLease: lease.handle.renewLease,
      renewLock: lease.handle.renewLock,
      onLost: (reason) => abort.abort(new Error(`refresh lease lost: ${reason}`)),
    });
    keeper.start();
    let marked: AccountSecrets | null = null;
    try {
      const acct = await this.o.accounts.openSecrets(id);
      if (!acct) return this.count('unknown', trigger, { result: 'skipped', reason: 'gone' });
      if (expectedVersion !== undefined && acct.tokenVersion !== expectedVersion) {
        return this.count(acct.platform, trigger, { result: 'superseded', version: acct.tokenVersion, tokenExpiresAt: acct.tokenExpiresAt });
      }
      const allowed = trigger === 'admin' || trigger === 'recovery' ? ADMIN_REFRESHABLE : AUTO_REFRESHABLE;
      if (!allowed.has(acct.status)) return this.count(acct.platform, trigger, { result: 'skipped', reason: 'not_eligible', status: acct.status });
      if (!acct.credentials.refresh_token) return this.count(acct.platform, trigger, { result: 'skipped', reason: 'no_refresh_token', status: acct.status });
      if (trigger === 'recovery' && acct.lastAttemptAt && this.o.clock.now() - acct.lastAttemptAt.getTime() < this.o.recoveryDelayMs / 2) {
        return this.count(acct.platform, trigger, { result: 'skipped', reason: 'recently_attempted', status: acct.status });
      }
      const provider = this.o.providers.get(acct.platform);
      if (!provider) {
        await this.o.accounts.recordFailure(id, acct.tokenVersion, 'unknown_platform', null);
        log.error({ account_id: id, platform: acct.platform }, `no OAuth provider for platform "${acct.platform}": configure oauth.providers.${acct.platform}.token_url and client_id`);
        return this.count(acct.platform, trigger, { result: 'config', reason: 'unknown_platform', detail: `no oauth.providers.${acct.platform}` });
      }
      let limiter = this.limiters.get(provider.platform);
      if (!limiter) this.limiters.set(provider.platform, (limiter = new RateLimiter(this.o.clock, provider.maxPerSecond)));
      await limiter.take(AbortSignal.any([abort.signal, this.stopController.signal]));
      if (!(await this.o.accounts.markRefreshing(id, acct.tokenVersion))) {
        const now = await this.o.accounts.openSecrets(id);
        return this.count(acct.platform, trigger, { result: 'superseded', version: now?.tokenVersion ?? acct.tokenVersion, tokenExpiresAt: now?.tokenExpiresAt ?? null });
      }
      marked = acct;
      metrics.refreshWait.observe({ trigger }, (this.o.clock.now() - requested) / 1000);
      log.info({ account_id: id, platform: acct.platform, trigger }, 'Starting token refresh');
      const started = this.o.clock.now();
      abort.signal.throwIfAborted();
      // No abort signal on the call itself: once the request may have reached the provider, a
      // rotated refresh token exists only in its reply, so the reply is always awaited and stored.
      const reply = await this.o.oauth.refresh(provider, acct.credentials.refresh_token, { proxyUrl: acct.proxyUrl, timeoutMs: this.o.requestTimeoutMs, nowMs: () => this.o.clock.now() });
      metrics.refreshCallDuration.observe({ platform: acct.platform }, (this.o.clock.now() - started) / 1000);
      const outcome = await this.settle(acct, reply);
      marked = null;
      return this.count(acct.platform, trigger, outcome);
    } catch (err) {
      if (abort.signal.aborted || this.stopController.signal.aborted) {
        return this.count('unknown', trigger, { result: 'skipped', reason: 'stopped' });
      }
      throw err;
    } finally {
      keeper.stop();
      if (marked) await this.o.accounts.clearRefreshing(id, marked.tokenVersion).catch(() => undefined);
      await lease.handle.release();
    }
  }

  /** Stores what the provider said. Credentials from a successful call are written whatever else happens. */
  private async settle(acct: AccountSecrets, reply: RefreshCallResult): Promise<RefreshOutcome> {
    const { log } = this.o;
    const id = acct.id;
    switch (reply.kind) {
      case 'ok': {
        const creds = { access_token: reply.accessToken, refresh_token: reply.refreshToken ?? acct.credentials.refresh_token, id_token: reply.idToken ?? acct.credentials.id_token ?? null };
        const version = await this.persist(acct, creds, reply.expiresAt, reply.refreshToken !== null);
        if (version === null) {
          const now = await this.o.accounts.openSecrets(id);
          log.warn({ account_id: id }, 'credentials were changed by someone else during the refresh; kept theirs');
          return { result: 'superseded', version: now?.tokenVersion ?? acct.tokenVersion, tokenExpiresAt: now?.tokenExpiresAt ?? null };
        }
        if (!reply.expiresAt) log.warn({ account_id: id }, 'Failed to parse JWT exp: the reply had no expires_in and the access token no exp; refreshed only on 401 or on request');
        log.info({ account_id: id, token_expires_at: reply.expiresAt?.toISOString() ?? null, rotated: reply.refreshToken !== null }, 'Token refreshed successfully');
        return { result: 'refreshed', version, tokenExpiresAt: reply.expiresAt };
      }
      case 'permanent': {
        // A rejected refresh token that another writer already replaced is not a failure: the peer won.
        const now = await this.o.accounts.openSecrets(id);
        if (now && now.tokenVersion !== acct.tokenVersion) return { result: 'superseded', version: now.tokenVersion, tokenExpiresAt: now.tokenExpiresAt };
        await this.o.accounts.recordFailure(id, acct.tokenVersion, reply.reason, { status: reply.accountStatus, reason: reply.detail });
        log.error({ account_id: id, reason: reply.reason, status: reply.accountStatus, error: reply.detail }, 'Permanent failure detected: automatic refresh stopped for this account');
        return { result: 'permanent', reason: reply.reason, detail: reply.detail, status: reply.accountStatus };
      }
      case 'config': {
        await this.o.accounts.recordFailure(id, acct.tokenVersion, `config:${reply.reason}`, null);
        log.error({ account_id: id, platform: acct.platform, error: reply.detail }, `the OAuth provider rejected our client (${reply.reason}): check oauth.providers.${acct.platform}.client_id`);
        return { result: 'config', reason: reply.reason, detail: reply.detail };
      }
      case 'transient': {
        const failures = await this.o.accounts.recordFailure(id, acct.tokenVersion, reply.reason, null);
        return { result: 'transient', reason: reply.reason, detail: reply.detail, retryAfterMs: reply.retryAfterMs, failures };
      }
    }
  }

  /**
   * The provider has issued new tokens and, with rotation, already killed the old refresh
   * token: losing this write loses the account. So keep trying (the lease keeper keeps the lease)
   * until it lands or the version check says someone else wrote.
   */
  private async persist(acct: AccountSecrets, creds: AccountSecrets['credentials'], expiresAt: Date | null, rotated: boolean): Promise<number | null> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.o.accounts.writeRefreshed(acct.id, acct.tokenVersion, creds, expiresAt);
      } catch (err) {
        this.o.metrics.rotationPersistFailures.inc();
        if (this.gaveUp) {
          this.o.log.error({ account_id: acct.id, rotated, err: (err as Error).message }, 'shutdown deadline passed before refreshed credentials could be stored; if the refresh token rotated, re-authorize this account');
          throw err;
        }
        this.o.log.error(
          { account_id: acct.id, attempt, rotated, err: (err as Error).message },
          'could not store refreshed credentials; retrying (the old refresh token may already be dead)',
        );
        await sleep(this.o.clock, Math.min(5000, 100 * 2 ** Math.min(attempt, 6)));
      }
    }
  }

  private count(platform: string, trigger: RefreshTrigger, o: RefreshOutcome): RefreshOutcome {
    const reason = 'reason' in o ? o.reason : o.result === 'lease_held' ? o.heldIn : '';
    this.o.metrics.refreshTotal.inc({ platform, trigger, result: o.result, reason });
    return o;
  }
}
