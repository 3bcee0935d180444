import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/**
 * Every metric the runtime exposes on /metrics, on a registry of its own (several runtimes in one
 * test process never collide). Names: `relay_jobs_<area>_<what>`.
 */
export class Metrics {
  readonly registry = new Registry();

  readonly roundsTotal = new Counter({ name: 'relay_jobs_rounds_total', help: 'Rounds by outcome', labelNames: ['job', 'status', 'lock_backend'], registers: [this.registry] });
  readonly roundDuration = new Histogram({
    name: 'relay_jobs_round_duration_seconds',
    help: 'Duration of rounds that ran',
    labelNames: ['job'],
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 1800],
    registers: [this.registry],
  });
  readonly lockAcquire = new Counter({ name: 'relay_jobs_lock_acquire_total', help: 'Leader lock attempts by backend and result', labelNames: ['job', 'backend', 'result'], registers: [this.registry] });
  readonly lockFallback = new Counter({ name: 'relay_jobs_lock_fallback_total', help: 'Rounds that fell back to the PostgreSQL advisory lock after a Redis error', labelNames: ['job'], registers: [this.registry] });
  readonly leaseLost = new Counter({ name: 'relay_jobs_lease_lost_total', help: 'Rounds aborted because their lease could not be kept', labelNames: ['job'], registers: [this.registry] });
  readonly lockRenewFailures = new Counter({ name: 'relay_jobs_lock_renew_failures_total', help: 'Leader-lock renewals that failed (the PostgreSQL lease stays authoritative)', labelNames: ['job'], registers: [this.registry] });
  readonly running = new Gauge({ name: 'relay_jobs_round_running', help: '1 while this instance runs a round of the job', labelNames: ['job'], registers: [this.registry] });
  readonly lastSuccess = new Gauge({ name: 'relay_jobs_job_last_success_timestamp_seconds', help: 'When this instance last finished the job ok or no_work', labelNames: ['job'], registers: [this.registry] });
  readonly jobHealth = new Gauge({ name: 'relay_jobs_job_health', help: '1 for the job\'s current cluster-wide health state', labelNames: ['job', 'health'], registers: [this.registry] });
  readonly clockSkew = new Gauge({ name: 'relay_jobs_clock_skew_seconds', help: 'This replica\'s clock minus the database clock', registers: [this.registry] });
  readonly instanceConflict = new Gauge({ name: 'relay_jobs_instance_id_conflict', help: '1 while another live process uses this instance id', registers: [this.registry] });
  readonly dependencyUp = new Gauge({ name: 'relay_jobs_dependency_up', help: '1 when the dependency answered its last probe', labelNames: ['dependency'], registers: [this.registry] });
  readonly ready = new Gauge({ name: 'relay_jobs_ready', help: '1 while /readyz answers 200', registers: [this.registry] });

  readonly poolWaiting = new Gauge({ name: 'relay_jobs_pool_waiting', help: 'Tasks queued in a worker pool', labelNames: ['pool'], registers: [this.registry] });
  readonly poolRunning = new Gauge({ name: 'relay_jobs_pool_running', help: 'Tasks running in a worker pool', labelNames: ['pool'], registers: [this.registry] });
  readonly poolDropped = new Counter({ name: 'relay_jobs_pool_dropped_total', help: 'Tasks dropped by a full pool (overflow policy drop)', labelNames: ['pool'], registers: [this.registry] });
  readonly poolSyncFallback = new Counter({ name: 'relay_jobs_pool_sync_fallback_total', help: 'Tasks run inline because the pool was full or stopped', labelNames: ['pool'], registers: [this.registry] });
  readonly poolFailed = new Counter({ name: 'relay_jobs_pool_failed_total', help: 'Tasks that threw', labelNames: ['pool'], registers: [this.registry] });

  constructor(opts: { defaultMetrics?: boolean } = {}) {
    if (opts.defaultMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'relay_jobs_process_' });
  }
}
