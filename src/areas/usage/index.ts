/** The usage area's public face: other areas and the composition root import only this file. */
export { requestHash } from './store/idempotency.js';
