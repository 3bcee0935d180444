import { join } from 'node:path';
import type { Services } from '../../jobs/services.js';
import { Doctor } from '../doctor/index.js';
import type { WiringContext, Wired } from '../../app/wiring.js';

/** The doctor: it reads the runtime lazily (jobs, instances, the refresh breakers) when it runs. */
export function buildDoctor(w: WiringContext): Wired<Pick<Services, 'doctor'>> {
  const { config, db, redis, clock, runtime: rt } = w;
  const doctor = new Doctor({
    config,
    db,
    redis,
    clock,
    jobs: () => rt.jobs,
    instances: () => rt.instances(),
    breakers: () => rt.services.tokenRefresh.refresher.openBreakers(),
    backupDir: config.backup.storage === 'fs' ? (config.backup.dir ?? join(config.database.data_dir, 'backups')) : null,
  });
  return { services: { doctor }, rungs: [] };
}
