import type { Clock } from '../../time/clock.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Metrics } from '../../telemetry/metrics.js';
import type { AccountTests, ClaimedPlan, TestOutcome } from './store/account-tests.js';
import { unsentTestClass, type AccountTester } from '../accounts/index.js';
import { halfIntervalAfter, nextPlanSlot, placeClaim } from './plan-schedule.js';
import { MIN_PROBE_MS, leaseLeftMs } from './monitor-runner.js';
import type { Deadline } from '../../time/deadline.js';
import { ClaimRunner } from '../../workers/claim-runner.js';
import type { LoopTickCounter } from '../../workers/service-loop.js';
import type { WakeHub } from '../../workers/wake-hub.js';
import { ProbesMetrics } from './metrics.js';
import { withSpan } from '../../telemetry/tracing.js';

export interface AccountTestSettings {
  instanceId: string;
  concurrency: number;
  pollMs: number;
  timeoutMs: number;
  leaseGraceMs: number;
  /** `channel_monitor.min_interval`: a plan stored before the floor existed still fires no closer than this. */
  minIntervalMs?: number;
  /** This replica's liveness key, recorded with each lease so a survivor takes the plan over at once if this process dies. */
  aliveKey?: () => number | null;
  /** Wake-ups: while its listener is up, an idle runner sleeps until the next due plan (`nextDueMs`) or the backstop. */
  wakes?: WakeHub;
  nextDueMs?: () => Promise<number | null>;
  ticks?: LoopTickCounter;
}

/** A claimed plan and when this replica saw the claim (local clock). */
interface Claimed {
  plan: ClaimedPlan;
  seenAt: number;
}

/** A plan whose cron never fires again: parked far in the future. */
const NEVER = new Date(8.64e15);

/**
 * Runs due scheduled account tests on this replica. Every poll claims due plans (at most
 * `concurrency` leased in the whole cluster, see AccountTests.claim), tests each through the
 * account's credentials and proxy, and commits the outcome under the claim's fence. A replica
 * that dies mid-test leaves the plan leased until a survivor sees its liveness key gone (at once)
 * or the lease ends; then the same occurrence is claimed again, and only one result per
 * occurrence is ever stored. Plans fire on their phase slots (`plan-schedule.ts`): a slot claimed
 * more than half an interval late is skipped and counted as missed. The loop is the kernel's claim
 * runner (workers/claim-runner.ts): this class keeps the claim and the test.
 */
export class AccountTestRunner {
  private readonly runner: ClaimRunner<Claimed>;
  /** The probes area's metric group (made once per registry). */
  private readonly pm: ProbesMetrics;

  constructor(
    private readonly plans: AccountTests,
    private readonly tester: AccountTester,
    private readonly clock: Clock,
    metrics: Metrics,
    private readonly log: Logger,
    private readonly s: AccountTestSettings,
  ) {
    this.pm = metrics.group(ProbesMetrics);
    // A pass that claimed looks again after the poll; an idle one, with wake-ups on, when the next plan is due (one already due but leased: the poll).
    this.runner = new ClaimRunner<Claimed>({
      name: 'scheduled_account_test',
      clock,
      log,
      capacity: s.concurrency,
      pollMs: s.pollMs,
      wakes: s.wakes,
      nextDueMs: s.nextDueMs,
      ticks: s.ticks,
      claim: (n) => this.claim(n),
      work: ({ plan, seenAt }, signal) => this.run(plan, seenAt, signal),
    });
  }

  start(): void {
    this.runner.start();
  }

  /** A plan was created or made due (a wake-up): claim now. */
  wake(reason = 'wake'): void {
    this.runner.wake(reason);
  }

  /** Stops claiming; tests in flight get until the same deadline, then their signal aborts. Returns those still running. */
  stop(by: Deadline): Promise<number> {
    return this.runner.stop(by);
  }

  /** One claim pass; returns how many tests it started. */
  async tick(): Promise<number> {
    return (await this.runner.tick()).claimed;
  }

  /** Resolves when every test started so far has committed (tests use it). */
  idle(): Promise<void> {
    return this.runner.idle();
  }

  /** Claims due plans (at most `concurrency` leased cluster-wide); a failed claim is counted and waits for the next poll. */
  private async claim(free: number): Promise<Claimed[]> {
    let claimed: ClaimedPlan[];
    try {
      claimed = await this.plans.claim(this.s.instanceId, free, this.s.concurrency, this.s.timeoutMs + this.s.leaseGraceMs, this.s.aliveKey?.() ?? null);
    } catch (err) {
      this.pm.claimErrors.inc({ what: 'account_test_claim' });
      this.log.warn({ err: (err as Error).message }, 'account test claim failed; retrying at the next poll');
      return [];
    }
    const seenAt = this.clock.now();
    return claimed.map((plan) => ({ plan, seenAt }));
  }

