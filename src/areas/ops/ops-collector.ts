import type { OpsMetricsStore, SeriesValues } from './store/ops-metrics.js';
import type { ProcessFigures } from '../../telemetry/process-sampler.js';
import { monotonic } from '../../time/wall.js';

/** The series summed from every replica's own counters (counter-reporter.ts writes them). */
export const COUNTER_SERIES = ['usage_dropped', 'usage_spilled', 'quota_flush_errors'] as const;

/** A replica as the collector reads it: `process` is null unless its newest beat is fresh. */
export interface CollectedInstance {
  instance_id: string;
  alive: boolean;
  heartbeat_at: Date;
  clock_skew_ms: number | null;
  version: string;
  process: ProcessFigures | null;
  process_at: Date | null;
}

/** What the collector reads outside the database tables (the runtime supplies these). */
export interface OpsProbes {
  jobHealth(): Promise<Array<{ name: string; health: string }>>;
  instances(): Promise<CollectedInstance[]>;
  pingDb(): Promise<void>;
  pingRedis: (() => Promise<unknown>) | null;
  usageQueue(): number;
  dbPoolInUse(): number | null;
  /** Replicas that stopped beating without a clean shutdown (the rule of the doctor's dead_replicas and relay_jobs_replicas_dead). */
  deadReplicas?(list: CollectedInstance[]): number;
  /** Whether the backup job is enabled here: when it is off, the backup's age is not judged (null). */
  backupEnabled?(): boolean;
  /** Every replica's counter rises reported in [from, to) (ops_counter_increments). */
  counterRises?(from: Date, to: Date): Promise<Record<string, number>>;
}

/** One replica's entry in a bucket row's `instances`: liveness, and its figures when fresh. */
export interface BucketInstance {
  instance_id: string;
  alive: boolean;
  heartbeat_at: string;
  clock_skew_ms: number | null;
  version: string;
  process: ProcessFigures | null;
  process_at: string | null;
}

/** A replica as a bucket row and the overview show it: its figures only while it is alive. */
export function bucketInstance(i: CollectedInstance): BucketInstance {
  return {
    instance_id: i.instance_id,
    alive: i.alive,
    heartbeat_at: i.heartbeat_at.toISOString(),
    clock_skew_ms: i.clock_skew_ms,
    version: i.version,
    process: i.alive ? i.process : null,
    process_at: i.process_at?.toISOString() ?? null,
  };
}

/** Cluster-wide process series: the worst live replica (max), from fresh heartbeat figures only. */
export function processSeries(instances: CollectedInstance[]): SeriesValues {
  const fresh = instances.filter((i) => i.alive && i.process).map((i) => i.process!);
  const worst = (pick: (p: ProcessFigures) => number | null) => {
    const v = fresh.map(pick).filter((x): x is number => typeof x === 'number' && Number.isFinite(x));
    return v.length ? Math.max(...v) : null;
  };
  return {
    event_loop_lag_ms: worst((p) => p.event_loop_lag_p99_ms),
    rss_bytes: worst((p) => p.rss_bytes),
    heap_used_bytes: worst((p) => p.heap_used_bytes),
    cpu_percent: worst((p) => p.cpu_percent),
  };
}

/**
 * Gathers one bucket's series: usage of the bucket (an index range read), state counts, job
 * health, outbox backlog, dependency round trips, and every live replica's process figures from
 * its heartbeat. A series it could not read is null (unknown), never zero; a bucket without
 * traffic is zeroes.
 */
export class OpsCollector {
  constructor(
    private readonly store: OpsMetricsStore,
    private readonly probes: OpsProbes,
  ) {}

  async collect(from: Date, to: Date): Promise<{ metrics: SeriesValues; instances: BucketInstance[]; errors: string[] }> {
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
    await part('scheduler_outbox', () => this.store.schedulerOutboxLag());
    // Optional probes (a bench's collector has none): their series stay unknown.
    if (this.probes.backupEnabled) await part('backups', async () => ({ backup_age_seconds: this.probes.backupEnabled!() ? await this.store.backupAge() : null }));
    if (this.probes.counterRises)
      await part('counters', async () => {
        const rises = await this.probes.counterRises!(from, to);
        return Object.fromEntries(COUNTER_SERIES.map((name) => [name, rises[name] ?? 0]));
      });
    await part('jobs', async () => {
      const jobs = await this.probes.jobHealth();
      const count = (h: string) => jobs.filter((j) => j.health === h).length;
      return { jobs_healthy: count('healthy') + count('idle'), jobs_late: count('late'), jobs_stuck: count('stuck'), jobs_failing: count('failing') };
    });
    await part('db', async () => ({ db_latency_ms: await this.time(() => this.probes.pingDb()), db_pool_in_use: this.probes.dbPoolInUse() }));
    if (this.probes.pingRedis) await part('redis', async () => ({ redis_latency_ms: await this.time(() => this.probes.pingRedis!()) }));
    let instances: BucketInstance[] = [];
    await part('instances', async () => {
      const list = await this.probes.instances();
      instances = list.map(bucketInstance);
      return { instances_alive: list.filter((i) => i.alive).length, replicas_dead: this.probes.deadReplicas?.(list) ?? null, ...processSeries(list) };
    });
    metrics.usage_queue = this.probes.usageQueue();
    return { metrics, instances, errors };
  }

  private async time(fn: () => Promise<unknown>): Promise<number> {
    const t0 = monotonic();
    await fn();
    return Math.round((monotonic() - t0) * 100) / 100;
  }
}
