import type { Command } from 'commander';
import { defineArea } from '../../modules/area.js';
import type { OpsFace } from '../ops/index.js';
import type { NotificationsFace } from '../notifications/index.js';
import type { AccountsFace } from '../accounts/index.js';
import { doctorJob } from './doctor-job.js';
import { registerDoctorRoutes } from './doctor-routes.js';

/** The doctor area as the area list sees it (README.md: its invariants). */
export const doctorArea = defineArea({
  name: 'doctor',
  wiring: async () => {
    const { buildDoctor } = await import('./wiring.js');
    // Its job raises alerts through ops and notifications (read at use).
    return (w, uses: Pick<AccountsFace, 'tokenRefresh'> & OpsFace & NotificationsFace) => buildDoctor(w, uses);
  },
  jobs: [doctorJob],
  routes: (api, deps) => registerDoctorRoutes(api, deps),
  cli: [
    {
      name: 'doctor',
      register: (program: Command, cli) =>
        program
          .command('doctor')
          .description(
            'check the live deployment against the operating rules (same backends, Redis eviction, clocks, pool budget, autovacuum, retention order, refresh margin, backups, security); exit 0 ok, 1 warn, 2 fail',
          )
          .option('--json', 'print JSON')
          .action(async (opts: { json?: boolean }, cmd: Command) => {
            process.exitCode = await (await import('./cli-doctor.js')).doctorCommand(await cli.config(cmd), Boolean(opts.json), cli);
          }),
    },
  ],
});
