/** The accounts area's public face: other areas and the composition root import only this file. */
export type { Accounts } from './store/accounts.js';
export { AccountUnavailable } from './token-api.js';
export type { TokenApi, AccessToken, UnauthorizedReport } from './token-api.js';
export type { RefreshOutcome, RefreshTrigger } from './refresher.js';
export type { AccountView, AccountStatus } from './store/accounts.js';
export type { ProxyView } from './store/proxies.js';
/** What other areas use of accounts (probes sign in with account tokens; the doctor reads the refresh breakers). */
export type { AccountsServices as AccountsFace } from './wiring.js';
