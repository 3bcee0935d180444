import type { Command } from 'commander';
import { defineArea } from '../../modules/area.js';
import { opsConfig } from './config.js';
import type { NotificationsFace } from '../notifications/index.js';
import type { UsageFace } from '../usage/index.js';
import { opsMetricsJob } from './ops-metrics.js';
import { opsAggregationJob } from './ops-aggregation.js';
import { opsCleanupJob } from './ops-cleanup.js';
import { opsAlertEvaluatorJob } from './ops-alert-evaluator.js';
import { scheduledReportsJob } from './scheduled-reports.js';
import { registerOpsRoutes } from './ops-routes.js';
import { OpsMetrics } from './metrics.js';
import { opsMigrations } from './store/migrations/index.js';

/** The ops area as the area list sees it (README.md: its invariants). */
export const opsArea = defineArea({
  name: 'ops',
  config: opsConfig,
  migrations: opsMigrations,
  wiring: async () => {
    const { buildOps } = await import('./wiring.js');
    // Its jobs send alerts and reports through notifications (read at use); the collector reads the usage writer's queue.
    return (w, uses: UsageFace & NotificationsFace) => buildOps(w, uses);
  },
  jobs: [opsMetricsJob, opsAggregationJob, opsCleanupJob, opsAlertEvaluatorJob, scheduledReportsJob],
  metrics: [OpsMetrics],
  routes: (api, deps) => registerOpsRoutes(api, deps),
  cli: [
    {
      name: 'ops',
      register: (program: Command, cli) =>
        program
          .command('ops')
          .description('the operations plane')
          .command('status')
          .description('print the ops overview: health score and its parts, firing alerts, jobs by health, instances (exit 1 when the score is under 50)')
          .option('--json', 'print JSON')
          .action(async (opts: { json?: boolean }, cmd: Command) => {
            process.exitCode = await (await import('./cli-ops-status.js')).opsStatus(await cli.config(cmd), Boolean(opts.json), cli);
          }),
    },
  ],
});
