import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** Backups: outcomes, duration, size, and how old the newest good backup of each trigger is. */
export class BackupMetrics {
  private readonly lastGood = new Map<string, number>();
  readonly finished: Counter<'trigger' | 'state'>;
  readonly duration: Histogram<'trigger'>;
  readonly size: Gauge<'trigger'>;
  readonly lastSuccessAge: Gauge<'trigger'>;
  readonly pruned: Counter;
  readonly abandoned: Counter;

  constructor(registry: Registry, now: () => number = Date.now) {
    const registers = [registry];
    this.finished = new Counter({
      name: 'relay_jobs_backup_finished_total',
      help: 'Backups finished by this instance, by trigger and final state (verified, completed, verify_failed, failed)',
      labelNames: ['trigger', 'state'],
      registers,
    });
    this.duration = new Histogram({
      name: 'relay_jobs_backup_duration_seconds',
      help: 'Duration of backups (dump, upload and verification)',
      labelNames: ['trigger'],
      buckets: [1, 5, 15, 60, 300, 900, 1800, 3600, 10800],
      registers,
    });
    this.size = new Gauge({ name: 'relay_jobs_backup_size_bytes', help: 'Stored size of the newest good backup this instance made', labelNames: ['trigger'], registers });
    const lastGood = this.lastGood;
    this.lastSuccessAge = new Gauge({
      name: 'relay_jobs_backup_last_success_age_seconds',
      help: 'Seconds since the newest good (verified, or completed when verification is off) backup of each trigger finished',
      labelNames: ['trigger'],
      registers,
      collect() {
        for (const [trigger, at] of lastGood) this.set({ trigger }, Math.max(0, (now() - at) / 1000));
      },
    });
    this.pruned = new Counter({ name: 'relay_jobs_backup_pruned_total', help: 'Backups deleted by retention', registers });
    this.abandoned = new Counter({ name: 'relay_jobs_backup_abandoned_total', help: 'Running backups marked failed after their lease expired (partial objects removed)', registers });
  }

  goodAt(trigger: string, at: number): void {
    if ((this.lastGood.get(trigger) ?? 0) < at) this.lastGood.set(trigger, at);
  }
}
