import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { IntegrityMetrics } from './integrity-metrics.js';

/** An area's group of metrics (its metrics.ts): a class whose constructor registers them on a registry. */
export type MetricGroup<T extends object = object> = new (registry: Registry) => T;

/**
 * Every metric the runtime exposes on /metrics, on a registry of its own (several runtimes in one
 * test process never collide). Names: `relay_jobs_<area>_<what>`.
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly groups = new Map<MetricGroup, object>();

  /**
   * An area's metric group on this registry, made once: the runtime makes every listed area's
   * at wiring (AreaModule.metrics), so /metrics shows them from the start.
   */
  group<T extends object>(g: MetricGroup<T>): T {
    let m = this.groups.get(g) as T | undefined;
    if (!m) this.groups.set(g, (m = new g(this.registry)));
    return m;
  }

  readonly roundsTotal = new Counter({ name: 'relay_jobs_rounds_total', help: 'Rounds by outcome', labelNames: ['job', 'status', 'lock_backend'], registers: [this.registry] });
  readonly roundDuration = new Histogram({
    name: 'relay_jobs_round_duration_seconds',
    help: 'Duration of rounds that ran',
    labelNames: ['job'],
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 1800],
    registers: [this.registry],
  });
  readonly lockAcquire = new Counter({
    name: 'relay_jobs_lock_acquire_total',
    help: 'Leader lock attempts by backend and result',
    labelNames: ['job', 'backend', 'result'],
    registers: [this.registry],
  });
  readonly lockFallback = new Counter({
    name: 'relay_jobs_lock_fallback_total',
    help: 'Rounds that fell back to the PostgreSQL advisory lock after a Redis error',
    labelNames: ['job'],
    registers: [this.registry],
  });
  readonly leaseLost = new Counter({ name: 'relay_jobs_lease_lost_total', help: 'Rounds aborted because their lease could not be kept', labelNames: ['job'], registers: [this.registry] });
  readonly lockRenewFailures = new Counter({
    name: 'relay_jobs_lock_renew_failures_total',
    help: 'Leader-lock renewals that failed (the PostgreSQL lease stays authoritative)',
    labelNames: ['job'],
    registers: [this.registry],
  });
  readonly running = new Gauge({ name: 'relay_jobs_round_running', help: '1 while this instance runs a round of the job', labelNames: ['job'], registers: [this.registry] });
  // With roundStarted, lets one alert rule follow every job's own timeout (deploy/prometheus: RelayJobsLockHeldTooLong).
  readonly jobTimeout = new Gauge({ name: 'relay_jobs_job_timeout_seconds', help: "The job's own timeout (jobs.<name>.timeout) on this instance", labelNames: ['job'], registers: [this.registry] });
  readonly roundStarted = new Gauge({
    name: 'relay_jobs_round_started_timestamp_seconds',
    help: "When this instance's running round of the job started; 0 while none runs",
    labelNames: ['job'],
    registers: [this.registry],
  });
  readonly lastSuccess = new Gauge({
    name: 'relay_jobs_job_last_success_timestamp_seconds',
    help: 'When this instance last finished the job ok or no_work',
    labelNames: ['job'],
    registers: [this.registry],
  });
  /** Set by the instance heartbeat: refreshes `jobHealth` when the metrics are read (cached), so a replica nobody scrapes reads nothing for it. */
  jobHealthRefresh: (() => Promise<void>) | null = null;
  readonly jobHealth = new Gauge({
    name: 'relay_jobs_job_health',
    help: "1 for the job's current cluster-wide health state",
    labelNames: ['job', 'health'],
    registers: [this.registry],
    collect: async () => {
      await this.jobHealthRefresh?.();
    },
  });
  readonly replicasDead = new Gauge({
    name: 'relay_jobs_replicas_dead',
    help: 'Replicas that stopped beating without a clean shutdown in the last 7 days (SIGKILL, OOM, a lost host), as this replica reads the instances table',
    registers: [this.registry],
  });
  readonly configDrift = new Gauge({
    name: 'relay_jobs_config_drift',
    help: "Live replicas whose schedule of the job (cadence or cron, time zone, offset, enabled, timeout, lock TTL) is not the cluster's adopted one, as this replica's last check read it",
    labelNames: ['job'],
    registers: [this.registry],
  });
  readonly clockSkew = new Gauge({ name: 'relay_jobs_clock_skew_seconds', help: "This replica's clock minus the database clock", registers: [this.registry] });
  readonly instanceConflict = new Gauge({ name: 'relay_jobs_instance_id_conflict', help: '1 while another live process uses this instance id', registers: [this.registry] });
  readonly dependencyUp = new Gauge({ name: 'relay_jobs_dependency_up', help: '1 when the dependency answered its last probe', labelNames: ['dependency'], registers: [this.registry] });
  readonly doctorCheck = new Gauge({
    name: 'relay_jobs_doctor_check',
    help: "1 for each doctor check's status (ok, warn, fail) at the newest doctor run on this replica",
    labelNames: ['check', 'status'],
    registers: [this.registry],
  });
  readonly ready = new Gauge({ name: 'relay_jobs_ready', help: '1 while /readyz answers 200', registers: [this.registry] });

  readonly loopTicks = new Counter({
    name: 'relay_jobs_loop_ticks_total',
    help: 'Ticks of the long-running loops by loop and outcome (ok, no_work, failed)',
    labelNames: ['loop', 'outcome'],
    registers: [this.registry],
  });
  readonly wakeups = new Counter({ name: 'relay_jobs_wakeups_total', help: 'Wake-up notifications received by channel', labelNames: ['channel'], registers: [this.registry] });
  readonly wakeListenerUp = new Gauge({ name: 'relay_jobs_wakeup_listener_up', help: '1 while this replica LISTENs for wake-ups', registers: [this.registry] });

  readonly poolWaiting = new Gauge({ name: 'relay_jobs_pool_waiting', help: 'Tasks queued in a worker pool', labelNames: ['pool'], registers: [this.registry] });
  readonly poolRunning = new Gauge({ name: 'relay_jobs_pool_running', help: 'Tasks running in a worker pool', labelNames: ['pool'], registers: [this.registry] });
  readonly poolDropped = new Counter({ name: 'relay_jobs_pool_dropped_total', help: 'Tasks dropped by a full pool (overflow policy drop)', labelNames: ['pool'], registers: [this.registry] });
  readonly poolSyncFallback = new Counter({
    name: 'relay_jobs_pool_sync_fallback_total',
    help: 'Tasks run inline because the pool was full or stopped',
    labelNames: ['pool'],
    registers: [this.registry],
  });
  readonly poolFailed = new Counter({ name: 'relay_jobs_pool_failed_total', help: 'Tasks that threw', labelNames: ['pool'], registers: [this.registry] });

  readonly integrity = new IntegrityMetrics(this.registry);

  constructor(opts: { defaultMetrics?: boolean } = {}) {
    if (opts.defaultMetrics) {
      // Node's standard names, unprefixed (process_cpu_seconds_total, nodejs_heap_size_used_bytes, …),
      // so the usual Node.js dashboards match. prom-client's three `nodejs_active_*_total` gauges break
      // the Prometheus naming rules (`promtool check metrics`); `sum(nodejs_active_handles)` and the
      // other per-type gauges it also exports give the same totals.
      collectDefaultMetrics({ register: this.registry });
      for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) this.registry.removeSingleMetric(name);
    }
  }
}
