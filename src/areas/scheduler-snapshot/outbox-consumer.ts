import { randomBytes } from 'node:crypto';
import type { SchedulerOutbox, OutboxEvent, OutboxStats } from './store/scheduler-outbox.js';
import type { RoutingAccounts, RoutingRow } from './store/routing-accounts.js';
import type { SchedulerMetrics } from './metrics.js';
import type { Logger } from '../../telemetry/logger.js';
import { sleep, type Clock } from '../../time/clock.js';
import type { Deadline } from '../../time/deadline.js';
import { bucketName, byBucket } from './bucket-builder.js';
import { batchChanges } from './outbox-events.js';
import type { SchedulerSnapshot } from './scheduler-snapshot-service.js';
import { ServiceLoop, type LoopTickCounter } from '../../workers/service-loop.js';
import { RebuildTrigger, rebuildBackoffMs, type DegradationRules } from './rebuild-trigger.js';

export interface ConsumerOptions {
  pollIntervalMs: number;
  batchSize: number;
  claimTtlMs: number;
  rules: DegradationRules;
  rebuildEveryMs: number;
  rebuildBackoffBaseMs: number;
  rebuildBackoffMaxMs: number;
  rebuildChunk: number;
  /** Each acknowledgement attempt gets a deadline of its own, never the batch's (Sub2API #1608). */
  ackTimeoutMs: number;
  ackAttempts: number;
  deleteBatch: number;
  /** Sleep when nothing is pending (wake-ups on: `wakeups.backstop`; off: the poll interval, today's path). */
  backstopMs?: number | (() => number);
  /** `ServiceLoop.wakeSpacingMs` (wiring: `WAKE_SPACING_MS`). */
  wakeSpacingMs?: number;
  ticks?: LoopTickCounter;
}

export interface PollResult extends OutboxStats {
  applied: number;
  deleted: number;
}

/**
 * The outbox consumer of one replica (every replica runs one). A poll: claim a batch (rows no
 * live claim holds; a locked pick, so replicas take disjoint batches), apply it (idempotent: each
 * event re-reads its account and writes through the epoch rule), then acknowledge: the rows are
 * marked consumed and the watermark moves in one transaction, retried on fresh deadlines. A batch
 * that fails to apply is released with a delay and claimed again; one whose acknowledgement
 * never lands is re-applied after its claim expires. Consumed rows are deleted in small batches.
 * Then the degradation rules may request a full rebuild, which one replica claims and runs in
 * chunks beside the consumer, never in its way.
 */
export class OutboxConsumer {
  private readonly trigger: RebuildTrigger;
  private readonly stopping = new AbortController();
  private readonly loop: ServiceLoop;
  private rebuilding: Promise<void> | null = null;
  private nextPeriodicCheck = 0;
  /** A wake-up (notification, listener change) came since the last tick: the next tick claims without looking first. */
  private notified = true;
  /** This replica recorded a rebuild request: claim it without waiting for the next read to show it. */
  private rebuildWanted = false;

  constructor(
    private readonly outbox: SchedulerOutbox,
    private readonly routing: RoutingAccounts,
    private readonly snapshot: SchedulerSnapshot,
    private readonly clock: Clock,
    private readonly metrics: SchedulerMetrics,
    private readonly log: Logger,
    private readonly instanceId: string,
    private readonly o: ConsumerOptions,
  ) {
    this.trigger = new RebuildTrigger(o.rules);
    this.loop = new ServiceLoop({
      name: 'scheduler_outbox',
      clock,
      log,
      backstopMs: o.backstopMs ?? o.pollIntervalMs,
      wakeSpacingMs: o.wakeSpacingMs,
      errorDelayMs: o.pollIntervalMs,
      ticks: o.ticks,
      onError: () => this.metrics.pollFailures.inc(),
      tick: async () => {
        // Woken by a notification (or at start): claim at once. Woken by the backstop only: one read first (issue 26).
        const notified = this.notified;
        this.notified = false;
        const r = notified ? await this.poll(true) : await this.observe();
        // Rows left behind (a poll is cut at a second) or written by another path: look again at the poll interval.
        if (r.backlog > 0) this.notified = true; // known work: the next tick claims without looking first
        return { items: r.applied + r.deleted, nextDueAt: r.backlog > 0 ? this.clock.now() + o.pollIntervalMs : null };
      },
    });
  }

  get latched(): boolean {
    return this.trigger.isLatched;
  }

  start(): void {
    this.loop.start();
  }

  /** Polls now (a LISTEN/NOTIFY wake-up); wake-ups during a poll coalesce into one more poll. */
  wake(reason = 'wake'): void {
    this.notified = true;
    this.loop.wake(reason);
  }

