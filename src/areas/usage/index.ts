/** The usage area's public face: other areas and the composition root import only this file. */
export { requestHash, IdempotencyConflict, type BeginResult } from './store/idempotency.js';
export { UsageQueueFull, type RecordOutcome } from './usage-writer.js';
export type { UsageEventInput } from './usage-event.js';
import type { UsageServices } from './wiring.js';
/** What other areas use of usage (the ops collector reads the writer's queue). */
export type UsageFace = Pick<UsageServices, 'usageWriter'>;
