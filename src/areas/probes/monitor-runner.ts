import type { Clock } from '../../time/clock.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Metrics } from '../../telemetry/metrics.js';
import type { ClaimedMonitor, Monitors, ProbeRecord } from './store/monitors.js';
import type { Deadline } from '../../time/deadline.js';
import { ClaimRunner, type ClaimPace, type ClaimPass } from '../../workers/claim-runner.js';
import type { LoopTickCounter } from '../../workers/service-loop.js';
import type { WakeHub } from '../../workers/wake-hub.js';
import type { ProbeClient, ProbeResult } from '../../upstream/probe-client.js';
import { apiKeyJudge, apiKeyRequest, checkChallenge, makeChallenge, unsentTestClass, type AccountTester } from '../accounts/index.js';
import { ProbesMetrics } from './metrics.js';
import { annotateSpan, withSpan } from '../../telemetry/tracing.js';

export interface MonitorRunnerSettings {
  instanceId: string;
  poolSize: number;
  claimBatch: number;
  pollMs: number;
  leaseGraceMs: number;
  lateAfterMs: number;
  /** `channel_monitor.degraded_after`: a passing probe slower than this (and than no per-monitor value) is recorded as degraded. */
  degradedAfterMs: number;
  /** The challenge's numbers (injectable so tests can pin them). */
  random?: () => number;
  /** `channel_monitor.min_interval`: an idle pass looks again within a quarter of it (a slot claimed half an interval late is skipped). */
  minIntervalMs?: number;
  /** This replica's liveness key, recorded with each lease so a survivor takes the monitor over at once if this process dies. */
  aliveKey?: () => number | null;
  /** Wake-ups: while its listener is up, an idle runner sleeps until the next due monitor (`nextDueMs`) or the backstop. */
  wakes?: WakeHub;
  /** Milliseconds until the earliest monitor is due (database clock), null when none is enabled. */
  nextDueMs?: () => Promise<number | null>;
  ticks?: LoopTickCounter;
}

/** A claimed monitor and when this replica saw the claim (local clock). */
interface Task {
  m: ClaimedMonitor;
  seenAt: number;
}

interface PendingResult extends ProbeRecord {
  /** This clock's reading when the probe's lease ends (its length, counted from when the claim was seen). */
  leaseEndsAt: number;
}

/** A probe with less lease than this left is not sent. */
export const MIN_PROBE_MS = 100;

/** Lease left for the work, on the local clock, keeping half the grace as a margin for event-loop lag. */
export function leaseLeftMs(leaseMs: number, seenAt: number, now: number, graceMs: number): number {
  return leaseMs - Math.max(0, now - seenAt) - graceMs / 2;
}

/**
 * A pass that found nothing due looks again after this (or `poll_interval` if longer): an idle
 * replica costs one claim statement a second, and an edit still takes effect within a second. It
 * is shortened to a quarter of `channel_monitor.min_interval` when that is shorter: a slot claimed
 * more than half an interval late is skipped, and an idle poll as long as the interval would lock
 * onto one phase and skip every slot of a monitor whose phase it misses.
 */
export const IDLE_POLL_MS = 1000;

/** Results waiting for the next write beyond this are dropped oldest-first (counted): the database is down for long. */
const MAX_PENDING = 50_000;

/**
 * This replica's share of the channel monitors. One loop: write the finished results (which
 * releases their leases), claim as many due monitors as the pool has free slots, start them.
 * It never claims more than it can start at once, so a claimed probe never waits in a queue
 * while its lease runs; due monitors it cannot take stay due in PostgreSQL for another replica
 * (counted as overflow here, and as lateness when they start).
 *
 * No overlap: a probe is cut at min(timeout, time left on its lease - grace/2) on this clock,
 * and the lease (timeout + grace, on the database clock) must pass before anyone claims again.
 * The loop and the pool are the kernel's claim runner (workers/claim-runner.ts); this class keeps
 * the claim, the probe, the result writes and the pacing.
 */
export class MonitorRunner {
  private readonly runner: ClaimRunner<Task>;
  /** Finished results waiting for the next write, each with when its lease ends on this clock. */
  private pending: PendingResult[] = [];
  /** The last pass took every slot it asked for: more monitors are probably due than this replica holds. */
  private backlog = false;
  /** The probes area's metric group (made once per registry). */
  private readonly pm: ProbesMetrics;