  private async run(claimed: ClaimedPlan, seenAt: number, signal: AbortSignal): Promise<void> {
    const place = placeClaim({ id: claimed.id, cron: claimed.cron, timezone: claimed.timezone, dueMs: claimed.occurrence.getTime(), dueNow: claimed.dueNow, claimedAtMs: claimed.claimedAt.getTime() });
    if (place.missed > 0) this.pm.missed.inc(place.missed);
    if (!place.run) return this.skip(claimed, place.missed, place.nextMs);
    const p: ClaimedPlan = { ...claimed, occurrence: new Date(place.slotMs) };
    const startedLocal = this.clock.now();
    let out: TestOutcome;
    let tokenVersion: number | null = null;
    try {
      // Within the lease or not at all: a test sent after the lease ended could overlap the next claimer's.
      const timeoutMs = Math.min(this.s.timeoutMs, leaseLeftMs(this.s.timeoutMs + this.s.leaseGraceMs, seenAt, this.clock.now(), this.s.leaseGraceMs));
      if (timeoutMs < MIN_PROBE_MS) {
        this.pm.tests.inc({ result: 'abandoned', class: 'none' });
        this.log.warn({ plan_id: p.id, lease_left_ms: timeoutMs }, 'account test not sent: its lease ran out first; the occurrence runs again when the lease ends');
        return;
      }
      const attrs = { 'relay_jobs.plan_id': p.id, 'relay_jobs.account_id': p.accountId, 'relay_jobs.model': p.model };
      const run = await withSpan('probe account_test', attrs, async (span) => {
        const r = await this.tester.run(p.accountId, { model: p.model, timeoutMs, signal, slot: p.occurrence, storedTokenForError: true });
        span.set({ 'relay_jobs.outcome': r.result.ok ? 'ok' : 'failed', 'relay_jobs.error_class': r.result.errorClass, 'http.response.status_code': r.result.status });
        return r;
      });
      const r = run.result;
      tokenVersion = run.tokenVersion;
      out = { startedAt: new Date(startedLocal), ok: r.ok, status: r.status, latencyMs: r.latencyMs, ttfbMs: r.ttfbMs, errorClass: r.errorClass, detail: r.detail, resetAtMs: r.resetAtMs };
    } catch (err) {
      const errorClass = unsentTestClass(err);
      this.log.warn({ plan_id: p.id, account_id: p.accountId, error_class: errorClass, err: (err as Error).message }, 'account test could not start');
      out = {
        startedAt: new Date(startedLocal),
        ok: false,
        status: null,
        latencyMs: Math.round(this.clock.now() - startedLocal),
        ttfbMs: null,
        errorClass,
        detail: (err as Error).message.slice(0, 200),
        resetAtMs: null,
      };
    }
    // The floor holds for plans stored before it was enforced: the next firing is at least minIntervalMs after this one.
    // After the immediate test of a create or edit, the first phase slot at least half an interval later.
    const floor = p.occurrence.getTime() + Math.max(0, (this.s.minIntervalMs ?? 0) - 1);
    const now = this.clock.now();
    const after = p.dueNow ? now + halfIntervalAfter(p.cron, p.timezone, now) : now + 1;
    const slot = nextPlanSlot(p.id, p.cron, p.timezone, Math.max(floor + 1, after));
    const next = slot ? new Date(slot.slotMs) : NEVER;
    try {
      // The account's side (error, rate limit, recovery) commits with the result, under the claim's fence.
      const done = await this.plans.finish(p, this.s.instanceId, out, next, place.missed, (q) =>
        this.tester.applyEffect(
          p.accountId,
          out,
          { autoRecover: p.autoRecover, actor: `scheduled_account_test:${this.s.instanceId}`, context: { plan_id: p.id, occurrence: p.occurrence.toISOString() }, tokenVersion },
          q,
        ),
      );
      const result = done === null ? 'fenced_out' : out.ok ? 'ok' : 'failed';
      this.pm.tests.inc({ result, class: out.errorClass ?? 'none' });
      if (done?.effect.status_before !== done?.effect.status_after || done?.effect.temp_unschedulable_until)
        this.log.info({ plan_id: p.id, account_id: p.accountId, effect: done?.effect.note }, 'account test changed the account');
      if (done?.effect.recovered) {
        this.pm.recovered.inc();
        this.log.info({ plan_id: p.id, account_id: p.accountId }, 'account recovered by a passing scheduled test');
      }
    } catch (err) {
      this.pm.claimErrors.inc({ what: 'account_test_write' });
      this.log.warn({ plan_id: p.id, err: (err as Error).message }, 'storing an account test failed; the lease expires and the occurrence runs again');
    }
  }

  /** A slot more than half an interval late: not tested, the plan moves to its next slot under the claim's fence. */
  private async skip(p: ClaimedPlan, missed: number, nextMs: number | null): Promise<void> {
    try {
      const held = await this.plans.skip(p, missed, nextMs === null ? NEVER : new Date(nextMs));
      this.log.info({ plan_id: p.id, account_id: p.accountId, missed, fenced_out: !held }, 'account test slot skipped: claimed more than half an interval late');
    } catch (err) {
      this.pm.claimErrors.inc({ what: 'account_test_write' });
      this.log.warn({ plan_id: p.id, err: (err as Error).message }, 'skipping a late account test failed; the lease expires and the plan is claimed again');
    }
  }
}
