import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** The ops plane's own metrics: collector, alert evaluator, reports, cleanup. */
export class OpsMetrics {
  readonly collectSeconds: Histogram;
  readonly collectErrors: Counter;
  readonly alertsFiring: Gauge;
  readonly alertTransitions: Counter;
  readonly evaluateSeconds: Histogram;
  readonly reportsQueued: Counter;
  readonly cleanupDeleted: Counter;
  readonly cleanupFailures: Counter;
  readonly outboxLag: Gauge;
  readonly notificationBacklog: Gauge;
  readonly notificationRateLimited: Gauge;
  readonly lastBucket: Gauge;

  constructor(registry: Registry) {
    const registers = [registry];
    this.collectSeconds = new Histogram({ name: 'relay_jobs_ops_collect_seconds', help: 'Duration of an ops_metrics collection', buckets: [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5], registers });
    this.collectErrors = new Counter({ name: 'relay_jobs_ops_collect_errors_total', help: 'Series an ops_metrics round could not read (stored as unknown)', registers });
    this.alertsFiring = new Gauge({ name: 'relay_jobs_ops_alerts_firing', help: 'Alert rules firing after the last evaluation on this replica', registers });
    this.alertTransitions = new Counter({ name: 'relay_jobs_ops_alert_transitions_total', help: 'Alert transitions stored, by transition (fire, resolve)', labelNames: ['transition'], registers });
    this.evaluateSeconds = new Histogram({
      name: 'relay_jobs_ops_alert_evaluation_seconds',
      help: 'Duration of an ops_alert_evaluator round',
      buckets: [0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
      registers,
    });
    this.reportsQueued = new Counter({ name: 'relay_jobs_ops_reports_total', help: 'Report occurrences recorded, by outcome (queued, skipped_empty)', labelNames: ['outcome'], registers });
    this.cleanupDeleted = new Counter({ name: 'relay_jobs_ops_cleanup_deleted_total', help: 'Rows deleted by ops_cleanup, by target', labelNames: ['target'], registers });
    this.cleanupFailures = new Counter({ name: 'relay_jobs_ops_cleanup_failures_total', help: 'ops_cleanup targets that failed in a round', labelNames: ['target'], registers });
    this.outboxLag = new Gauge({ name: 'relay_jobs_ops_outbox_lag_seconds', help: 'Age of the oldest pending notification, at the last collection on this replica', registers });
    this.notificationBacklog = new Gauge({ name: 'relay_jobs_ops_notification_backlog', help: 'Pending and sending notifications, at the last collection on this replica', registers });
    this.notificationRateLimited = new Gauge({
      name: 'relay_jobs_ops_notification_rate_limited',
      help: "Pending notifications waiting for their channel's cluster-wide rate limit, at the last collection on this replica",
      registers,
    });
    this.lastBucket = new Gauge({ name: 'relay_jobs_ops_last_bucket_timestamp_seconds', help: 'Start of the last ops bucket this replica collected', registers });
  }
}
