/** The accounts area's public face: other areas and the composition root import only this file. */
export type { Accounts } from './store/accounts.js';
export { AccountUnavailable } from './token-api.js';
export type { TokenApi } from './token-api.js';
