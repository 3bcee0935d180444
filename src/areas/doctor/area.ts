import type { AreaModule } from '../../jobs/area.js';
import { doctorJob } from './doctor-job.js';
import { registerDoctorRoutes } from './doctor-routes.js';

/** The doctor area as the area list sees it (README.md: its invariants). */
export const doctorArea: AreaModule = {
  name: 'doctor',
  jobs: [doctorJob],
  routes: (api, deps) => registerDoctorRoutes(api, deps),
};