  async stop(by: Deadline): Promise<number> {
    this.stopping.abort(new Error('scheduler snapshot consumer stopping'));
    // One budget for the loop, a rebuild in flight and the snapshot's writes.
    const all = Promise.all([this.loop.stop(by), this.rebuilding, this.snapshot.settled()]).then(([left]) => left);
    return (await by.settled(all)) ? await all : 1;
  }

  private token(): string {
    return `${this.instanceId}:${randomBytes(6).toString('hex')}`;
  }

  /** One poll; `woken`: started by a wake-up every replica heard, so a poll that claims nothing ends at its claim. */
  async poll(woken = false): Promise<PollResult> {
    const token = this.token();
    const started = this.clock.now();
    let applied = 0;
    for (;;) {
      const batch = await this.outbox.claim(token, this.o.claimTtlMs, this.o.batchSize);
      if (!batch.length) break;
      const ids = batch.map((e) => e.id);
      try {
        await this.applyBatch(batch);
      } catch (err) {
        const delay = Math.min(30_000, 1000 * Math.max(...batch.map((e) => e.attempts)));
        await this.outbox.release(ids, token, delay).catch(() => undefined);
        throw err;
      }
      await this.ack(ids, token);
      applied += batch.length;
      // Keep polls short so the lag and rebuild checks below run at least about once a second.
      if (batch.length < this.o.batchSize || this.clock.now() - started >= 1000 || this.stopping.signal.aborted) break;
    }
    // After the batch, not before: a change waiting to be applied is not behind a Redis round trip
    // (issue 26's latency). A lost store loses nothing by it: a write into a missing bucket is a
    // no-op (the bucket is rebuilt on its first read) and the rebuild requested here covers it.
    await this.checkMarker();
    // A poll that claimed nothing lost the race for a wake-up every replica heard: the winner
    // deletes what it consumed and reads the lag, so a losing replica's poll is its one claim
    // statement (docs/scaling.md: at N replicas every event woke N - 1 polls of three statements).
    // Its backstop round (`observe`) still deletes and reads the lag and backlog on every replica.
    if (woken && applied === 0) return { applied, deleted: 0, backlog: 0, lagSeconds: 0 };
    const deleted = await this.outbox.deleteConsumed(this.o.deleteBatch, 20);
    return { applied, deleted, ...(await this.checkLag()) };
  }

  /**
   * The scheduler_snapshot job's round: with a backlog, a poll (so a missed wake-up waits at
   * most one round, not the backstop); without one, only a poll's checks (lost store, lag,
   * rebuild rules): one read instead of a claim, a delete and a read (issue 26).
   */
  async observe(): Promise<PollResult> {
    const peek = await this.outbox.stats();
    if (peek.backlog > 0 || (peek.consumed ?? 0) > 0) return this.poll();
    await this.checkMarker();
    return { applied: 0, deleted: 0, ...(await this.checkLag(peek)) };
  }

  private async checkLag(read?: OutboxStats): Promise<OutboxStats> {
    const stats = read ?? (await this.outbox.stats());
    this.metrics.outboxLag.set(stats.lagSeconds);
    this.metrics.outboxBacklog.set(stats.backlog);
    const reason = this.trigger.observe(stats.lagSeconds, stats.backlog);
    if (reason) await this.request(reason, false);
    await this.checkPeriodic();
    // Only a claimable request (or one this replica just wrote) is worth a claim statement.
    if (stats.rebuildPending !== false || this.rebuildWanted) this.startRebuild();
    this.rebuildWanted = false;
    return stats;
  }

  /** A store without the marker lost its data (or is new): one replica sets it and asks for a rebuild. */
  private async checkMarker(): Promise<void> {
    let lost: boolean;
    try {
      lost = await this.snapshot.buckets.claimMarker();
    } catch (err) {
      this.log.debug({ err: (err as Error).message }, 'snapshot store unreachable');
      return;
    }
    if (lost) await this.request(this.snapshot.buckets.emptyReason, true);
  }

  private async checkPeriodic(): Promise<void> {
    if (this.clock.now() < this.nextPeriodicCheck) return;
    const st = await this.outbox.state();
    const sinceRebuild = st.lastRebuildAt ? st.dbNow.getTime() - st.lastRebuildAt.getTime() : Infinity;
    // Next look when the periodic rebuild falls due (a rebuild elsewhere only moves it later), at least 10 s on.
    this.nextPeriodicCheck = this.clock.now() + Math.max(Math.min(10_000, this.o.rebuildEveryMs), this.o.rebuildEveryMs - sinceRebuild);
    if (sinceRebuild >= this.o.rebuildEveryMs) await this.request('periodic', false);
  }

