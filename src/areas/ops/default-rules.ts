import type { Config } from '../../config/load.js';
import type { Logger } from '../../telemetry/logger.js';
import type { AlertRule, RuleInput } from './store/ops-alerts.js';
import type { OpsDefaults } from './store/ops-defaults.js';

const MIN = 60_000;
const HOUR = 60 * MIN;

/**
 * A default rule, written as the Prometheus rule it mirrors (deploy/prometheus/alerts.yml): the
 * metric judged, the window its value is folded over, and how long it must hold (`for`).
 */
export interface DefaultRule {
  key: string;
  name: string;
  metric: string;
  operator: AlertRule['operator'];
  threshold: number;
  windowMs: number;
  forMs: number;
  severity: AlertRule['severity'];
  /** The Prometheus alert it mirrors. */
  mirrors: string;
}

/**
 * The rule set a new deployment starts with (docs/ops.md, "Default rules"). Keys are stable: the
 * record of what was installed is by key, so renaming a rule here would not install it again.
 */
export const DEFAULT_RULES: readonly DefaultRule[] = [
  { key: 'job_stuck', name: 'job stuck', metric: 'jobs_stuck', operator: '>', threshold: 0, windowMs: MIN, forMs: 2 * MIN, severity: 'critical', mirrors: 'RelayJobsJobStuck' },
  { key: 'job_failing', name: 'job failing', metric: 'jobs_failing', operator: '>', threshold: 0, windowMs: MIN, forMs: 5 * MIN, severity: 'warning', mirrors: 'RelayJobsJobFailing' },
  {
    key: 'refresh_failures',
    name: 'token refresh failing',
    metric: 'accounts_refresh_failing_ratio',
    operator: '>',
    threshold: 0.05,
    windowMs: MIN,
    forMs: 10 * MIN,
    severity: 'warning',
    mirrors: 'RelayJobsRefreshFailures',
  },
  {
    key: 'scheduler_outbox_lag',
    name: 'scheduler outbox lag',
    metric: 'scheduler_outbox_lag_seconds',
    operator: '>',
    threshold: 300,
    windowMs: MIN,
    forMs: 5 * MIN,
    severity: 'warning',
    mirrors: 'RelayJobsSchedulerOutboxLag',
  },
  { key: 'usage_dropped', name: 'usage events dropped', metric: 'usage_dropped', operator: '>', threshold: 0, windowMs: 5 * MIN, forMs: 0, severity: 'critical', mirrors: 'RelayJobsUsageDropping' },
  { key: 'usage_spilled', name: 'usage events spilled', metric: 'usage_spilled', operator: '>', threshold: 0, windowMs: HOUR, forMs: 0, severity: 'critical', mirrors: 'RelayJobsUsageDropping' },
  {
    key: 'quota_flush_errors',
    name: 'quota flush errors',
    metric: 'quota_flush_errors',
    operator: '>',
    threshold: 0,
    windowMs: 5 * MIN,
    forMs: 0,
    severity: 'critical',
    mirrors: 'RelayJobsQuotaFlusherLosingKeys',
  },
  {
    key: 'backup_age',
    name: 'backup too old',
    metric: 'backup_age_seconds',
    operator: '>',
    threshold: 36 * 3600,
    windowMs: MIN,
    forMs: 10 * MIN,
    severity: 'warning',
    mirrors: 'RelayJobsBackupTooOld',
  },
  { key: 'replica_dead', name: 'replica gone', metric: 'replicas_dead', operator: '>', threshold: 0, windowMs: MIN, forMs: 5 * MIN, severity: 'warning', mirrors: 'RelayJobsReplicaDead' },
];

/**
 * A default as a stored rule under this configuration: the window is at least one bucket, and
 * `for` becomes the number of evaluations in a row (the streak moves at most once per bucket and
 * once per evaluation, so one step is the longer of `ops.bucket` and `ops.alert_interval`).
 */
export function defaultRuleInput(d: DefaultRule, config: Config): RuleInput {
  const step = Math.max(config.ops.bucket, config.ops.alert_interval);
  const windowMs = Math.max(d.windowMs, Math.ceil(config.ops.bucket / 1000) * 1000);
  return {
    name: d.name,
    metric: d.metric,
    operator: d.operator,
    threshold: d.threshold,
    window_seconds: windowMs / 1000,
    sustained: Math.min(10_000, Math.max(1, Math.ceil(d.forMs / step))),
    severity: d.severity,
    cooldown_seconds: 0,
    labels: { origin: 'default', mirrors: d.mirrors },
    selector: null,
    enabled: true,
    notify: true,
  };
}

/**
 * Installs the defaults never installed before (the ops_alert_evaluator's start on each replica).
 * A failure is logged, not thrown: the service runs without them and the next start tries again.
 */
export async function installDefaultRules(defaults: OpsDefaults, config: Config, log: Logger): Promise<string[]> {
  try {
    const keys = await defaults.install(DEFAULT_RULES.map((d) => ({ key: d.key, rule: defaultRuleInput(d, config) })));
    if (keys.length) log.info({ rules: keys }, 'default alert rules installed (docs/ops.md; edit or delete them under /api/v1/ops/alert-rules)');
    else log.debug('default alert rules: every one was installed before (a deleted one stays deleted)');
    return keys;
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'default alert rules not installed; the next start tries again');
    return [];
  }
}
