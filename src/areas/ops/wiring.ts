import type { WiringContext, Wired } from '../../app/wiring.js';
import type { Services } from '../../jobs/services.js';
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
 * runtime lazily (job health, instances, the usage writer), at collection time.
 */
export function buildOps(w: WiringContext): Wired<Pick<Services, 'ops'>> {
  const { db, redis, runtime: rt } = w;
  const series = new OpsMetricsStore(db);
  const collector = new OpsCollector(series, {
    jobHealth: async () => (await rt.jobViews()).map((j) => ({ name: j.name, health: j.health })),
    instances: () => rt.instances(),
    pingDb: () => db.ping(),
    pingRedis: redis ? () => redis.ping() : null,
    usageQueue: () => rt.services.usageWriter.waiting,
    dbPoolInUse: () => null,
  });
  return {
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
  };
}
