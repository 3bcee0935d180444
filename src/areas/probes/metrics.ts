import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** Channel monitors and scheduled account tests (jobs channel_monitor, scheduled_account_test). */
export class ProbesMetrics {
  readonly probes: Counter<'result' | 'class'>;
  readonly lateness: Histogram;
  readonly late: Counter;
  readonly missed: Counter;
  readonly saturated: Counter;
  readonly fencedOut: Counter;
  readonly abandoned: Counter;
  readonly inFlight: Gauge;
  readonly due: Gauge;
  readonly overdue: Gauge;
  readonly claimErrors: Counter;
  readonly tests: Counter<'result' | 'class'>;
  readonly recovered: Counter;

  constructor(registry: Registry) {
    const registers = [registry];
    this.probes = new Counter({ name: 'relay_jobs_probes_total', help: 'Channel-monitor probes by result (ok, failed) and error class', labelNames: ['result', 'class'], registers });
    this.lateness = new Histogram({ name: 'relay_jobs_probe_lateness_seconds', help: "From a probe's due time to its start", buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 15, 60], registers });
    this.late = new Counter({ name: 'relay_jobs_probes_late_total', help: 'Probes that started later than channel_monitor.late_after after their due time', registers });
    this.missed = new Counter({ name: 'relay_jobs_probe_missed_intervals_total', help: 'Whole intervals that passed with no probe (recorded at the next claim, never dropped silently)', registers });
    this.saturated = new Counter({
      name: 'relay_jobs_probe_pool_overflow_total',
      help: "Claim passes skipped because this replica's probe pool was full (due monitors wait for a free slot here or elsewhere)",
      registers,
    });
    this.fencedOut = new Counter({ name: 'relay_jobs_probes_fenced_out_total', help: 'Probe results that arrived after their lease had passed to another claim', registers });
    this.abandoned = new Counter({
      name: 'relay_jobs_probes_abandoned_total',
      help: 'Probes not sent because their lease ran out before they could start (a stalled replica); the monitor is due again when the lease ends',
      registers,
    });
    this.inFlight = new Gauge({ name: 'relay_jobs_probe_pool_in_flight', help: "Probes running in this replica's pool", registers });
    this.due = new Gauge({ name: 'relay_jobs_monitors_due', help: 'Enabled monitors due now (cluster-wide, read by channel_monitor rounds)', registers });
    this.overdue = new Gauge({ name: 'relay_jobs_monitors_overdue', help: 'Enabled monitors due for longer than channel_monitor.late_after', registers });
    this.claimErrors = new Counter({ name: 'relay_jobs_probe_claim_errors_total', help: 'Claim or result-write passes that failed (retried at the next poll)', labelNames: ['what'], registers });
    this.tests = new Counter({
      name: 'relay_jobs_account_tests_total',
      help: 'Scheduled account tests by result (ok, failed, fenced_out, abandoned) and error class',
      labelNames: ['result', 'class'],
      registers,
    });
    this.recovered = new Counter({ name: 'relay_jobs_accounts_auto_recovered_total', help: 'Accounts whose error or temporary unschedulable state a passing scheduled test cleared', registers });
  }
}
