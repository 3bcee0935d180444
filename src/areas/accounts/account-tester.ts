import type { Db, Queryable } from '../../store/db.js';
import type { ProbeClient, ProbeResult, UpstreamRequest } from '../../upstream/probe-client.js';
import { scrubbedText } from '../../upstream/error-text.js';
import type { Accounts } from './store/accounts.js';
import { applyTestResult, type TestEffect, type TestResultForAccount } from './store/account-test-effects.js';
import { AccountUnavailable, type TokenApi } from './token-api.js';
import type { ProviderAdapter } from './providers/types.js';
import { checkChallenge } from './providers/api-key.js';

export interface AccountTestRun {
  accountId: number;
  platform: string;
  model: string;
  /** The credential version tested: an `error` effect applies only while it is still current. */
  tokenVersion: number;
  request: UpstreamRequest;
  result: ProbeResult;
}

/** Header names whose values are secrets: shown as `***` to an operator. */
const SECRET_HEADERS = new Set(['authorization', 'x-api-key', 'x-goog-api-key', 'cookie', 'proxy-authorization']);

/** The request as an operator may see it: secret headers masked, the body as sent (it carries no credential). */
export function redactedRequest(r: UpstreamRequest, proxyUrl: string | null): { method: string; url: string; headers: Record<string, string>; body: unknown; via_proxy: boolean } {
  const headers = Object.fromEntries(
    Object.entries(r.headers).map(([k, v]) => [k, SECRET_HEADERS.has(k.toLowerCase()) ? (k.toLowerCase() === 'authorization' ? `${v.split(' ')[0]} ***` : '***') : v]),
  );
  let body: unknown = r.body;
  try {
    body = JSON.parse(r.body);
  } catch {
    /* shown as text */
  }
  return { method: r.method, url: scrubbedText(r.url, [r.url], 2048), headers, body, via_proxy: proxyUrl !== null };
}

/**
 * One account test as the gateways send it (the platform adapter's request, through the account's
 * proxy, with its access token from the token API: refreshed first when it is about to expire),
 * and what its result does to the account (store/account-test-effects.ts). Scheduled tests apply
 * the effect inside their fenced finish; `POST /accounts/{id}/test` applies it at once.
 */
export class AccountTester {
  constructor(
    private readonly db: Db,
    private readonly accounts: Accounts,
    private readonly tokens: TokenApi,
    private readonly providers: Map<string, ProviderAdapter>,
    private readonly client: ProbeClient,
  ) {}

  /**
   * Sends the test. A test of an account in `error` uses the stored token as it is: that is how a
   * passing test finds out the account works again (auto_recover). `prompt`/`expected`: a
   * monitor's challenge, checked in the answer.
   */
  async run(
    accountId: number,
    o: { model?: string | null; timeoutMs: number; signal?: AbortSignal; slot?: Date; prompt?: string; expected?: string; baseUrl?: string | null; storedTokenForError: boolean },
  ): Promise<AccountTestRun> {
    let token: string | null = null;
    let unavailable: AccountUnavailable | null = null;
    try {
      token = (await this.tokens.getAccessToken(accountId)).access_token;
    } catch (err) {
      if (!(err instanceof AccountUnavailable && err.code === 'unavailable')) throw err;
      unavailable = err;
    }
    const secrets = await this.accounts.openSecrets(accountId);
    if (!secrets) throw new AccountUnavailable(accountId, 'not_found', `account ${accountId} does not exist`);
    // The stored token of an account in `error` is how a test finds out it works again; a disabled,
    // banned or expired account's token is never sent (and a monitor never sends a stored one).
    if (token === null && !(o.storedTokenForError && secrets.status === 'error')) throw unavailable!;
    const adapter = this.providers.get(secrets.platform);
    if (!adapter) throw new AccountUnavailable(accountId, 'unavailable', `account ${accountId}: no provider for platform ${secrets.platform} (oauth.providers.${secrets.platform})`);
    const model = o.model || adapter.defaultModel;
    const c = secrets.credentials;
    const request = adapter.testRequest({ accessToken: token ?? c.access_token, idToken: c.id_token ?? null, metadata: secrets.metadata }, model, o.prompt ?? 'hi', o.baseUrl);
    const expected = o.expected;
    const judge = expected ? (...a: Parameters<typeof adapter.judgeTest>) => checkChallenge(adapter.judgeTest(...a), expected) : adapter.judgeTest;
    const raw = await this.client.probe({ request, judge, proxyUrl: secrets.proxyUrl, timeoutMs: o.timeoutMs, slot: o.slot }, o.signal);
    // A relay or proxy may echo what it was sent: no credential leaves in a detail, a header or an excerpt.
    const secretsOf = [token, c.access_token, c.refresh_token, c.id_token].filter((t): t is string => typeof t === 'string' && t.length >= 8);
    const result: ProbeResult = {
      ...raw,
      detail: raw.detail && maskAll(raw.detail, secretsOf),
      answer: raw.answer && maskAll(raw.answer, secretsOf),
      reply: raw.reply && {
        headers: Object.fromEntries(Object.entries(raw.reply.headers).map(([k, v]) => [k, maskAll(v, secretsOf)])),
        bodyExcerpt: maskAll(raw.reply.bodyExcerpt, secretsOf),
      },
    };
    return { accountId, platform: secrets.platform, model, tokenVersion: secrets.tokenVersion, request, result };
  }

  /** What the result does to the account; `q` is the caller's transaction when there is one. */
  applyEffect(
    accountId: number,
    r: TestResultForAccount,
    o: { autoRecover: boolean; actor: string; context: Record<string, unknown>; tokenVersion?: number | null },
    q: Queryable = this.db,
  ): Promise<TestEffect> {
    return applyTestResult(q, accountId, r, o);
  }
}

/**
 * The error class of a test that was never sent because `run` threw. The account's own state is
 * `auth` (documented: "the account has no usable token"): gone, disabled or banned, no refresh
 * token, or a refresh the provider refused. Anything else is the relay's own trouble, not the
 * account's, and is `not_sent`: a refresh that did not finish in time, a database error,
 * credentials that cannot be opened with this master key. Either way nothing was learned from the
 * provider, so the account is left as it is (`applyTestResult` with no token version).
 */
export function unsentTestClass(err: unknown): 'auth' | 'not_sent' {
  return err instanceof AccountUnavailable && err.code !== 'timeout' ? 'auth' : 'not_sent';
}

/** Every occurrence of each secret replaced by `***`. */
function maskAll(text: string, secrets: readonly string[]): string {
  let t = text;
  for (const x of secrets) t = t.split(x).join('***');
  return t;
}
