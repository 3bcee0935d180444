/** What every platform adapter answers (providers/README.md): the refresh call's shape, its result, an account test's request and verdict. */

/** The account state a permanent refresh failure puts the account in. */
export type PermanentStatus = 'expired' | 'banned' | 'quota_exhausted';

import type { AccountMetadata } from '../store/account-types.js';
export type { AccountMetadata } from '../store/account-types.js';

/**
 * The one result type of a refresh call. The retry logic switches on `kind` and nothing else,
 * so classification and retries cannot disagree (codex-proxy-rs logged rejected refreshes as
 * successes because its two layers used different types).
 * - `transient`: try again later (network, timeout, 5xx, 429 with its Retry-After, garbage replies).
 * - `permanent`: the refresh token is dead or the account is gone; set `accountStatus`, re-authorise.
 * - `config`: our side is wrong (token URL, client id or secret, body encoding); no account is at
 *   fault, so no account state changes, the platform's breaker trips, and the operator must fix
 *   `oauth.providers.<platform>`.
 */
export type RefreshCallResult =
  | { kind: 'ok'; accessToken: string; refreshToken: string | null; idToken: string | null; expiresAt: Date | null; metadata: AccountMetadata }
  | { kind: 'transient'; reason: string; status: number | null; retryAfterMs: number | null; detail: string }
  | { kind: 'permanent'; reason: string; status: number; detail: string; accountStatus: PermanentStatus }
  | { kind: 'config'; reason: string; status: number; detail: string };

export type BodyEncoding = 'json' | 'form';

// The transport's shapes live in the kernel (upstream/probe-client.ts): adapters shape requests and judge replies, the client only sends.
import type { Judge, UpstreamRequest } from '../../../upstream/probe-client.js';
export type { ErrorClass, Judge, UpstreamRequest, Verdict } from '../../../upstream/probe-client.js';

/** The account a test is for, as the adapter needs it. */
export interface TestAccount {
  accessToken: string;
  idToken: string | null;
  metadata: AccountMetadata;
}

/**
 * Everything that differs between platforms (openai/Codex, anthropic/Claude Code, gemini/Gemini
 * CLI, and a platform configured by hand): the refresh call, how its answers read, and the
 * account test the gateways send with an OAuth token.
 */
export interface ProviderAdapter {
  readonly platform: string;
  /** Which built-in dialect it speaks (a hand-configured platform names one with `like`). */
  readonly dialect: Dialect;
  readonly tokenUrl: string;
  readonly clientId: string;
  readonly body: BodyEncoding;
  /** Base URL of the account tests (`oauth.providers.<platform>.api_url`). */
  readonly apiUrl: string;
  /** Whether the provider hands out a new refresh token with each refresh (Google does not). */
  readonly rotates: boolean;
  readonly defaultModel: string;
  /** Refresh calls per second this process sends to the endpoint. */
  readonly maxPerSecond: number;
  /** How long the provider still accepts a just-rotated refresh token (`reuse_grace`; 0: never). */
  readonly reuseGraceMs: number;
  refreshRequest(refreshToken: string): UpstreamRequest;
  classifyRefresh(status: number, body: string, headers: { retryAfter?: string | null }, nowMs: number): RefreshCallResult;
  /** The account test; `base` replaces the platform's base URL (a monitor's own `base_url`), the path kept. */
  testRequest(account: TestAccount, model: string, prompt: string, base?: string | null): UpstreamRequest;
  judgeTest: Judge;
}

export type Dialect = 'openai' | 'anthropic' | 'gemini';