  constructor(
    private readonly monitors: Monitors,
    private readonly client: ProbeClient,
    private readonly tester: AccountTester,
    private readonly clock: Clock,
    metrics: Metrics,
    private readonly log: Logger,
    private readonly s: MonitorRunnerSettings,
  ) {
    this.pm = metrics.group(ProbesMetrics);
    this.runner = new ClaimRunner<Task>({
      name: 'channel_monitor',
      clock,
      log,
      capacity: s.poolSize,
      batch: s.claimBatch,
      pollMs: s.pollMs,
      idlePollMs: this.idlePollMs(),
      wakes: s.wakes,
      nextDueMs: s.nextDueMs,
      ticks: s.ticks,
      metrics,
      claim: (n) => this.claim(n),
      work: (t, signal) => this.probe(t, signal),
      afterClaim: () => this.flush(),
      onFull: () => this.pm.saturated.inc(),
      onItemError: (err) => log.error({ err: (err as Error).message }, 'probe task failed'),
      pace: (p) => this.pace(p),
    });
  }

  get inFlight(): number {
    return this.runner.inHand;
  }

  start(): void {
    this.runner.start();
  }

  /** A monitor was created or made due (a wake-up): claim now. */
  wake(reason = 'wake'): void {
    this.runner.wake(reason);
  }

  /** Stops claiming, lets running probes finish (aborted a second before the deadline), writes their results, all by `by`. */
  async stop(by: Deadline): Promise<number> {
    const remaining = await this.runner.stop(by, by.less(1000));
    await this.flush();
    return remaining;
  }

  /**
   * One pass (exposed for tests and the benchmark): claim, start, then write the finished
   * results. The claim comes first so a monitor that woke the loop is not behind the write of
   * other monitors' results (issue 26's latency). Returns how many were claimed.
   */
  async tick(): Promise<number> {
    return (await this.runner.tick()).claimed;
  }

  /** Claims up to `n` due monitors (the pool's free slots, at most a batch); a failed claim is counted and waits for the next poll. */
  private async claim(n: number): Promise<Task[]> {
    // A waiting result whose lease ends (or is within the margin of ending) is written first: claimed
    // before its write, its monitor would be taken again under a new fence and this replica's own
    // result stored as fenced out. Results with lease left cannot be claimed again, so they still
    // wait behind the claim (issue 26's latency). Seen on a loaded machine: a probe cut at its lease
    // less the margin, then a pass that came later than the margin.
    const now = this.clock.now();
    if (this.pending.some((p) => p.leaseEndsAt - this.s.leaseGraceMs / 2 <= now)) await this.flush();
    let claimed: ClaimedMonitor[];
    try {
      const pass = await this.monitors.claim(this.s.instanceId, n, this.s.leaseGraceMs, this.s.aliveKey?.() ?? null);
      claimed = pass.claimed;
      // Slots more than half an interval late: not probed (a probe now would crowd the next slot), counted as missed.
      if (pass.skipped > 0) this.pm.missed.inc(pass.skipped);
    } catch (err) {
      this.pm.claimErrors.inc({ what: 'claim' });
      this.log.warn({ err: (err as Error).message }, 'monitor claim failed; retrying at the next poll');
      return [];
    }
    const seenAt = this.clock.now();
    for (const m of claimed) if (m.missed > 0) this.pm.missed.inc(m.missed);
    return claimed.map((m) => ({ m, seenAt }));
  }

  private pace({ claimed, wanted, room }: ClaimPass): ClaimPace {
    this.backlog = claimed > 0 && claimed === wanted;
    // A full batch means more may be due: go again at once (when the pool has room).
    if (claimed > 0 && claimed === wanted && room > 0) return 'now';
    if (!(claimed === 0 && wanted > 0)) return 'poll';
    // Idle. Wake-ups on: sleep until the earliest monitor is due (a due one held by another replica: the idle poll); off: the idle poll.
    return 'idle';
  }

  private idlePollMs(): number {
    return Math.max(Math.min(IDLE_POLL_MS, (this.s.minIntervalMs ?? Infinity) / 4), this.s.pollMs);
  }

  /**
   * Behind (the last pass filled every free slot): when a quarter of the pool has freed up, claim
   * again at once instead of waiting for the poll, so a busy replica's throughput is set by the
   * pool, not by `poll_interval`. Claims stay batched (a quarter of the pool or more each).
   */
  private refill(): void {
    if (!this.backlog || this.runner.inTick || !this.runner.isRunning) return;
    if (this.runner.inHand > (this.s.poolSize * 3) / 4) return;
    this.runner.wake('refill');
  }

  private async probe(task: Task, signal: AbortSignal): Promise<void> {
    try {
      await withSpan('probe channel_monitor', { 'relay_jobs.monitor_id': task.m.id, 'relay_jobs.account_id': task.m.accountId, 'relay_jobs.model': task.m.model }, () => this.probeOnce(task, signal));
    } finally {
      this.refill();
    }
  }

