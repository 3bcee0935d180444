import type { Logger } from '../../telemetry/logger.js';
import type { Metrics } from '../../telemetry/metrics.js';
import type { Clock, Random } from '../../time/clock.js';
import type { Deadline } from '../../time/deadline.js';
import type { Accounts, RefreshCandidate } from './store/accounts.js';
import { DueQueue, type DueEntry } from './due-queue.js';
import type { Refresher, RefreshOutcome, RefreshTrigger } from './refresher.js';
import { jitter, nextRefreshAt, retryDelay } from './refresh-timing.js';
import type { RefreshShards } from './refresh-shards.js';
import { AccountMetrics } from './metrics.js';
import { linkedTo, traceLink } from '../../telemetry/tracing.js';

export interface TokenRefreshSettings {
  enabled: boolean;
  marginMs: number;
  maxAttempts: number;
  backoffBaseMs: number;
  backoffMaxMs: number;
  /** `auth.refresh_retry_floor`: deadline-aware retries never come closer than this. */
  retryFloorMs: number;
  recoveryDelayMs: number;
  /** How much later a replica that does not own an account refreshes it anyway (`auth.refresh_shard_backstop`). */
  backstopMs: number;
  /** How long the first sync waits for the first member list (the first heartbeat). */
  shardsWaitMs: number;
  /** The refresh lease's TTL: a held lease is looked at again no later than this (its holder may have died). */
  leaseTtlMs: number;
}

/** An entry as planned: when the account is due; `place` decides when this replica fires it. */
type Planned = Omit<DueEntry, 'at' | 'due'> & { due: number };

/** Seconds between the staggered crash-recovery attempts at start (codex-proxy-rs: 30 s + 2 s × i). */
const RECOVERY_FIRST_MS = 30_000;
const RECOVERY_STEP_MS = 2_000;
/**
 * How long after `lease_held` this process looks again, at most (the holder will have bumped the
 * version by then); never later than the lease's TTL, after which a dead holder's lease is gone.
 */
const RECHECK_MS = 60_000;
/** Rows written just before a sync may carry an `updated_at` a little older than the sync's own read. */
const SYNC_OVERLAP_MS = 10_000;

/**
 * The refresh scheduler of one process: knows when every eligible account is next due (one
 * timer for all, see DueQueue), hands due accounts to the Refresher guard, and turns each
 * outcome into the next due time: success → from the new expiry; transient → backoff, then a
 * recovery attempt every `recovery_delay` after the last attempt; permanent → nothing (the
 * account's status says why).
 *
 * Every replica runs one and plans every account, but fires only the accounts it owns
 * (`RefreshShards`: rendezvous hashing over the live replicas) at their due time; the others
 * wait `backstopMs` longer and are normally superseded by the owner's new token version before
 * they fire. When a replica joins or dies the entries whose owner changed are re-placed at once,
 * so an account the dead replica owned is due on its new owner as soon as the heartbeat shows
 * the death. The per-account lease stays the safety net for every overlap.
 */
export class TokenRefreshService {
  readonly queue: DueQueue;
  private since: Date | null = null;
  private loadedOnce = false;
  private stopped = false;
  /** Accounts whose token expired while their retries failed: the failure count of the first failure after the expiry. */
  private readonly lapsedFrom = new Map<number, number>();

  private readonly am: AccountMetrics;

  constructor(
    private readonly accounts: Accounts,
    readonly refresher: Refresher,
    private readonly s: TokenRefreshSettings,
    private readonly clock: Clock,
    private readonly random: Random,
    private readonly log: Logger,
    metrics: Metrics,
    private readonly shards: RefreshShards | null = null,
  ) {
    this.am = metrics.group(AccountMetrics);
    this.queue = new DueQueue(clock, (e) => void this.fire(e), { log, ticks: metrics.loopTicks });
    shards?.onChange(() => this.rebalance());
  }

