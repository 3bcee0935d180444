import { Counter, Gauge, type Registry } from 'prom-client';

/** The scheduler snapshot and its outbox (`relay_jobs_scheduler_*`). */
export class SchedulerMetrics {
  readonly outboxLag: Gauge;
  readonly outboxBacklog: Gauge;
  readonly applied: Counter;
  readonly rebuilds: Counter;
  readonly snapshotAge: Gauge;
  readonly snapshotEpoch: Gauge;
  readonly reads: Counter;
  readonly repairs: Counter;
  readonly watermarkRetries: Counter;
  readonly pollFailures: Counter;

  constructor(registry: Registry) {
    const registers = [registry];
    this.outboxLag = new Gauge({ name: 'relay_jobs_scheduler_outbox_lag_seconds', help: 'Age of the oldest unconsumed scheduler outbox event (0 when empty)', registers });
    this.outboxBacklog = new Gauge({ name: 'relay_jobs_scheduler_outbox_backlog', help: 'Unconsumed scheduler outbox events', registers });
    this.applied = new Counter({ name: 'relay_jobs_scheduler_outbox_applied_total', help: 'Outbox events applied to the snapshot by this replica, by event type', labelNames: ['type'], registers });
    this.rebuilds = new Counter({
      name: 'relay_jobs_scheduler_snapshot_rebuilds_total',
      help: 'Full snapshot rebuilds by reason (periodic, lag, backlog, redis_lost, memory_start, manual) and result (ok, failed, requested)',
      labelNames: ['reason', 'result'],
      registers,
    });
    this.snapshotAge = new Gauge({ name: 'relay_jobs_scheduler_snapshot_age_seconds', help: 'Time since a snapshot bucket was last written or rebuilt', labelNames: ['bucket'], registers });
    this.snapshotEpoch = new Gauge({ name: 'relay_jobs_scheduler_snapshot_epoch', help: 'Highest account version a snapshot bucket holds', labelNames: ['bucket'], registers });
    this.reads = new Counter({ name: 'relay_jobs_scheduler_snapshot_reads_total', help: 'Scheduler account reads by source (snapshot, postgres)', labelNames: ['source'], registers });
    this.repairs = new Counter({
      name: 'relay_jobs_scheduler_snapshot_repairs_total',
      help: 'Buckets rebuilt from PostgreSQL after a read missed, by what the read found (missing, incomplete, corrupt)',
      labelNames: ['found'],
      registers,
    });
    this.watermarkRetries = new Counter({ name: 'relay_jobs_scheduler_outbox_ack_retries_total', help: 'Watermark/acknowledgement writes retried after a failure', registers });
    this.pollFailures = new Counter({ name: 'relay_jobs_scheduler_outbox_poll_failures_total', help: 'Outbox polls that failed (the batch is released and retried)', registers });
  }
}
