import { setMaxListeners } from 'node:events';
import type { Db } from '../store/db.js';
import { systemClock, type Clock } from '../time/clock.js';
import type { Logger } from '../telemetry/logger.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { LeaderLock, LockBackend, LockHandle } from '../coordination/leader-lock.js';
import { SlotClaims, type Claim, type ClaimResult, type RoundOutcome } from '../coordination/slot-claim.js';
import { roundLeaseKeeper } from './round-lease.js';
import { FencedCursors } from '../coordination/fenced-cursor.js';
import type { Liveness } from '../coordination/liveness.js';
import { RoundAborted, type JobContext, type JobDefinition } from './job.js';
import { RunRecords } from '../coordination/run-records.js';
import { SkipCounter } from '../coordination/skip-counter.js';
import { IdleRounds } from '../coordination/idle-rounds.js';
import { InstanceRoundRecord } from './instance-round.js';
import { formatDuration } from '../config/duration.js';
import { retry } from '../time/retry.js';
import { JobPauses, describePause, type JobPause } from '../coordination/job-pauses.js';
import type { PauseBook } from './pause-book.js';
import { startSpan } from '../telemetry/tracing.js';
import type { ScheduleBook } from './schedule-book.js';

/** `paused`: not started because the job is paused (issue 49); `reason` then describes the pause. */
export type RoundReport =
  | { ran: true; runId: number; token: number; slot: Date; backend: LockBackend | null; outcome: RoundOutcome }
  | { ran: false; slot: Date | null; backend: LockBackend | null; reason: string; paused?: JobPause };

export interface RoundRunnerDeps {
  db: Db;
  clock: Clock;
  lock: LeaderLock;
  log: Logger;
  metrics: Metrics;
  instanceId: string;
  /** Slots may be this far ahead of the database clock (replica clock estimate error). */
  toleratedFutureMs: number;
  /** Fires when the process shuts down: running rounds see it through their own signal. */
  shutdown: AbortSignal;
  /** The crash detector (cluster mode): claims record its key so a dead holder's lease is taken over at once. */
  liveness?: Liveness;
  /**
   * Scheduled instance rounds are recorded only when they say something (`instance-round.ts`):
   * set where a heartbeat writes `idleRounds` (the runtime); without it every round writes its record.
   */
  deferIdleRecords?: boolean;
  /**
   * This replica's copy of the paused jobs (issue 49): a scheduled round of a paused job is skipped
   * before it touches Redis or PostgreSQL. Without it only the claim (cluster jobs) refuses them.
   */
  pauses?: PauseBook;
  /** One schedule per job (issue 49): off it, a scheduled cluster round is skipped before the lock; claims carry this replica's fingerprint. */
  schedules?: ScheduleBook;
}

/**
 * One round of one job: lock → claim → run under a kept lease → record → release.
 * Every path leaves a `job_runs` record (invariant 3) unless the database itself is down.
 */
export class RoundRunner {
  private readonly claims: SlotClaims;
  private readonly records: RunRecords;
  private readonly cursors: FencedCursors;
  private readonly pauseStore: JobPauses;
  /** Scheduled skips, written by the heartbeat as a summary (no write per skipped slot). */
  readonly skips = new SkipCounter();
  /** Scheduled instance rounds that found nothing to do, written by the heartbeat (`deferIdleRecords`). */
  readonly idleRounds = new IdleRounds();

  constructor(private readonly deps: RoundRunnerDeps) {
    // Every running round listens on the process's shutdown signal: one listener per round is expected.
    setMaxListeners(0, deps.shutdown);
    this.claims = new SlotClaims(deps.db, deps.instanceId, (job) => deps.schedules?.fingerprint(job) ?? null);
    this.records = new RunRecords(deps.db);
    this.cursors = new FencedCursors(deps.db);
    this.pauseStore = new JobPauses(deps.db);
  }

  get slotClaims(): SlotClaims {
    return this.claims;
  }