  /** When this replica fires an account due at `due`: then on its owner, `backstopMs` later elsewhere. */
  private fireAt(id: number, due: number): number {
    return this.shards && !this.shards.owns(id) ? due + this.s.backstopMs : due;
  }

  private place(e: Planned): void {
    this.queue.schedule({ ...e, at: this.fireAt(e.id, e.due) });
  }

  /**
   * The member list changed: entries whose owner changed move (a dead owner's overdue accounts
   * fire now), a lease found held is looked at again now (its holder may be the one that died),
   * and the accounts a dead replica left `refreshing` are taken over.
   */
  private rebalance(): void {
    if (this.stopped) return;
    const moved: DueEntry[] = [];
    const now = this.clock.now();
    for (const e of this.queue.entries()) {
      const due = e.kind === 'recheck' ? Math.min(now, e.due ?? e.at) : (e.due ?? e.at);
      const at = this.fireAt(e.id, due);
      if (at !== e.at) moved.push({ ...e, due, at });
    }
    for (const e of moved) this.queue.schedule(e);
    this.countOwned();
    void this.takeOver().catch((err: Error) => this.log.warn({ err: err.message }, 'could not look for refreshes a dead replica left unfinished; the next token_refresh round looks again'));
  }

  /**
   * Accounts left `refreshing` whose refresh no live process can still be running (its holder's
   * liveness ended, or its lease lapsed): this replica refreshes those it owns at once, trigger
   * `takeover`, taking the dead holder's lease and lock over. Runs when a member leaves and in
   * every round, so a survivor recovers them, not only a process start.
   */
  async takeOver(): Promise<number> {
    if (!this.s.enabled) return 0;
    let n = 0;
    for (const o of await this.refresher.leases.orphans()) {
      if (this.stopped || this.refresher.isInFlight(o.id) || (this.shards && !this.shards.owns(o.id))) continue;
      if (this.queue.get(o.id)?.kind === 'takeover') continue;
      this.queue.schedule({ id: o.id, kind: 'takeover', version: o.version, due: this.clock.now(), at: this.clock.now() });
      n++;
    }
    if (n) this.log.warn({ accounts: n }, 'taking over refreshes a dead replica left unfinished');
    return n;
  }

  private countOwned(): void {
    if (!this.shards) return this.am.refreshShardOwned.set(this.queue.size);
    let owned = 0;
    for (const e of this.queue.entries()) if (this.shards.owns(e.id)) owned++;
    this.am.refreshShardOwned.set(owned);
  }

  /** Reads accounts changed since the last sync and (re)arms their timers. Never refreshes inline. */
  async sync(signal?: AbortSignal): Promise<{ armed: number; seen: number }> {
    const first = !this.loadedOnce;
    // Owning everything before the first beat answered would fire every overdue account on every replica at start.
    if (first && this.shards) await this.shards.whenKnown(this.s.shardsWaitMs);
    const since = this.since && new Date(this.since.getTime() - SYNC_OVERLAP_MS);
    const { rows, dbNow } = await this.accounts.candidates(since);
    let armed = 0;
    let recoveries = 0;
    const cause = traceLink(); // the round's span (null outside one, or while tracing is off)
    for (const c of rows) {
      signal?.throwIfAborted();
      if (this.refresher.isInFlight(c.id)) continue;
      const entry = this.plan(c, first, () => recoveries++);
      const existing = this.queue.get(c.id);
      if (!entry) {
        if (existing) this.queue.cancel(c.id);
        continue;
      }
      if (existing && existing.version === entry.version && !first) continue;
      this.place({ ...entry, cause });
      armed++;
      if (entry.kind === 'refresh') this.log.debug({ account_id: c.id, delay_secs: Math.round((entry.due - this.clock.now()) / 1000) }, 'Refresh scheduled');
      else if (entry.kind === 'recovery') this.log.info({ account_id: c.id, delay_secs: Math.round((entry.due - this.clock.now()) / 1000) }, 'Expired account, scheduling recovery attempt');
    }
    this.since = dbNow;
    this.loadedOnce = true;
    await this.takeOver();
    this.am.refreshScheduled.set(this.queue.size);
    this.countOwned();
    const { byStatus, failing } = await this.accounts.countByStatus();
    for (const st of ['active', 'quota_exhausted', 'refreshing', 'expired', 'error', 'disabled', 'banned']) this.am.accountsByStatus.set({ status: st }, byStatus.get(st) ?? 0);
    this.am.accountsRefreshFailing.set(failing);
    return { armed, seen: rows.length };
  }

