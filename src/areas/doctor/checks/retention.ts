import { formatDuration } from '../../../config/duration.js';
import { CLEANUP_TARGETS } from '../../ops/index.js';
import { Schedule } from '../../../scheduler/schedule.js';
import { combine, fail, ok, warn, type CheckOutcome, type DoctorCheck, type DoctorContext } from '../check.js';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const d = formatDuration;

function period(ctx: DoctorContext, job: string): number {
  const j = ctx.jobs.find((x) => x.name === job);
  return j?.settings.enabled ? new Schedule(j.settings.schedule).periodAt(ctx.nowMs) : 0;
}

/**
 * Retention order: every cleanup keeps its rows longer than the window its aggregation reads
 * (plus one aggregation period), or rows are deleted before they are rolled up: raw usage vs
 * dashboard_aggregation's lookback, ops minute and hourly buckets vs ops_aggregation's overlaps,
 * and the run records vs the longest job cadence (health reads the last run).
 */
export const retentionOrder: DoctorCheck = {
  name: 'retention_order',
  group: 'retention',
  modes: ['cluster', 'embedded'],
  async run(ctx) {
    const { config } = ctx;
    const u = config.usage;
    const days = config.ops.retention_days;
    const findings: CheckOutcome[] = [];
    const pair = (what: string, keepMs: number, keyKeep: string, readsMs: number, reads: string) => {
      if (keepMs <= 0) return;
      if (keepMs <= readsMs)
        findings.push(fail(`${keyKeep} ${d(keepMs)} is not longer than ${reads} (${d(readsMs)}): ${what} are deleted before they are aggregated`, `raise ${keyKeep} above ${d(readsMs)}`));
    };
    pair('raw usage rows', u.retention, 'usage.retention', u.lookback + period(ctx, 'dashboard_aggregation'), 'usage.lookback + one dashboard_aggregation period');
    if (days.ops_metrics_minute !== undefined && days.ops_metrics_minute >= 0) {
      pair('ops minute buckets', days.ops_metrics_minute * DAY, 'ops.retention_days.ops_metrics_minute', 2 * HOUR + period(ctx, 'ops_aggregation'), "ops_aggregation's 2h overlap + one period");
      if (days.ops_metrics_minute === 0)
        findings.push(
          fail(
            'ops.retention_days.ops_metrics_minute is 0: minute buckets are deleted as soon as ops_aggregation covers them, inside the 2h it folds again, so an hour refolded then loses them',
            'set ops.retention_days.ops_metrics_minute to 1 or more days',
          ),
        );
    }
    if (days.ops_metrics_hourly !== undefined && days.ops_metrics_hourly >= 0) {
      pair('ops hourly buckets', days.ops_metrics_hourly * DAY, 'ops.retention_days.ops_metrics_hourly', 2 * DAY + HOUR, "ops_aggregation's 48h daily overlap + 1h");
      if (days.ops_metrics_hourly === 0)
        findings.push(fail('ops.retention_days.ops_metrics_hourly is 0: hourly buckets are deleted before the daily rollup', 'set ops.retention_days.ops_metrics_hourly to 3 or more days'));
    }
    // Health reads each job's newest run: the run records must outlive the longest cadence, twice.
    // One setting: ops.retention_days.job_runs loads as scheduler.run_retention (config/deprecated-keys.ts).
    const runKeep = config.scheduler.run_retention;
    const longest = ctx.jobs.filter((j) => j.settings.enabled).reduce((m, j) => (period(ctx, j.name) > m.ms ? { ms: period(ctx, j.name), name: j.name } : m), { ms: 0, name: '' });
    if (longest.ms && runKeep < 2 * longest.ms) {
      findings.push(
        warn(
          `run records kept ${d(runKeep)} (scheduler.run_retention), less than twice ${longest.name}'s cadence ${d(longest.ms)}: its health loses its last run`,
          `raise scheduler.run_retention above ${d(2 * longest.ms)}`,
        ),
      );
    }
    return combine(
      findings,
      ok(
        `usage.retention ${d(u.retention)} > lookback ${d(u.lookback)}; ops minute ${days.ops_metrics_minute ?? '?'}d, hourly ${days.ops_metrics_hourly ?? '?'}d; run records ${d(runKeep)}`,
        'keep every retention longer than the window its aggregation reads',
      ),
    );
  },
};

/** `ops.retention_days` names only known cleanup targets whose tables exist, and skips none. */
export const opsRetentionTables: DoctorCheck = {
  name: 'ops_retention_tables',
  group: 'retention',
  modes: ['cluster', 'embedded'],
  async run({ config, facts }) {
    const days = config.ops.retention_days;
    const findings: CheckOutcome[] = [];
    const existing = await facts.existingTables(Object.values(CLEANUP_TARGETS).map((t) => t.table));
    for (const [key, v] of Object.entries(days)) {
      const t = CLEANUP_TARGETS[key];
      if (!t)
        findings.push(
          fail(`ops.retention_days.${key} names no cleanup target (nothing is deleted for it)`, `remove ops.retention_days.${key} or rename it to one of ${Object.keys(CLEANUP_TARGETS).join(', ')}`),
        );
      else if (!existing.has(t.table)) findings.push(fail(`ops.retention_days.${key}: table ${t.table} does not exist`, 'run relay-jobs migrate'));
      else if (v < 0) findings.push(warn(`ops.retention_days.${key} is ${v}: ${t.table} is never cleaned`, `set ops.retention_days.${key} to a number of days`));
    }
    for (const key of Object.keys(CLEANUP_TARGETS)) if (!(key in days)) findings.push(warn(`ops.retention_days has no ${key}: its table is never cleaned`, `set ops.retention_days.${key}`));
    return combine(findings, ok(`${Object.keys(days).length} targets, every table present, none skipped`, 'keep ops.retention_days to the documented targets (docs/ops.md)'));
  },
};
