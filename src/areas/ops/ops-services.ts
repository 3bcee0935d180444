import type { OpsMetricsStore } from './store/ops-metrics.js';
import type { OpsAlerts } from './store/ops-alerts.js';
import type { OpsSilences } from './store/ops-silences.js';
import type { OpsReports } from './store/ops-reports.js';
import type { OpsRetention } from './store/ops-retention.js';
import type { OpsDefaults } from './store/ops-defaults.js';
import type { Logger } from '../../telemetry/logger.js';
import type { MonitorWindows } from '../probes/index.js';
import type { OpsCollector } from './ops-collector.js';
import type { RunRecords } from '../../coordination/run-records.js';
import type { InstanceRetention } from '../../coordination/instance-retention.js';

/** The ops plane's repositories and collector, one key of `Services`. */
export interface Ops {
  series: OpsMetricsStore;
  alerts: OpsAlerts;
  silences: OpsSilences;
  reports: OpsReports;
  retention: OpsRetention;
  /** The default alert rules' record, and every replica's counter rises. */
  defaults?: OpsDefaults;
  installDefaults?(log: Logger): Promise<string[]>;
  /** `job_runs`, pruned by ops_cleanup under `scheduler.run_retention`. */
  runRecords: RunRecords;
  /** `instances` rows of replicas silent past the dead-replica horizon, pruned by ops_cleanup. */
  instances: InstanceRetention;
  collector: OpsCollector;
  /** Monitor probes over a rule's window, for alert rules over `monitor_*` metrics. */
  monitorWindows: MonitorWindows;
}

/** Templates the ops jobs send from the shared outbox. */
export const OPS_TEMPLATES = ['ops_alert', 'ops_report'];