  /** The next due entry for an account, or null when automatic refresh does not apply. */
  private plan(c: RefreshCandidate, atStart: boolean, nextRecoveryIndex: () => number): Planned | null {
    if (!this.s.enabled || !c.hasRefreshToken) return null;
    const now = this.clock.now();
    if (c.status === 'expired') {
      // Crash recovery: an expired account that still has a refresh token gets one staggered attempt per process start.
      if (!atStart) return null;
      return { id: c.id, kind: 'recovery', version: c.tokenVersion, due: now + jitter(RECOVERY_FIRST_MS + RECOVERY_STEP_MS * nextRecoveryIndex(), this.random) };
    }
    if (c.status !== 'active' && c.status !== 'quota_exhausted' && c.status !== 'refreshing') return null;
    if (c.status === 'refreshing' && atStart) {
      // Left by a dead process (or a live peer, whose lease will make this a skip).
      return { id: c.id, kind: 'recovery', version: c.tokenVersion, due: now + jitter(RECOVERY_FIRST_MS / 10 + RECOVERY_STEP_MS * nextRecoveryIndex(), this.random) };
    }
    if (c.failures > 0 && c.lastAttemptAt) {
      const last = c.lastAttemptAt.getTime();
      const { delay, exhausted } = this.retryPlan(c.failures, null, c.tokenExpiresAt ? c.tokenExpiresAt.getTime() - last : null);
      return { id: c.id, kind: exhausted ? 'recovery' : 'retry', version: c.tokenVersion, due: Math.max(now, last + delay) };
    }
    if (!c.tokenExpiresAt) return null;
    const obtainedAt = c.lastSuccessAt?.getTime() ?? Number.NEGATIVE_INFINITY;
    return { id: c.id, kind: 'refresh', version: c.tokenVersion, due: nextRefreshAt(now, c.tokenExpiresAt.getTime(), this.s.marginMs, this.random, obtainedAt) };
  }

  private async fire(e: DueEntry): Promise<void> {
    if (this.stopped) return;
    const trigger: RefreshTrigger = e.kind === 'refresh' || e.kind === 'recheck' ? 'schedule' : e.kind;
    const outcome = await linkedTo(e.cause, () => this.refresher.request(e.id, trigger, e.version));
    this.afterOutcome(e.id, e.version, outcome);
  }