  private async probeOnce({ m, seenAt }: Task, signal: AbortSignal): Promise<void> {
    const startedLocal = this.clock.now();
    const sinceClaim = Math.max(0, startedLocal - seenAt);
    const startedAt = new Date(m.claimedAt.getTime() + sinceClaim);
    const lateness = Math.max(0, startedAt.getTime() - m.scheduledFor.getTime());
    this.pm.lateness.observe(lateness / 1000);
    if (lateness > this.s.lateAfterMs) this.pm.late.inc();
    this.pm.inFlight.set(this.runner.inHand);
    let result: ProbeResult;
    try {
      // Cut the probe well inside the lease, so the next claim can never overlap it; a lease nearly gone means no probe at all.
      const timeoutMs = Math.min(m.timeoutMs, leaseLeftMs(m.leaseUntil.getTime() - m.claimedAt.getTime(), seenAt, this.clock.now(), this.s.leaseGraceMs));
      if (timeoutMs < MIN_PROBE_MS) {
        this.pm.abandoned.inc();
        this.log.warn(
          { monitor_id: m.id, lease_left_ms: timeoutMs },
          'probe not sent: its lease ran out before it could start (this replica is stalled); the monitor is due again when the lease ends',
        );
        return;
      }
      const challenge = m.challenge ? makeChallenge(this.s.random) : null;
      const prompt = challenge?.prompt ?? 'ping';
      if (m.accountId !== null) {
        // An account's monitor speaks its platform's account test (refreshing the token first when it is due).
        result = (
          await this.tester.run(m.accountId, { model: m.model, timeoutMs, signal, slot: m.scheduledFor, prompt, expected: challenge?.expected, baseUrl: m.baseUrl, storedTokenForError: false })
        ).result;
      } else {
        const judge = apiKeyJudge(m.provider);
        result = await this.client.probe(
          {
            request: apiKeyRequest(m.provider, m.baseUrl!, m.apiKey!, m.model, prompt),
            judge: challenge ? (...a) => checkChallenge(judge(...a), challenge.expected) : judge,
            timeoutMs,
            slot: m.scheduledFor,
          },
          signal,
        );
      }
    } catch (err) {
      const errorClass = unsentTestClass(err);
      // The relay's own trouble says why here; an account with no usable token (`auth`) shows in the monitor's last probe.
      if (errorClass === 'not_sent') this.log.warn({ monitor_id: m.id, account_id: m.accountId, error_class: errorClass, err: (err as Error).message }, 'monitor probe could not start');
      result = {
        ok: false,
        status: null,
        latencyMs: Math.round(this.clock.now() - startedLocal),
        ttfbMs: null,
        errorClass,
        detail: (err as Error).message.slice(0, 200),
        answer: null,
        resetAtMs: null,
        reply: null,
      };
    }
    // A slow answer that passed: kept as a pass (ok), its class says degraded.
    const degraded = result.ok && result.latencyMs > (m.degradedAfterMs ?? this.s.degradedAfterMs);
    this.pm.probes.inc({ result: result.ok ? 'ok' : 'failed', class: degraded ? 'degraded' : (result.errorClass ?? 'none') });
    annotateSpan({ 'relay_jobs.outcome': result.ok ? 'ok' : 'failed', 'relay_jobs.error_class': degraded ? 'degraded' : result.errorClass, 'http.response.status_code': result.status });
    this.pending.push({
      monitorId: m.id,
      fence: m.fence,
      scheduledFor: m.scheduledFor,
      startedAt,
      ok: result.ok,
      status: result.status,
      latencyMs: result.latencyMs,
      ttfbMs: result.ttfbMs,
      errorClass: degraded ? 'degraded' : result.errorClass,
      missed: m.missed,
      // Database time of the probe's end, by the claim's clock (issue 49: a new monitor's next probe waits half an interval after this one).
      notBefore: m.dueNow ? new Date(m.claimedAt.getTime() + Math.max(0, this.clock.now() - seenAt) + Math.ceil(m.intervalMs / 2)) : null,
      leaseEndsAt: seenAt + (m.leaseUntil.getTime() - m.claimedAt.getTime()),
    });
    if (this.pending.length > MAX_PENDING) {
      const dropped = this.pending.splice(0, this.pending.length - MAX_PENDING).length;
      this.pm.claimErrors.inc({ what: 'results_dropped' }, dropped);
    }
  }

  private async flush(): Promise<void> {
    if (this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    try {
      const fencedOut = await this.monitors.complete(this.s.instanceId, batch);
      if (fencedOut > 0) this.pm.fencedOut.inc(fencedOut);
    } catch (err) {
      this.pending = batch.concat(this.pending);
      this.pm.claimErrors.inc({ what: 'write' });
      this.log.warn({ err: (err as Error).message, results: batch.length }, 'writing probe results failed; kept for the next pass (leases expire meanwhile)');
    }
  }
}
