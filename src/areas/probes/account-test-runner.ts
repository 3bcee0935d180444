import type { Clock } from '../../time/clock.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Metrics } from '../../telemetry/metrics.js';
import type { AccountTests, ClaimedPlan, TestOutcome } from './store/account-tests.js';
import type { ProbeClient } from './probe-client.js';
import type { AccountProbeAuth } from './account-probe-auth.js';
import { nextOccurrence } from './plan-schedule.js';
import { MIN_PROBE_MS, leaseLeftMs } from './monitor-runner.js';
import { settledWithin } from '../../time/clock.js';

export interface AccountTestSettings {
  instanceId: string;
  concurrency: number;
  pollMs: number;
  timeoutMs: number;
  leaseGraceMs: number;
  baseUrl: string;
  /** `channel_monitor.min_interval`: a plan stored before the floor existed still fires no closer than this. */
  minIntervalMs?: number;
}

/**
 * Runs due scheduled account tests on this replica. Every poll claims due plans (at most
 * `concurrency` leased in the whole cluster, see AccountTests.claim), tests each through the
 * account's credentials and proxy, and commits the outcome under the claim's fence. A replica
 * that dies mid-test leaves the plan leased until the lease ends; then the same occurrence is
 * claimed again, and only one result per occurrence is ever stored.
 */
export class AccountTestRunner {
  private readonly running = new Set<Promise<void>>();
  private timer: ReturnType<Clock['setTimeout']> | null = null;
  private stopped = true;
  private busy = false;
  private readonly abort = new AbortController();

  constructor(
    private readonly plans: AccountTests,
    private readonly client: ProbeClient,
    private readonly auth: AccountProbeAuth,
    private readonly clock: Clock,
    private readonly metrics: Metrics,
    private readonly log: Logger,
    private readonly s: AccountTestSettings,
  ) {}

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(0);
  }

  async stop(withinMs: number): Promise<number> {
    this.stopped = true;
    if (this.timer) this.clock.clearTimeout(this.timer);
    const all = Promise.all(this.running);
    const done = await settledWithin(all, withinMs);
    if (!done) this.abort.abort(new Error('shutting down'));
    return done ? 0 : this.running.size;
  }

  /** One claim pass; returns how many tests it started. */
  async tick(): Promise<number> {
    const free = this.s.concurrency - this.running.size;
    if (free <= 0) return 0;
    let claimed: ClaimedPlan[];
    try {
      claimed = await this.plans.claim(this.s.instanceId, free, this.s.concurrency, this.s.timeoutMs + this.s.leaseGraceMs);
    } catch (err) {
      this.metrics.probes.claimErrors.inc({ what: 'account_test_claim' });
      this.log.warn({ err: (err as Error).message }, 'account test claim failed; retrying at the next poll');
      return 0;
    }
    const seenAt = this.clock.now();
    for (const p of claimed) {
      const run = this.run(p, seenAt).finally(() => this.running.delete(run));
      this.running.add(run);
    }
    return claimed.length;
  }

  /** Resolves when every test started so far has committed (tests use it). */
  async idle(): Promise<void> {
    await Promise.all(this.running);
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = this.clock.setTimeout(() => {
      this.timer = null;
      if (this.busy) return this.schedule(this.s.pollMs);
      this.busy = true;
      void this.tick().finally(() => {
        this.busy = false;
        this.schedule(this.s.pollMs);
      });
    }, ms);
  }

  private async run(p: ClaimedPlan, seenAt: number): Promise<void> {
    const startedLocal = this.clock.now();
    let out: TestOutcome;
    try {
      const a = await this.auth.resolve(p.accountId, { allowUnhealthy: true });
      // Within the lease or not at all: a test sent after the lease ended could overlap the next claimer's.
      const timeoutMs = Math.min(this.s.timeoutMs, leaseLeftMs(this.s.timeoutMs + this.s.leaseGraceMs, seenAt, this.clock.now(), this.s.leaseGraceMs));
      if (timeoutMs < MIN_PROBE_MS) {
        this.metrics.probes.tests.inc({ result: 'abandoned', class: 'none' });
        this.log.warn({ plan_id: p.id, lease_left_ms: timeoutMs }, 'account test not sent: its lease ran out first; the occurrence runs again when the lease ends');
        return;
      }
      const r = await this.client.probe({ baseUrl: this.s.baseUrl, apiKey: a.token, proxyUrl: a.proxyUrl, model: p.model, timeoutMs, slot: p.occurrence }, this.abort.signal);
      out = { startedAt: new Date(startedLocal), ok: r.ok, status: r.status, latencyMs: r.latencyMs, ttfbMs: r.ttfbMs, errorClass: r.errorClass };
    } catch (err) {
      this.log.warn({ plan_id: p.id, account_id: p.accountId, err: (err as Error).message }, 'account test could not start');
      out = { startedAt: new Date(startedLocal), ok: false, status: null, latencyMs: Math.round(this.clock.now() - startedLocal), ttfbMs: null, errorClass: 'auth' };
    }
    // The floor holds for plans stored before it was enforced: the next firing is at least minIntervalMs after this one.
    const floor = p.occurrence.getTime() + Math.max(0, (this.s.minIntervalMs ?? 0) - 1);
    const next = nextOccurrence(p.cron, p.timezone, Math.max(floor, this.clock.now())) ?? new Date(8.64e15);
    try {
      const done = await this.plans.finish(p, this.s.instanceId, out, next);
      const result = done === null ? 'fenced_out' : out.ok ? 'ok' : 'failed';
      this.metrics.probes.tests.inc({ result, class: out.errorClass ?? 'none' });
      if (done?.recovered) {
        this.metrics.probes.recovered.inc();
        this.log.info({ plan_id: p.id, account_id: p.accountId }, 'account recovered by a passing scheduled test');
      }
    } catch (err) {
      this.metrics.probes.claimErrors.inc({ what: 'account_test_write' });
      this.log.warn({ plan_id: p.id, err: (err as Error).message }, 'storing an account test failed; the lease expires and the occurrence runs again');
    }
  }
}
