import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** The usage writer, usage cleanup, the rollups and the platform-quota flusher. */
export class UsageMetrics {
  readonly usageWaiting: Gauge;
  readonly usageRunning: Gauge;
  readonly usageWritten: Counter;
  readonly usageDuplicates: Counter;
  readonly usageDropped: Counter;
  readonly usageSyncFallback: Counter;
  readonly usageFailedBatches: Counter;
  readonly usageSpilled: Counter;
  readonly usageBatchSeconds: Histogram;
  readonly usageDeleted: Counter<'kind'>;
  readonly usageCleanupSeconds: Histogram<'kind'>;
  readonly aggregationWatermark: Gauge;
  readonly quotaFlush: Counter<'outcome'>;

  constructor(registry: Registry) {
    const registers = [registry];
    this.usageWaiting = new Gauge({ name: 'relay_jobs_usage_waiting', help: 'Usage events queued for the writer', registers });
    this.usageRunning = new Gauge({ name: 'relay_jobs_usage_running', help: 'Usage events in the batch being written', registers });
    this.usageWritten = new Counter({ name: 'relay_jobs_usage_written_total', help: 'Usage rows stored', registers });
    this.usageDuplicates = new Counter({ name: 'relay_jobs_usage_duplicates_total', help: 'Usage events skipped because their request id was already stored', registers });
    this.usageDropped = new Counter({ name: 'relay_jobs_usage_dropped_total', help: 'Usage events refused by a full queue (usage.overflow: drop)', registers });
    this.usageSyncFallback = new Counter({ name: 'relay_jobs_usage_sync_fallback_total', help: 'Usage events written inline because the queue was full or stopping', registers });
    this.usageFailedBatches = new Counter({ name: 'relay_jobs_usage_failed_batches_total', help: 'Usage batch writes that failed and were retried', registers });
    this.usageSpilled = new Counter({
      name: 'relay_jobs_usage_spilled_total',
      help: 'Usage events written to a spill file at exit because the database could not take them',
      registers,
    });
    this.usageBatchSeconds = new Histogram({
      name: 'relay_jobs_usage_batch_seconds',
      help: 'Duration of usage batch writes',
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
      registers,
    });
    this.usageDeleted = new Counter({
      name: 'relay_jobs_usage_deleted_total',
      help: 'Rows deleted by usage cleanup, by kind (raw_partition, raw_batch, hourly, daily, request_ids, task)',
      labelNames: ['kind'],
      registers,
    });
    this.usageCleanupSeconds = new Histogram({
      name: 'relay_jobs_usage_cleanup_seconds',
      help: 'Duration of usage cleanup rounds and tasks',
      labelNames: ['kind'],
      buckets: [0.1, 1, 10, 60, 300, 1800],
      registers,
    });
    this.aggregationWatermark = new Gauge({ name: 'relay_jobs_usage_aggregation_watermark_seconds', help: 'Hours before this time are covered by the rollups', registers });
    this.quotaFlush = new Counter({
      name: 'relay_jobs_quota_flush_total',
      help: 'Quota counter keys by outcome (dirty, flushed, stale, re_added, lost, errors)',
      labelNames: ['outcome'],
      registers,
    });
  }
}
