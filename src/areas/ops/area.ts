import type { AreaModule } from '../../jobs/area.js';
import { opsMetricsJob } from './ops-metrics.js';
import { opsAggregationJob } from './ops-aggregation.js';
import { opsCleanupJob } from './ops-cleanup.js';
import { opsAlertEvaluatorJob } from './ops-alert-evaluator.js';
import { scheduledReportsJob } from './scheduled-reports.js';
import { registerOpsRoutes } from './ops-routes.js';

/** The ops area as the area list sees it (README.md: its invariants). */
export const opsArea: AreaModule = {
  name: 'ops',
  jobs: [opsMetricsJob, opsAggregationJob, opsCleanupJob, opsAlertEvaluatorJob, scheduledReportsJob],
  routes: (api, deps) => registerOpsRoutes(api, deps),
};
