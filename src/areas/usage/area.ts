import { defineArea } from '../../modules/area.js';
import { UsageMetrics } from './metrics.js';
import { usageConfig } from './config.js';
import { dashboardAggregationJob } from './dashboard-aggregation.js';
import { usageCleanupJob } from './usage-cleanup.js';
import { idempotencyCleanupJob } from './idempotency-cleanup.js';
import { platformQuotaFlusherJob } from './platform-quota-flusher.js';
import { registerUsageRoutes } from './usage-routes.js';

/** The usage area as the area list sees it (README.md: its invariants). */
export const usageArea = defineArea({
  name: 'usage',
  config: usageConfig,
  wiring: async () => (await import('./wiring.js')).buildUsage,
  jobs: [dashboardAggregationJob, usageCleanupJob, idempotencyCleanupJob, platformQuotaFlusherJob],
  metrics: [UsageMetrics],
  routes: (api, deps) => registerUsageRoutes(api, deps),
});
