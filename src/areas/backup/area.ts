import type { AreaModule } from '../../jobs/area.js';
import { backupJob } from './backup.js';
import { registerBackupRoutes } from './backups-routes.js';

/** The backup area as the area list sees it (README.md: its invariants). */
export const backupArea: AreaModule = {
  name: 'backup',
  jobs: [backupJob],
  routes: (api, deps) => registerBackupRoutes(api, deps),
};
