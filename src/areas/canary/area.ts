import type { AreaModule } from '../../jobs/area.js';
import { canaryJob } from './canary.js';

/** The canary area as the area list sees it (README.md: its invariants). */
export const canaryArea: AreaModule = { name: 'canary', jobs: [canaryJob] };
