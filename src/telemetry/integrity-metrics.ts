import { Counter, Gauge, type Registry } from 'prom-client';

/** Poison rows set aside, and the backlog signals of pipelines that must never silently stall. */
export class IntegrityMetrics {
  readonly deadLetters: Counter<'source'>;
  readonly quotaDirtyKeys: Gauge;

  constructor(registry: Registry) {
    this.deadLetters = new Counter({
      name: 'relay_jobs_dead_letters_total',
      help: 'Rows the database refused for their content, set aside in dead_letters instead of being retried, by source (usage, usage_spill, quota_flush)',
      labelNames: ['source'],
      registers: [registry],
    });
    this.quotaDirtyKeys = new Gauge({
      name: 'relay_jobs_quota_dirty_keys',
      help: 'Quota counters changed since their last flush to PostgreSQL (the dirty set), as seen by the last flush round',
      registers: [registry],
    });
  }
}
