import { CanaryRuns } from './store/canary-runs.js';
import { wired, type WiringContext } from '../../modules/wiring.js';

export function buildCanary(w: WiringContext) {
  return wired({ services: { canaryRuns: new CanaryRuns(w.db) }, rungs: [] });
}

/** What the canary job uses. */
export type CanaryServices = ReturnType<typeof buildCanary>['services'];
