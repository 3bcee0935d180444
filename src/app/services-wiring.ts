import type { Services } from '../jobs/services.js';
import { AdminSessions } from '../areas/admin/store/admin-sessions.js';
import { CanaryRuns } from '../areas/canary/store/canary-runs.js';
import type { WiringContext, Wired } from './wiring.js';
import { buildAccounts } from '../areas/accounts/wiring.js';
import { buildUsage } from '../areas/usage/wiring.js';
import { buildBilling } from '../areas/billing/wiring.js';
import { buildOps } from '../areas/ops/wiring.js';
import { schedulerWiring } from '../areas/scheduler-snapshot/wiring.js';
import { buildImages } from '../areas/images/wiring.js';
import { buildProbes } from '../areas/probes/wiring.js';
import { buildBackup } from '../areas/backup/wiring.js';
import { buildDoctor } from '../areas/doctor/wiring.js';

/** Every area's services and their shutdown rungs, in the order they stop. Adding an area is one line here. */
export function wireServices(w: WiringContext): Wired<Services> {
  const accounts = buildAccounts(w);
  const parts = [accounts, buildUsage(w), buildBilling(w), buildOps(w), schedulerWiring(w), buildImages(w), buildProbes(w, accounts.services), buildBackup(w), buildDoctor(w)];
  return {
    services: Object.assign({ metrics: w.metrics, sessions: new AdminSessions(w.db), canaryRuns: new CanaryRuns(w.db) }, ...parts.map((p) => p.services)) as Services,
    rungs: parts.flatMap((p) => p.rungs),
    prepare: async () => {
      for (const p of parts) await p.prepare?.();
    },
  };
}
