import type { Registry } from 'prom-client';
import type { Logger } from '../../telemetry/logger.js';
import type { OpsDefaults } from './store/ops-defaults.js';
import { interval, type Cancel } from '../../time/wall.js';

/** The series (COUNTER_SERIES) and the replica's own counters they add up. */
const SOURCES: Record<string, { metric: string; outcomes?: string[] }> = {
  usage_dropped: { metric: 'relay_jobs_usage_dropped_total' },
  usage_spilled: { metric: 'relay_jobs_usage_spilled_total' },
  quota_flush_errors: { metric: 'relay_jobs_quota_flush_total', outcomes: ['errors', 'lost'] },
};

/**
 * Each replica's own counters that an alert rule must see cluster-wide (usage events dropped or
 * spilled, quota flush errors): every `everyMs` the rises since the last report go to
 * `ops_counter_increments`, one statement and only when a counter rose (a healthy replica writes
 * nothing), and once more when the replica stops (after the usage writer's final drain, so a spill
 * at exit is counted when the database still answers). The collector sums them per bucket.
 */
export class CounterReporter {
  private cancel: Cancel | null = null;
  private last: Record<string, number> | null = null;
  private running: Promise<void> = Promise.resolve();

  constructor(private readonly o: { registry: Registry; store: OpsDefaults; instanceId: string; everyMs: number; log: Logger }) {}

  start(): void {
    if (this.cancel) return;
    this.cancel = interval(() => void (this.running = this.running.then(() => this.report())), this.o.everyMs, { unref: true });
  }

  async stop(): Promise<void> {
    if (!this.cancel) return;
    this.cancel();
    this.cancel = null;
    await this.running;
    await this.report();
  }

  private async totals(): Promise<Record<string, number>> {
    const out: Record<string, number> = {};
    for (const [series, src] of Object.entries(SOURCES)) {
      const m = this.o.registry.getSingleMetric(src.metric);
      const values = m ? (await m.get()).values : [];
      out[series] = values.filter((v) => !src.outcomes || src.outcomes.includes(String(v.labels.outcome))).reduce((s, v) => s + v.value, 0);
    }
    return out;
  }

  /** A process's counters start at 0: the first report carries everything counted so far. */
  private async report(): Promise<void> {
    try {
      const now = await this.totals();
      const before = this.last ?? {};
      this.last = now;
      const rises = Object.fromEntries(Object.keys(now).map((k) => [k, Math.max(0, now[k]! - (before[k] ?? 0))]));
      try {
        await this.o.store.addIncrements(this.o.instanceId, rises);
      } catch (err) {
        // Reported again with the next rise: the baseline stays where it was.
        this.last = before;
        this.o.log.warn({ err: (err as Error).message }, 'could not report counter rises for the ops series');
      }
    } catch (err) {
      this.o.log.warn({ err: (err as Error).message }, 'could not read counters for the ops series');
    }
  }
}