  /**
   * Runs the round for `slot` (a scheduled slot) or, with `slot` null, a manual round.
   * `onStart` is told the run id as soon as the round is claimed (the HTTP API answers then).
   * `recordSkip: false`: a manual round refused (lock held, slot claimed) is counted like a
   * scheduled skip instead of written as a record (a request that asks again, `Scheduler.requestRound`).
   * A paused job (issue 49) starts no round: a scheduled slot is counted as a skip with the reason
   * `paused …`; a manual round is refused (`paused` set, no record) unless `force`.
   */
  async run(job: JobDefinition, slot: Date | null, onStart?: (r: { runId: number; token: number }) => void, opts: { recordSkip?: boolean; force?: boolean } = {}): Promise<RoundReport> {
    const trigger = slot ? 'schedule' : 'manual';
    const log = this.deps.log.child({ job: job.name, trigger });
    // Scheduled: this replica's copy of the pauses (the only guard of instance rounds; cluster claims re-check
    // atomically). Manual: read now, so a pause made a moment ago on another replica is never missed, and,
    // for a cluster job, before its leader lock: a replica skipping a paused slot holds that lock for a
    // moment, and the answer is then `paused`, not `busy`.
    if (!opts.force) {
      const paused = slot ? (this.deps.pauses?.get(job.name) ?? null) : await this.pauseStore.get(job.name);
      if (paused) return this.pausedSkip(job, slot, paused, log);
    }
    if (job.scope === 'instance' && slot && this.deps.deferIdleRecords) {
      const record = new InstanceRoundRecord({ claims: this.claims, clock: this.deps.clock, idle: this.idleRounds, log, job: job.name, slot, timeoutMs: job.settings.timeoutMs });
      return this.execute(job, record.claim, trigger, null, null, log, record);
    }
    if (job.scope === 'instance') {
      const claim = await this.claims.startInstanceRound({ job: job.name, slot: slot ?? new Date(this.deps.clock.now()), timeoutMs: job.settings.timeoutMs, trigger });
      onStart?.({ runId: claim.runId, token: claim.token });
      return this.execute(job, claim, trigger, null, null, log);
    }

    // Off the cluster's schedule (config_drift): counted as a skip before the lock; the claim re-checks atomically anyway.
    const drift = slot ? this.deps.schedules?.drift(job.name) : null;
    if (slot && drift) {
      this.skips.add(job.name, new Date(this.deps.clock.now()), drift.reason);
      return { ran: false, slot, backend: null, reason: drift.reason };
    }
    const { lockTtlMs } = job.settings;
    let acquisition;
    try {
      acquisition = await this.deps.lock.acquire(job.name, lockTtlMs, slot?.getTime() ?? null);
    } catch (err) {
      this.deps.metrics.lockAcquire.inc({ job: job.name, backend: 'none', result: 'error' });
      log.error({ err: (err as Error).message }, 'no lock backend answered; round not run');
      return { ran: false, slot, backend: null, reason: `no lock backend answered: ${(err as Error).message}` };
    }
    let handle: LockHandle | null;
    let backend: LockBackend;
    if (acquisition.acquired) {
      handle = acquisition.handle;
      backend = handle.backend;
      this.deps.metrics.lockAcquire.inc({ job: job.name, backend, result: 'acquired' });
    } else {
      backend = acquisition.backend;
      this.deps.metrics.lockAcquire.inc({ job: job.name, backend, result: 'held' });
      // A lock still held from an older slot: its round overran, or its process died holding it.
      // Only the claim can tell (the lease is free at once if the holder's liveness session is
      // gone); in the common case (held for this very slot) nothing touches PostgreSQL.
      const stale = slot !== null && acquisition.heldForSlot !== null && acquisition.heldForSlot < slot.getTime() && acquisition.takeOver;
      if (!stale) return this.skip(job, slot, backend, `leader lock (${backend}) held by ${acquisition.holder ?? 'another replica'}`, log, opts.recordSkip);
      handle = null;
    }

    let claimed: ClaimResult;
    const aliveKey = this.deps.liveness?.key ?? null;
    try {
      claimed = slot
        ? await this.claims.claimScheduled({ job: job.name, slot, leaseMs: lockTtlMs, timeoutMs: job.settings.timeoutMs, backend, toleratedFutureMs: this.deps.toleratedFutureMs, aliveKey })
        : await this.claims.claimManual({ job: job.name, leaseMs: lockTtlMs, timeoutMs: job.settings.timeoutMs, backend, aliveKey, force: opts.force });
    } catch (err) {
      await handle?.release();
      log.error({ err: (err as Error).message }, 'slot claim failed: database unreachable?');
      return { ran: false, slot, backend, reason: `slot claim failed: ${(err as Error).message}` };
    }
    if (!claimed.claimed) {
      await handle?.release();
      if (claimed.paused) return this.pausedSkip(job, slot, claimed.paused, log, backend);
      if (claimed.offSchedule) this.deps.schedules?.recheck(); // the adoption moved under this replica's copy
      return this.skip(job, slot, backend, claimed.reason, log, opts.recordSkip);
    }
    if (!handle && !acquisition.acquired && acquisition.takeOver) {
      log.warn(
        { previous_holder: acquisition.holder, held_for_slot: new Date(acquisition.heldForSlot!).toISOString() },
        'took the job over from a holder whose lease was free (its process died or its round ended)',
      );
      handle = await acquisition.takeOver(lockTtlMs);
    }
    onStart?.({ runId: claimed.claim.runId, token: claimed.claim.token });
    return this.execute(job, claimed.claim, trigger, handle, lockTtlMs, log);
  }

