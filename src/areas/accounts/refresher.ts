// The one refresh guard (join, concurrency, rate limit, breaker, lease, version check, the call);
// what the provider's reply becomes (settle, persist) is refresh-settle.ts.
import { setMaxListeners } from 'node:events';
import type { Logger } from '../../telemetry/logger.js';
import type { Accounts, AccountStatus } from './store/accounts.js';
import { leaseFreeSql, type RefreshLeaseHandle, type RefreshLeases } from './store/refresh-lease.js';
import { LeaseKeeper } from '../../coordination/lease-keeper.js';
import type { OAuthClient } from './oauth-client.js';
import type { ProviderAdapter } from './providers/types.js';
import { Semaphore } from '../../workers/semaphore.js';
import { RateLimiter } from '../../workers/rate-limiter.js';
import { PlatformBreaker } from './platform-breaker.js';
import { systemClock, type Clock } from '../../time/clock.js';
import { Deadline } from '../../time/deadline.js';
import { refreshTokenFingerprint, repeatedSend } from './lost-rotation.js';
import { settleReply, settleUnanswered, type RefreshOutcome, type SettleContext } from './refresh-settle.js';
import type { AccountMetrics } from './metrics.js';
import { annotateSpan, withSpan } from '../../telemetry/tracing.js';

/** Who asked: the scheduler's timers, its retries and recoveries, the hot path, an upstream 401, an admin. */
export type RefreshTrigger = 'schedule' | 'retry' | 'recovery' | 'takeover' | 'hot_path' | 'unauthorized' | 'admin';

export type { RefreshOutcome } from './refresh-settle.js';

export interface RefresherOptions {
  accounts: Accounts;
  leases: RefreshLeases;
  oauth: OAuthClient;
  providers: Map<string, ProviderAdapter>;
  clock: Clock;
  log: Logger;
  metrics: AccountMetrics;
  concurrency: number;
  requestTimeoutMs: number;
  /** How long a sent refresh request's reply is awaited (`auth.refresh_reply_timeout`). */
  replyTimeoutMs: number;
  leaseTtlMs: number;
  /** Recovery attempts are skipped when any replica attempted this recently. */
  recoveryDelayMs: number;
  /** The per-platform breaker: consecutive provider-side failures that trip it, and how long it stays open. */
  breakerThreshold: number;
  breakerOpenMs: number;
}