  async request(reason: string, evenIfRunning: boolean): Promise<boolean> {
    const recorded = await this.outbox.requestRebuild(reason, evenIfRunning);
    if (recorded) {
      this.rebuildWanted = true;
      this.metrics.rebuilds.inc({ reason, result: 'requested' });
      this.log.info({ reason }, 'full scheduler snapshot rebuild requested');
    }
    return recorded;
  }

  private async applyBatch(events: OutboxEvent[]): Promise<void> {
    const { ids, left, unknown } = batchChanges(events);
    for (const e of unknown) this.log.warn({ event_id: e.id, type: e.type }, 'unknown scheduler outbox event type: acknowledged without effect');
    const rows = await this.routing.byIds([...ids]);
    const current = new Map(rows.map((r) => [r.id, r]));
    // A bucket that does not exist (-1) is not open: its first read rebuilds it from PostgreSQL.
    for (const g of byBucket(rows).values()) await this.snapshot.builder.applyRows(g.bucket, g.rows);
    for (const { bucket, ids: gone } of left.values()) {
      const tombs: RoutingRow[] = [];
      for (const id of gone) {
        const r = current.get(id);
        if (r && bucketName(r.bucket) === bucketName(bucket)) continue;
        tombs.push({ id, version: r ? r.version : await this.routing.nextVersion(), bucket, entry: null });
      }
      await this.snapshot.builder.applyRows(bucket, tombs);
    }
    for (const e of events) this.metrics.applied.inc({ type: e.type });
  }

  /** The acknowledgement, retried, each try on a fresh deadline; after the last, the claim's expiry re-applies the batch. */
  private async ack(ids: number[], token: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await this.outbox.ack(ids, token, AbortSignal.timeout(this.o.ackTimeoutMs));
        return;
      } catch (err) {
        if (attempt >= this.o.ackAttempts) throw err;
        this.metrics.watermarkRetries.inc();
        await sleep(this.clock, 100 * attempt);
      }
    }
  }

  /** Claims a pending rebuild, if any, and runs it in the background (one per replica at a time). */
  private startRebuild(): void {
    if (this.rebuilding || this.stopping.signal.aborted) return;
    this.rebuilding = this.rebuild()
      .catch((err) => this.log.warn({ err: (err as Error).message }, 'scheduler snapshot rebuild could not be claimed'))
      .finally(() => (this.rebuilding = null));
  }

  private async rebuild(): Promise<void> {
    const token = this.token();
    const lease = Math.max(2 * this.o.claimTtlMs, 10_000); // extended after every chunk
    const ev = await this.outbox.claimRebuild(token, lease);
    if (!ev) return;
    const reason = String(ev.payload.reason ?? 'manual');
    const t0 = this.clock.now();
    try {
      const r = await this.snapshot.builder.rebuildAll(
        this.o.rebuildChunk,
        async () => {
          if (!(await this.outbox.extend(ev.id, token, lease))) throw new Error('the rebuild claim was lost');
          await new Promise((resolve) => setImmediate(resolve));
        },
        this.stopping.signal,
      );
      await this.outbox.finishRebuild(ev.id, token, reason, r.epoch);
      this.metrics.rebuilds.inc({ reason, result: 'ok' });
      this.log.info({ reason, accounts: r.accounts, buckets: r.buckets, epoch: r.epoch, ms: this.clock.now() - t0 }, 'scheduler snapshot rebuilt');
    } catch (err) {
      if (this.stopping.signal.aborted) {
        // Shutdown cut it short: not a failure. Handed back at once for another replica or the next start.
        await this.outbox.release([ev.id], token, 0).catch(() => undefined);
        this.log.info({ reason, ms: this.clock.now() - t0 }, 'scheduler snapshot rebuild stopped by shutdown; handed back');
        return;
      }
      const delay = rebuildBackoffMs(ev.attempts, this.o.rebuildBackoffBaseMs, this.o.rebuildBackoffMaxMs);
      await this.outbox.release([ev.id], token, delay).catch(() => undefined);
      this.metrics.rebuilds.inc({ reason, result: 'failed' });
      this.log.warn({ reason, attempt: ev.attempts, retry_in_ms: delay, err: (err as Error).message }, 'scheduler snapshot rebuild failed; backing off');
    }
  }

  /** Tests: waits for a rebuild running in the background. */
  async rebuildSettled(): Promise<void> {
    await this.rebuilding;
  }
}
