/** The ops area's public face: other areas and the composition root import only this file. */
export { silencedBy } from './alert-logic.js';
export { alertIntents } from './alert-notice.js';
export type { Ops } from './ops-services.js';
export type { AlertRule } from './store/ops-alerts.js';
export { CLEANUP_TARGETS } from './store/ops-retention.js';
/** What other areas use of ops (the doctor raises its alerts through the ops plane). */
export type { OpsServices as OpsFace } from './wiring.js';