const URGENT: ReadonlySet<RefreshTrigger> = new Set(['hot_path', 'unauthorized', 'admin']);
const ADMIN_REFRESHABLE: ReadonlySet<AccountStatus> = new Set(['active', 'quota_exhausted', 'refreshing', 'expired', 'error']);
const AUTO_REFRESHABLE: ReadonlySet<AccountStatus> = new Set(['active', 'quota_exhausted', 'refreshing']);
const LEASE_FREE = leaseFreeSql('$7');

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
  /** Accounts whose provider call has started and whose result is not stored yet: a rotated token may live only here. */
  private readonly calling = new Map<number, Promise<unknown>>();
  private readonly slots: Semaphore;
  private readonly limiters = new Map<string, RateLimiter>();
  private readonly stopController = new AbortController();
  private gaveUp = false;
  private readonly breaker: PlatformBreaker;

  constructor(private readonly o: RefresherOptions) {
    this.slots = new Semaphore(Math.max(1, o.concurrency));
    this.breaker = new PlatformBreaker(o.clock, o.breakerThreshold, o.breakerOpenMs);
    // Every waiting refresh combines its own signal with this one: one listener per refresh is expected.
    setMaxListeners(0, this.stopController.signal);
  }

  /** The cluster-wide leases (the runtime names this process in them once it is registered). */
  get leases(): RefreshLeases {
    return this.o.leases;
  }

  get inFlightCount(): number {
    return this.inFlight.size;
  }

  /** The platforms whose breaker is open in this process (the doctor's refresh_breaker check). */
  openBreakers(): Array<{ platform: string; ms: number; reason: string }> {
    return this.breaker.open();
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
  async stop(by: Deadline): Promise<number> {
    this.stopController.abort();
    while (this.inFlight.size && !by.passed) await by.settled(Promise.allSettled([...this.inFlight.values()].map((f) => f.outcome)));
    this.gaveUp = this.inFlight.size > 0;
    return this.inFlight.size;
  }

  /** Account ids with a provider call sent and its result not yet stored. */
  callsInFlight(): number[] {
    return [...this.calling.keys()];
  }

  /**
   * The forced exit's wait: up to `boundMs` for calls already sent to finish and be stored.
   * Returns the account ids still unsettled (their rotated tokens may be lost: the caller logs them).
   */
  async settleCalls(boundMs: number): Promise<number[]> {
    // The whole request, not only the call: its lease is released too, so no orphaned lease blocks the next refresh.
    const outcomes = this.callsInFlight().map((id) => this.inFlight.get(id)?.outcome);
    // Wall time: a forced exit's bound, whatever clock the refresher schedules with.
    await Deadline.within(systemClock, boundMs).settled(Promise.allSettled(outcomes));
    return this.callsInFlight();
  }

  private async run(id: number, trigger: RefreshTrigger, expectedVersion: number | undefined, slot: Promise<void>): Promise<RefreshOutcome> {
    const requested = this.o.clock.now();
    await slot;
    try {
      if (this.stopController.signal.aborted) return { result: 'skipped', reason: 'stopped' };
      return await withSpan('token refresh', { 'relay_jobs.account_id': id, 'relay_jobs.trigger': trigger }, () => this.guarded(id, trigger, expectedVersion, requested));
    } catch (err) {
      // Store unreachable and the like: a transient failure that was not recorded anywhere.
      this.o.log.warn({ account_id: id, trigger, err: (err as Error).message }, 'refresh could not run');
      return { result: 'transient', reason: 'store_error', detail: (err as Error).message, retryAfterMs: null, failures: 0 };
    } finally {
      this.slots.release();
    }
  }

  /**
   * Three committing statements per refresh: `beginRefresh` (read + PostgreSQL lease + `refreshing`
   * stamp, after the Redis lock), `markSent` (the request and the fingerprint of the refresh token
   * it presents, just before the call) and the write that stores the outcome and drops the lease
   * (`release` on writeRefreshed / recordFailure / clearRefreshing).
   */
  private async guarded(id: number, trigger: RefreshTrigger, expectedVersion: number | undefined, requested: number): Promise<RefreshOutcome> {
    const { log, metrics } = this.o;
    const statuses = [...(trigger === 'admin' || trigger === 'recovery' ? ADMIN_REFRESHABLE : AUTO_REFRESHABLE)];
    const attemptedBefore = trigger === 'recovery' ? new Date(this.o.clock.now() - this.o.recoveryDelayMs / 2) : null;
    metrics.refreshLeaseAttempts.inc({ trigger });
    const lease = await this.o.leases.acquireWith(id, async (owner, ttlMs, windowMs) => {
      const b = await this.o.accounts.beginRefresh(id, owner, ttlMs, { expectedVersion, statuses, attemptedBefore, leaseFree: { sql: LEASE_FREE, windowMs } });
      return { leased: b.leased, value: b };
    });
    const begun = lease.value;
    const acct = begun?.acct ?? null;
    if (begun && !acct) return this.count('unknown', trigger, { result: 'skipped', reason: 'gone' });
    if (acct && begun?.skip === 'superseded') return this.count(acct.platform, trigger, { result: 'superseded', version: acct.tokenVersion, tokenExpiresAt: acct.tokenExpiresAt });
    if (acct && begun?.skip && begun.skip !== 'gone') {
      if (lease.acquired) await this.finish(id, acct.tokenVersion, lease.handle, begun.marked);
      return this.count(acct.platform, trigger, { result: 'skipped', reason: begun.skip as 'not_eligible' | 'no_refresh_token' | 'recently_attempted', status: acct.status });
    }
    if (!lease.acquired) {
      metrics.refreshLockContention.inc({ held_in: lease.heldIn });
      log.debug({ account_id: id, trigger, held_in: lease.heldIn }, 'refresh lease held by another process: skipped');
      return this.count('unknown', trigger, { result: 'lease_held', heldIn: lease.heldIn });
    }
    const handle = lease.handle;
    if (!acct || !begun!.marked) {
      // The version moved between the read and the stamp (a concurrent writer): nothing to do but read theirs.
      await handle.release();
      const now = await this.o.accounts.currentToken(id);
      return this.count(acct?.platform ?? 'unknown', trigger, { result: 'superseded', version: now?.version ?? acct?.tokenVersion ?? 0, tokenExpiresAt: now?.tokenExpiresAt ?? null });
    }
    const abort = new AbortController();
    const keeper = new LeaseKeeper({
      clock: this.o.clock,
      leaseMs: this.o.leaseTtlMs,
      renewLease: handle.renewLease,
      renewLock: handle.renewLock,
      onLost: (reason) => abort.abort(new Error(`refresh lease lost: ${reason}`)),
    });
    keeper.start();
    let open = true; // the PostgreSQL lease and the `refreshing` stamp are still ours to undo
    try {
      const provider = this.o.providers.get(acct.platform);
      if (!provider) {
        open = false;
        await this.o.accounts.recordFailure(id, acct.tokenVersion, 'unknown_platform', null, { owner: this.o.leases.owner });
        log.error({ account_id: id, platform: acct.platform }, `no OAuth provider for platform "${acct.platform}": configure oauth.providers.${acct.platform}.token_url and client_id`);
        return this.count(acct.platform, trigger, { result: 'config', reason: 'unknown_platform', detail: `no oauth.providers.${acct.platform}` });
      }
      // A send whose sender died unanswered: its refresh token is presented again only where that is safe (lost-rotation.ts).
      const fingerprint = refreshTokenFingerprint(acct.credentials.refresh_token!);
      const repeated = repeatedSend(begun!.unsettled, fingerprint);
      const lost = repeated && (await settleUnanswered(this.settleContext, acct, repeated, provider, fingerprint, trigger));
      if (lost) {
        open = false; // its one write stored the outcome and dropped the lease
        return this.count(acct.platform, trigger, lost);
      }
      const breaker = this.breaker.openFor(provider.platform);
      if (breaker.ms > 0) {
        // No call and no recorded failure: the account waits for the breaker like a Retry-After.
        return this.count(acct.platform, trigger, {
          result: 'transient',
          reason: 'breaker_open',
          detail: `platform ${acct.platform} breaker open after ${breaker.reason}; next call in ${Math.ceil(breaker.ms / 1000)} s`,
          retryAfterMs: breaker.ms,
          failures: 0,
          tokenExpiresAt: acct.tokenExpiresAt,
        });
      }
      let limiter = this.limiters.get(provider.platform);
      if (!limiter) this.limiters.set(provider.platform, (limiter = new RateLimiter(this.o.clock, provider.maxPerSecond)));
      await limiter.take(AbortSignal.any([abort.signal, this.stopController.signal]));
      metrics.refreshWait.observe({ trigger }, (this.o.clock.now() - requested) / 1000);
      // Recorded before it is sent (issue 29): a sender that dies from here on leaves a trace the next attempt reads.
      abort.signal.throwIfAborted();
      const mark = await this.o.accounts.markSent(id, acct.tokenVersion, fingerprint, this.o.leases.owner);
      if (mark.dead) {
        // A refresh token a provider already rejected as dead (this account's, or another's it was copied from): never presented again.
        open = false;
        const reason = `this refresh token is remembered as dead since ${mark.dead.rejectedAt.toISOString()} (${mark.dead.reason}); it is not presented again: re-authorize this account`;
        await this.o.accounts.recordFailure(id, acct.tokenVersion, 'dead_refresh_token', { status: 'expired', reason }, { owner: this.o.leases.owner });
        log.error({ account_id: id, platform: acct.platform, trigger }, 'refresh token already rejected as dead: not sent; account expired');
        return this.count(acct.platform, trigger, { result: 'permanent', reason: 'dead_refresh_token', detail: reason, status: 'expired' });
      }
      if (!mark.sent) {
        const now = await this.o.accounts.currentToken(id);
        return this.count(acct.platform, trigger, { result: 'superseded', version: now?.version ?? acct.tokenVersion, tokenExpiresAt: now?.tokenExpiresAt ?? null });
      }
      log.info({ account_id: id, platform: acct.platform, trigger }, 'Starting token refresh');
      const started = this.o.clock.now();
      // No abort signal on the call itself: once the request may have reached the provider, a
      // rotated refresh token exists only in its reply, so the reply is always awaited and stored
      // (oauth-client bounds connecting by requestTimeoutMs and the reply by replyTimeoutMs only).
      const call = (async () => {
        const reply = await this.o.oauth.refresh(provider, acct.credentials.refresh_token!, {
          proxyUrl: acct.proxyUrl,
          timeoutMs: this.o.requestTimeoutMs,
          replyTimeoutMs: this.o.replyTimeoutMs,
          nowMs: () => this.o.clock.now(),
        });
        metrics.refreshCallDuration.observe({ platform: acct.platform }, (this.o.clock.now() - started) / 1000);
        if (this.breaker.record(acct.platform, reply.kind, 'reason' in reply ? reply.reason : '')) {
          log.error(
            { platform: acct.platform, reason: 'reason' in reply ? reply.reason : '' },
            `refresh breaker open for platform ${acct.platform}: no provider calls for ${Math.round(this.o.breakerOpenMs / 1000)} s`,
          );
        }
        open = false; // settle's one write stores the outcome and drops the lease and the stamp
        return settleReply(this.settleContext, acct, reply, repeated && { ...repeated, graceMs: provider.reuseGraceMs, retryAgeMs: repeated.ageMs }, fingerprint);
      })();
      this.calling.set(id, call);
      const outcome = await call.finally(() => this.calling.delete(id));
      return this.count(acct.platform, trigger, outcome);
    } catch (err) {
      if (abort.signal.aborted || this.stopController.signal.aborted) {
        return this.count('unknown', trigger, { result: 'skipped', reason: 'stopped' });
      }
      throw err;
    } finally {
      keeper.stop();
      if (open) await this.finish(id, acct.tokenVersion, handle, true);
      else await handle.releaseRedis();
    }
  }

  /** Undoes the stamp (if any) and drops the PostgreSQL lease in one statement, then the Redis lock. */
  private async finish(id: number, version: number, handle: RefreshLeaseHandle, marked: boolean): Promise<void> {
    if (marked) await this.o.accounts.clearRefreshing(id, version, { owner: this.o.leases.owner }).catch(() => handle.release());
    else await handle.release();
    if (marked) await handle.releaseRedis();
  }

  /** What settling a reply needs; its ending write drops this process's PostgreSQL refresh lease in the same statement. */
  private get settleContext(): SettleContext {
    return { accounts: this.o.accounts, log: this.o.log, metrics: this.o.metrics, clock: this.o.clock, release: { owner: this.o.leases.owner }, gaveUp: () => this.gaveUp };
  }

  private count(platform: string, trigger: RefreshTrigger, o: RefreshOutcome): RefreshOutcome {
    const reason = 'reason' in o ? o.reason : o.result === 'lease_held' ? o.heldIn : '';
    this.o.metrics.refreshTotal.inc({ platform, trigger, result: o.result, reason });
    annotateSpan({ 'relay_jobs.platform': platform, 'relay_jobs.outcome': o.result, 'relay_jobs.reason': reason || null });
    return o;
  }
}