  /** A round of a paused job not started: a scheduled slot is counted (skip reason `paused …`), a manual one refused. No record. */
  private pausedSkip(job: JobDefinition, slot: Date | null, pause: JobPause, log: Logger, backend: LockBackend | null = null): RoundReport {
    const reason = describePause(pause);
    log.debug({ reason, slot: slot?.toISOString() }, 'round not started: job paused');
    if (slot) this.skips.add(job.name, new Date(this.deps.clock.now()), reason);
    return { ran: false, slot, backend, reason, paused: pause };
  }

  private async skip(job: JobDefinition, slot: Date | null, backend: LockBackend, reason: string, log: Logger, recordManual = true): Promise<RoundReport> {
    this.deps.metrics.roundsTotal.inc({ job: job.name, status: 'skipped_not_leader', lock_backend: backend });
    log.debug({ reason, slot: slot?.toISOString() }, 'round skipped');
    if (slot || !recordManual) {
      this.skips.add(job.name, new Date(this.deps.clock.now()), reason);
      return { ran: false, slot, backend, reason };
    }
    try {
      await this.records.recordSkip({ job: job.name, slot: slot ?? new Date(this.deps.clock.now()), trigger: slot ? 'schedule' : 'manual', instanceId: this.deps.instanceId, backend, note: reason });
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'could not record skipped round');
    }
    return { ran: false, slot, backend, reason };
  }

  private async execute(
    job: JobDefinition,
    claim: Claim,
    trigger: 'schedule' | 'manual',
    handle: LockHandle | null,
    leaseMs: number | null,
    parentLog: Logger,
    record?: InstanceRoundRecord,
  ): Promise<RoundReport> {
    const { clock, metrics } = this.deps;
    const log = record ? parentLog.child({ slot: claim.slot.toISOString() }) : parentLog.child({ fencing_token: claim.token, run_id: claim.runId, slot: claim.slot.toISOString() });
    const controller = new AbortController();
    const abort = (why: RoundAborted['why'], message: string) => {
      if (!controller.signal.aborted) controller.abort(new RoundAborted(why, message));
    };
    const startedAt = clock.now();
    const keeper = roundLeaseKeeper({ clock, leaseMs, job, claims: this.claims, claim, handle, log, metrics, instanceId: this.deps.instanceId, startedAt, abort });
    keeper?.start(startedAt);
    const timeout = clock.setTimeout(() => abort('timeout', `timed out after ${formatDuration(job.settings.timeoutMs)} (jobs.${job.name}.timeout)`), job.settings.timeoutMs);
    const onShutdown = () => abort('shutdown', 'process is shutting down');
    if (this.deps.shutdown.aborted) onShutdown();
    else this.deps.shutdown.addEventListener('abort', onShutdown, { once: true });
    // The claim told the cluster "my holder is alive while this key is held": once it is not, another
    // replica may take the lease at once, so the round must stop at once (its fenced writes are refused anyway).
    const claimedKey = leaseMs === null ? null : claim.aliveKey;
    const offLiveness =
      claimedKey === null || !this.deps.liveness
        ? null
        : this.deps.liveness.onLost((key, reason) => {
            if (key !== claimedKey) return;
            metrics.leaseLost.inc({ job: job.name });
            abort('lease_lost', `lease lost: ${reason}`);
          });
    if (claimedKey !== null && this.deps.liveness && this.deps.liveness.key !== claimedKey) abort('lease_lost', 'lease lost: liveness session lost while claiming');

    const ctx: JobContext = {
      job: job.name,
      slot: claim.slot,
      trigger,
      fencingToken: claim.token,
      instanceId: this.deps.instanceId,
      signal: controller.signal,
      clock,
      log,
      db: this.deps.db,
      cursor: {
        read: async <T>(key: string) => (await this.cursors.read<T>(job.name, key))?.value ?? null,
        write: async (key: string, value: unknown) => {
          if (keeper?.lostReason) throw new RoundAborted('lease_lost', `fenced write refused locally: ${keeper.lostReason}`);
          await this.cursors.write(job.name, key, value, claim.token);
        },
      },
    };

    metrics.running.set({ job: job.name }, 1);
    metrics.jobTimeout.set({ job: job.name }, job.settings.timeoutMs / 1000);
    metrics.roundStarted.set({ job: job.name }, startedAt / 1000);
    // Start lines are debug: "round finished" says everything once; idle jobs would otherwise fill the log.
    log.debug('round started');
    // A trace of its own (a round outlives whatever asked for it); a manual round links to its request's span.
    const attrs = { 'relay_jobs.job': job.name, 'relay_jobs.trigger': trigger, 'relay_jobs.slot': claim.slot.toISOString(), 'relay_jobs.run_id': claim.runId || null };
    const span = startSpan(`round ${job.name}`, { ...attrs, 'relay_jobs.fencing_token': claim.token || null, 'relay_jobs.lock_backend': handle?.backend ?? 'none' }, { root: true, linkActive: true });
    let outcome: RoundOutcome;
    try {
      const result = await span.run(() => job.run(ctx));
      const items = Math.max(0, Math.floor(result.items || 0));
      outcome = { status: items > 0 ? 'ok' : 'no_work', items, note: result.note ?? null };
      if (keeper?.lostReason) outcome.note = `${outcome.note ? outcome.note + '; ' : ''}lease lost during the round: ${keeper.lostReason}`;
    } catch (err) {
      const reason = controller.signal.reason;
      const timedOut = reason instanceof RoundAborted && reason.why === 'timeout';
      const message = reason instanceof RoundAborted ? reason.message : ((err as Error)?.message ?? String(err));
      outcome = { status: timedOut ? 'timed_out' : 'failed', items: 0, error: message.slice(0, 2000) };
    } finally {
      clock.clearTimeout(timeout);
      keeper?.stop();
      offLiveness?.();
      this.deps.shutdown.removeEventListener('abort', onShutdown);
      metrics.running.set({ job: job.name }, 0);
      metrics.roundStarted.set({ job: job.name }, 0);
    }

    const durationMs = clock.now() - startedAt;
    // Three tries on wall time (a test's manual clock must not stall the record); then the lease expiring tells the story.
    const completed = await retry(() => (record ? record.finish(outcome) : this.claims.complete(claim, outcome)), {
      baseMs: 200,
      maxMs: 400,
      attempts: 3,
      clock: systemClock,
      onRetry: (err, attempt) => log.warn({ err: (err as Error).message, attempt }, 'could not record round outcome; retrying'),
    }).catch((err: Error) => {
      log.error({ err: err.message }, 'could not record round outcome; the record stays running until its lease expires');
      return true;
    });
    if (!completed) log.warn('round record was taken over as abandoned (lease expired before the round finished)');
    await handle?.release();
    metrics.roundsTotal.inc({ job: job.name, status: outcome.status, lock_backend: handle?.backend ?? 'none' });
    metrics.roundDuration.observe({ job: job.name }, durationMs / 1000);
    if (outcome.status === 'ok' || outcome.status === 'no_work') metrics.lastSuccess.set({ job: job.name }, clock.now() / 1000);
    const fields = { status: outcome.status, items: outcome.items, duration_ms: durationMs, lock_backend: handle?.backend ?? null };
    span.end({ 'relay_jobs.outcome': outcome.status, 'relay_jobs.items': outcome.items }, outcome.error);
    if (outcome.status === 'failed' || outcome.status === 'timed_out') log.error({ ...fields, error: outcome.error }, 'round finished');
    else if (outcome.status === 'no_work' && trigger === 'schedule') log[job.settings.noWorkLog ?? 'debug']({ ...fields, note: outcome.note }, 'round finished');
    else log.info({ ...fields, note: outcome.note }, 'round finished');
    return { ran: true, runId: claim.runId, token: claim.token, slot: claim.slot, backend: handle?.backend ?? null, outcome };
  }
}
