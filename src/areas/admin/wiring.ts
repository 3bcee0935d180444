import { AdminSessions } from './store/admin-sessions.js';
import type { DeadLetters } from '../../store/dead-letters.js';
import { wired, type WiringContext } from '../../modules/wiring.js';

/**
 * The console's sign-in sessions (the HTTP layer checks tokens against them: `RouteDeps.sessions`),
 * and the dead letters the usage area's batch writers set aside, which its routes list.
 */
export function buildAdmin(w: WiringContext, deps: { deadLetters: DeadLetters }) {
  return wired({ services: { sessions: new AdminSessions(w.db), deadLetters: deps.deadLetters }, rungs: [] });
}

/** What the admin area's job and routes use. */
export type AdminServices = ReturnType<typeof buildAdmin>['services'];