  /** Any caller's outcome (hot path and admin included) feeds the same schedule. */
  afterOutcome(id: number, version: number, o: RefreshOutcome): void {
    if (this.stopped || !this.s.enabled) return;
    const now = this.clock.now();
    if (o.result !== 'transient') this.lapsedFrom.delete(id);
    switch (o.result) {
      case 'refreshed':
      case 'superseded':
        if (o.tokenExpiresAt) {
          const at = nextRefreshAt(now, o.tokenExpiresAt.getTime(), this.s.marginMs, this.random);
          this.place({ id, kind: 'refresh', version: o.version, due: at });
          if (o.result === 'refreshed') this.log.info({ account_id: id, delay_secs: Math.round((at - now) / 1000) }, 'Next refresh scheduled');
        } else this.queue.cancel(id);
        break;
      case 'lease_held':
        this.place({ id, kind: 'recheck', version, due: now + jitter(Math.min(RECHECK_MS, this.s.leaseTtlMs), this.random) });
        break;
      case 'transient': {
        const remainingMs = o.tokenExpiresAt ? o.tokenExpiresAt.getTime() - now : null;
        const { delay, exhausted } = this.retryPlan(o.failures, o.retryAfterMs, remainingMs, this.lapsedFailures(id, o.failures, remainingMs));
        this.place({ id, kind: exhausted ? 'recovery' : 'retry', version, due: now + delay });
        const fields = { account_id: id, attempt: o.failures, max_attempts: this.s.maxAttempts, delay_secs: Math.round(delay / 1000), error: `${o.reason}: ${o.detail}` };
        if (exhausted) {
          this.log.error(fields, 'All refresh attempts exhausted; recovery attempt scheduled');
          // Sub2API: an account whose retries are exhausted is temporarily unschedulable until its recovery attempt
          // (`auth.refresh_recovery_delay`, 10 min), so the gateway stops routing to a token that may lapse meanwhile.
          const until = now + this.s.recoveryDelayMs;
          this.accounts
            .coolDown(id, until, `refresh_failing: ${o.reason}; next attempt at ${new Date(until).toISOString()}`)
            .catch((err: Error) => this.log.warn({ account_id: id, err: err.message }, 'could not mark the account temporarily unschedulable'));
        } else this.log.warn(fields, 'Refresh attempt failed, retrying');
        break;
      }
      case 'config':
      case 'skipped':
        if (o.result === 'skipped' && o.reason !== 'recently_attempted') {
          if (o.reason !== 'stopped') this.queue.cancel(id);
          break;
        }
        this.place({ id, kind: 'recovery', version, due: now + jitter(this.s.recoveryDelayMs, this.random) });
        break;
      case 'permanent':
        this.queue.cancel(id);
        break;
    }
    this.am.refreshScheduled.set(this.queue.size);
  }

  /**
   * After the `failures`-th transient failure: the deadline-aware retry (refresh-timing.ts), or,
   * once `auth.refresh_max_attempts` are used up, the recovery cadence (`auth.refresh_recovery_delay`).
   */
  private retryPlan(failures: number, retryAfterMs: number | null, remainingMs: number | null, lapsedFailures?: number): { delay: number; exhausted: boolean } {
    if (failures >= this.s.maxAttempts) return { delay: jitter(this.s.recoveryDelayMs, this.random), exhausted: true };
    const delay = retryDelay({ failures, baseMs: this.s.backoffBaseMs, maxMs: this.s.backoffMaxMs, floorMs: this.s.retryFloorMs, retryAfterMs, remainingMs, lapsedFailures }, this.random);
    return { delay, exhausted: false };
  }

  /** Failures since the token expired (1 for the first), so a dead token's retries restart from the floor; undefined while it lives. */
  private lapsedFailures(id: number, failures: number, remainingMs: number | null): number | undefined {
    if (remainingMs === null || remainingMs > 0) {
      this.lapsedFrom.delete(id);
      return undefined;
    }
    const from = Math.min(this.lapsedFrom.get(id) ?? failures, failures);
    this.lapsedFrom.set(id, from);
    return failures - from + 1;
  }

  /** Refresh through the guard now and keep the schedule in step with the result. */
  async refreshNow(id: number, trigger: RefreshTrigger, expectedVersion: number): Promise<RefreshOutcome> {
    const outcome = await this.refresher.request(id, trigger, expectedVersion);
    this.afterOutcome(id, expectedVersion, outcome);
    return outcome;
  }

  /** Stops the timer, then the guard, both by `by` (the guard gets what the timer left); returns the refreshes still running. */
  async stop(by: Deadline): Promise<number> {
    this.stopped = true;
    const left = await this.queue.stop(by);
    this.lapsedFrom.clear();
    return left + (await this.refresher.stop(by));
  }
}
