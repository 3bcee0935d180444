import { Counter, Gauge, type Registry } from 'prom-client';

/** The gateway change stream (`relay_jobs_change_stream_*`). */
export class ChangeStreamMetrics {
  readonly published: Counter;
  readonly failures: Counter;
  readonly backlog: Gauge;
  readonly lag: Gauge;

  constructor(registry: Registry) {
    const registers = [registry];
    this.published = new Counter({ name: 'relay_jobs_change_stream_published_total', help: 'Change events published by this replica (XADD in cluster mode, sequenced in embedded mode)', registers });
    this.failures = new Counter({ name: 'relay_jobs_change_stream_publish_failures_total', help: 'Publish passes that failed (the batch stays unpublished and is sent again)', registers });
    this.backlog = new Gauge({ name: 'relay_jobs_change_stream_backlog', help: 'Change events not yet published', registers });
    this.lag = new Gauge({ name: 'relay_jobs_change_stream_lag_seconds', help: 'Age of the oldest unpublished change event (0 when none)', registers });
  }
}
