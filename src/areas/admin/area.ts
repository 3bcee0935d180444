import type { Command } from 'commander';
import { defineArea } from '../../modules/area.js';
import { adminConfig } from './config.js';
import { sessionCleanupJob } from './session-cleanup.js';
import { registerDeadLetterRoutes } from './dead-letters-routes.js';
import { registerSqlRoutes } from './sql-routes.js';
import { registerSessionRoutes } from './session-routes.js';

/** The admin area as the area list sees it (README.md: its invariants). */
export const adminArea = defineArea({
  name: 'admin',
  config: adminConfig,
  wiring: async () => (await import('./wiring.js')).buildAdmin,
  jobs: [sessionCleanupJob],
  routes(api, deps) {
    registerDeadLetterRoutes(api, deps);
    registerSqlRoutes(api, deps);
    registerSessionRoutes(api, deps);
  },
  cli: [
    {
      name: 'sql',
      register: (program: Command, cli) =>
        program
          .command('sql <query>')
          .description("run one read-only SQL statement against the service's database (embedded mode too, while the service runs)")
          .option('--json', 'print the rows as JSON')
          .action(async (query: string, opts: { json?: boolean }, cmd: Command) => (await import('./cli-sql.js')).sqlCommand(await cli.config(cmd), query, Boolean(opts.json))),
    },
  ],
});
