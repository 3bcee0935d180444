import { wired, type WiringContext } from '../../modules/wiring.js';
import type { UsageFace } from '../usage/index.js';
import { OpsMetricsStore } from './store/ops-metrics.js';
import { OpsAlerts } from './store/ops-alerts.js';
import { OpsSilences } from './store/ops-silences.js';
import { OpsReports } from './store/ops-reports.js';
import { OpsRetention } from './store/ops-retention.js';
import { OpsDefaults } from './store/ops-defaults.js';
import { OpsCollector } from './ops-collector.js';
import { CounterReporter } from './counter-reporter.js';
import { installDefaultRules } from './default-rules.js';
import type { Logger } from '../../telemetry/logger.js';
import { MonitorWindows } from '../probes/index.js';
import { RunRecords } from '../../coordination/run-records.js';
import type { InstanceInfo } from '../../coordination/instance-registry.js';
import { InstanceRetention, deadReplicas } from '../../coordination/instance-retention.js';

/** How often a replica reports its own counters' rises (counter-reporter.ts): well inside one bucket. */
const COUNTER_REPORT_MS = 5000;

/**
 * The ops plane's services. Called while the runtime builds its services: the probes read the
 * runtime and the usage writer lazily, at collection time.
 */
export function buildOps(w: WiringContext, deps: UsageFace) {
  const { db, redis, runtime: rt, clock } = w;
  const series = new OpsMetricsStore(db);
  const defaults = new OpsDefaults(db);
  const collector = new OpsCollector(series, {
    jobHealth: async () => (await rt.jobViews()).map((j) => ({ name: j.name, health: j.health })),
    instances: () => rt.instances(),
    pingDb: () => db.ping(),
    pingRedis: redis ? () => redis.ping() : null,
    usageQueue: () => deps.usageWriter.waiting,
    dbPoolInUse: () => null,
    // The list is the runtime's own (`instances` above): the doctor's rule over it.
    deadReplicas: (list) => deadReplicas(list as InstanceInfo[], clock.now()).length,
    backupEnabled: () => rt.jobs.some((j) => j.name === 'backup' && j.settings.enabled),
    counterRises: (from, to) => defaults.increments(from, to),
  });
  const reporter = new CounterReporter({ registry: w.metrics.registry, store: defaults, instanceId: w.config.instance.id ?? 'unknown', everyMs: COUNTER_REPORT_MS, log: w.log });
  return wired({
    services: {
      ops: {
        series,
        alerts: new OpsAlerts(db),
        silences: new OpsSilences(db),
        reports: new OpsReports(db),
        retention: new OpsRetention(db),
        defaults,
        /** Installs the default rules never installed before (docs/ops.md, "Default rules"). */
        installDefaults: (log: Logger) => installDefaultRules(defaults, w.config, log),
        runRecords: new RunRecords(db),
        instances: new InstanceRetention(db),
        collector,
        monitorWindows: new MonitorWindows(db),
      },
    },
    // After the usage writer's final drain (its rung comes first in the area list), so a spill at exit is reported.
    rungs: [{ name: 'ops counter reporter', stop: () => reporter.stop() }],
    // Only a replica reports (a one-shot command's counters are its own business).
    registered: () => reporter.start(),
  });
}

/** What the ops area's jobs and routes use. */
export type OpsServices = ReturnType<typeof buildOps>['services'];
