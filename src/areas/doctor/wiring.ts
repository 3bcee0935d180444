import { join } from 'node:path';
import { Doctor } from './index.js';
import { wired, type WiringContext } from '../../modules/wiring.js';
import type { AccountsFace } from '../accounts/index.js';

/** The doctor: it reads the runtime and the refresh breakers lazily when it runs. */
export function buildDoctor(w: WiringContext, deps: Pick<AccountsFace, 'tokenRefresh'>) {
  const { config, db, redis, clock, runtime: rt } = w;
  const doctor = new Doctor({
    config,
    db,
    redis,
    clock,
    jobs: () => rt.jobs,
    instances: () => rt.instances(),
    replica: () => rt.registers,
    breakers: () => deps.tokenRefresh.refresher.openBreakers(),
    backupDir: config.backup.storage === 'fs' ? (config.backup.dir ?? join(config.database.data_dir, 'backups')) : null,
  });
  return wired({ services: { doctor }, rungs: [] });
}

/** What the doctor area's job and routes use. */
export type DoctorServices = ReturnType<typeof buildDoctor>['services'];
