import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';
import type { OpsMetricsStore, SeriesValues } from '../../store/ops-metrics.js';

/** What the collector reads outside the database tables (the runtime supplies these). */
export interface OpsProbes {
  jobHealth(): Promise<Array<{ name: string; health: string }>>;
  instances(): Promise<Array<{ instance_id: string; alive: boolean; heartbeat_at: Date; clock_skew_ms: number | null; version: string }>>;
  pingDb(): Promise<void>;
  pingRedis: (() => Promise<unknown>) | null;
  usageQueue(): number;
  dbPoolInUse(): number | null;
}

/**
 * Gathers one bucket's series: usage of the bucket (an index range read), state counts, job
 * health, outbox backlog, dependency round trips, and this process's figures. A series it
 * could not read is null (unknown), never zero; a bucket without traffic is zeroes.
 */
export class OpsCollector {
  private readonly loop: IntervalHistogram = monitorEventLoopDelay({ resolution: 20 });

  constructor(
    private readonly store: OpsMetricsStore,
    private readonly probes: OpsProbes,
  ) {
    this.loop.enable();
  }

  async collect(from: Date, to: Date): Promise<{ metrics: SeriesValues; instances: unknown[]; errors: string[] }> {
    const errors: string[] = [];
    const metrics: SeriesValues = {};
    const part = async (name: string, fn: () => Promise<SeriesValues>) => {
      try {
        Object.assign(metrics, await fn());
      } catch (err) {
        errors.push(`${name}: ${(err as Error).message}`);
      }
    };
    await part('usage', () => this.store.usageBucket(from, to));
    const seconds = (to.getTime() - from.getTime()) / 1000;
    if (typeof metrics.request_count === 'number') {
      metrics.error_rate = metrics.request_count ? metrics.error_count! / metrics.request_count : 0;
      metrics.rate_limit_rate = metrics.request_count ? metrics.rate_limit_count! / metrics.request_count : 0;
      metrics.qps = metrics.request_count / seconds;
      metrics.tps = metrics.output_tokens! / seconds;
    }
    await part('states', () => this.store.stateCounts());
    await part('jobs', async () => {
      const jobs = await this.probes.jobHealth();
      const count = (h: string) => jobs.filter((j) => j.health === h).length;
      return { jobs_healthy: count('healthy') + count('idle'), jobs_late: count('late'), jobs_stuck: count('stuck'), jobs_failing: count('failing') };
    });
    await part('db', async () => ({ db_latency_ms: await this.time(() => this.probes.pingDb()), db_pool_in_use: this.probes.dbPoolInUse() }));
    if (this.probes.pingRedis) await part('redis', async () => ({ redis_latency_ms: await this.time(() => this.probes.pingRedis!()) }));
    let instances: unknown[] = [];
    await part('instances', async () => {
      const list = await this.probes.instances();
      instances = list.map((i) => ({ instance_id: i.instance_id, alive: i.alive, heartbeat_at: i.heartbeat_at.toISOString(), clock_skew_ms: i.clock_skew_ms, version: i.version }));
      return { instances_alive: list.filter((i) => i.alive).length };
    });
    const mem = process.memoryUsage();
    metrics.usage_queue = this.probes.usageQueue();
    metrics.event_loop_lag_ms = Math.round(this.loop.percentile(99) / 1e4) / 100;
    metrics.rss_bytes = mem.rss;
    metrics.heap_used_bytes = mem.heapUsed;
    this.loop.reset();
    return { metrics, instances, errors };
  }

  private async time(fn: () => Promise<unknown>): Promise<number> {
    const t0 = performance.now();
    await fn();
    return Math.round((performance.now() - t0) * 100) / 100;
  }

  close(): void {
    this.loop.disable();
  }
}
