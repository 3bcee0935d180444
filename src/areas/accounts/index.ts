/** The accounts area's public face: other areas and the composition root import only this file. */
export type { Accounts } from './store/accounts.js';
export { AccountUnavailable } from './token-api.js';
export type { TokenApi, AccessToken, UnauthorizedReport } from './token-api.js';
export type { RefreshOutcome, RefreshTrigger } from './refresher.js';
export type { AccountView, AccountStatus } from './store/accounts.js';
export type { ProxyView } from './store/proxies.js';
/** What other areas use of accounts (probes sign in with account tokens; the doctor reads the refresh breakers). */
export type { AccountsServices as AccountsFace } from './wiring.js';
export type { AccountTester, AccountTestRun } from './account-tester.js';
export { redactedRequest, unsentTestClass } from './account-tester.js';
/** The retry schedule's worst-case length, as configured (the doctor compares the refresh margin with it). */
export { refreshRetryBudgetMs } from './config.js';
export type { TestEffect } from './store/account-test-effects.js';
export { apiKeyRequest, apiKeyJudge, makeChallenge, checkChallenge, MONITOR_PROVIDERS, type MonitorProvider } from './providers/api-key.js';
