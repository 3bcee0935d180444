import { wired, type WiringContext } from '../../jobs/wiring.js';
import type { UsageFace } from '../usage/index.js';
import { OpsMetricsStore } from './store/ops-metrics.js';
import { OpsAlerts } from './store/ops-alerts.js';
import { OpsSilences } from './store/ops-silences.js';
import { OpsReports } from './store/ops-reports.js';
import { OpsRetention } from './store/ops-retention.js';
import { OpsCollector } from './ops-collector.js';
import { MonitorWindows } from '../probes/index.js';
import { RunRecords } from '../../coordination/run-records.js';

/**
 * The ops plane's services. Called while the runtime builds its services: the probes read the
 * runtime and the usage writer lazily, at collection time.
 */
export function buildOps(w: WiringContext, deps: UsageFace) {
  const { db, redis, runtime: rt } = w;
  const series = new OpsMetricsStore(db);
  const collector = new OpsCollector(series, {
    jobHealth: async () => (await rt.jobViews()).map((j) => ({ name: j.name, health: j.health })),
    instances: () => rt.instances(),
    pingDb: () => db.ping(),
    pingRedis: redis ? () => redis.ping() : null,
    usageQueue: () => deps.usageWriter.waiting,
    dbPoolInUse: () => null,
  });
  return wired({
    services: {
      ops: {
        series,
        alerts: new OpsAlerts(db),
        silences: new OpsSilences(db),
        reports: new OpsReports(db),
        retention: new OpsRetention(db),
        runRecords: new RunRecords(db),
        collector,
        monitorWindows: new MonitorWindows(db),
      },
    },
    rungs: [],
  });
}

/** What the ops area's jobs and routes use. */
export type OpsServices = ReturnType<typeof buildOps>['services'];
