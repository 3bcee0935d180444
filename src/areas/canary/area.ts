import { defineArea } from '../../modules/area.js';
import { canaryJob } from './canary.js';

/** The canary area as the area list sees it (README.md: its invariants). */
export const canaryArea = defineArea({ name: 'canary', wiring: async () => (await import('./wiring.js')).buildCanary, jobs: [canaryJob] });
