import type { FastifyInstance } from 'fastify';
import { notFound } from '../../errors/app-error.js';
import type { RouteDeps } from '../../modules/area.js';
import type { AccountsServices } from './wiring.js';
import { redactedRequest } from './account-tester.js';
import { parseId } from '../../http/validation.js';
import { json, route } from '../../http/contract.js';
import { AccessToken, AccountTestResult, IdParams, RefreshResult, UnauthorizedReport, testSchema, unauthorizedSchema } from './accounts-contracts.js';

/**
 * An on-demand account test waits at most this long for the provider (a stream that completes takes
 * seconds): well inside http.socket_timeout and the CLI's 30 s, so the caller always gets the answer.
 */
const TEST_TIMEOUT_MS = 25_000;
const tag = 'accounts';
const NO_ACCOUNT = 'no account with this id';

/**
 * An account's token: the gateway's hot path (`POST accounts/:id/token`, the only answer that
 * carries a credential, and `POST accounts/:id/unauthorized`), and the operator's refresh and test.
 */
export function registerTokenRoutes(api: FastifyInstance, deps: Pick<RouteDeps<AccountsServices>, 'log' | 'services'>): void {
  const { accounts, tokenRefresh, tokens, tester } = deps.services;

  route(
    api,
    {
      method: 'POST',
      path: '/accounts/:id/refresh',
      operationId: 'refreshAccount',
      summary: "Refresh an account's token now, through the same guard as the scheduler",
      tag,
      params: IdParams,
      responses: { 200: json(RefreshResult) },
      errors: { 404: NO_ACCOUNT },
    },
    async ({ params }) => {
      const n = parseId(params.id);
      const before = n && (await accounts.get(n));
      if (!before) return notFound(`no account ${params.id}`);
      const outcome = await tokenRefresh.refreshNow(before.id, 'admin', before.token_version);
      const { result, ...rest } = outcome;
      const detail = 'reason' in rest ? rest.reason : undefined;
      return { result, reason: detail ?? null, account: await accounts.get(before.id) };
    },
  );

  /**
   * One account test now, as the scheduled tests send it: what was sent (secrets masked), what
   * came back, and what it did to the account (an operator's explicit test recovers an account
   * the way auto_recover does).
   */
  route(
    api,
    {
      method: 'POST',
      path: '/accounts/:id/test',
      operationId: 'testAccount',
      summary: 'Test an account against its provider now',
      description: 'What was sent (secrets masked), what came back, and what it did to the account (a pass recovers it, as auto_recover does). A failed test is a 200 with `ok: false`.',
      tag,
      params: IdParams,
      body: testSchema,
      responses: { 200: json(AccountTestResult) },
      errors: {
        404: NO_ACCOUNT,
        409: '`unavailable` or `no_refresh_token`: the account has no token to test with (its status is in `error.status`)',
        502: '`refresh_failed`: the token had expired and its refresh failed',
        504: '`timeout`: the token had expired and no refreshed token arrived in time',
      },
    },
    async ({ params, body }) => {
      const n = parseId(params.id);
      if (!n || !(await accounts.get(n))) return notFound(`no account ${params.id}`);
      const run = await tester.run(n, { model: body.model, timeoutMs: TEST_TIMEOUT_MS, storedTokenForError: true });
      const r = run.result;
      const effect = await tester.applyEffect(
        n,
        { ok: r.ok, errorClass: r.errorClass, status: r.status, detail: r.detail, resetAtMs: r.resetAtMs },
        { autoRecover: true, actor: 'admin_test', context: { model: run.model } },
      );
      deps.log.info({ account_id: n, platform: run.platform, ok: r.ok, status: r.status, error_class: r.errorClass }, 'account tested');
      const secrets = await accounts.openSecrets(n);
      return {
        account_id: n,
        platform: run.platform,
        model: run.model,
        ok: r.ok,
        status: r.status,
        latency_ms: r.latencyMs,
        error_class: r.errorClass,
        detail: r.detail,
        answer: r.answer,
        reset_at: r.resetAtMs === null ? null : new Date(r.resetAtMs).toISOString(),
        request: redactedRequest(run.request, secrets?.proxyUrl ?? null),
        response: r.reply && { status: r.status, headers: r.reply.headers, body_excerpt: r.reply.bodyExcerpt },
        effect,
      };
    },
  );

  route(
    api,
    {
      method: 'POST',
      path: '/accounts/:id/token',
      operationId: 'getAccessToken',
      summary: "The gateway's hot path: an access token valid now",
      description:
        "Served from the replica's token cache when fresh; inside the refresh margin it is returned and refreshed in the background; about to expire, it is refreshed first (or the refresh another replica holds is waited for, up to `auth.hot_path_wait`).",
      tag,
      params: IdParams,
      responses: { 200: json(AccessToken, { headers: { 'Cache-Control': '`no-store`: the answer carries a secret' } }) },
      errors: {
        404: '`not_found`: no account with this id',
        409: "`unavailable`: the account's status serves no tokens (in `error.status`); `no_refresh_token`: the token expired and there is no refresh token",
        502: '`refresh_failed`: the token expired and its refresh failed',
        504: '`timeout`: the token expired and no refreshed token arrived within `auth.hot_path_wait`',
      },
    },
    async ({ params }, _req, reply) => {
      const n = parseId(params.id);
      if (!n) return notFound(`no account ${params.id}`);
      return reply.header('cache-control', 'no-store').send(await tokens.getAccessToken(n));
    },
  );

  route(
    api,
    {
      method: 'POST',
      path: '/accounts/:id/unauthorized',
      operationId: 'reportUnauthorized',
      summary: "The gateway got a 401 upstream with this account's token",
      description: 'Cools the account down (`auth.oauth_401_cooldown`) and refreshes it through the guard, waiting up to `auth.hot_path_wait` for the result (`pending` when it took longer).',
      tag,
      params: IdParams,
      body: unauthorizedSchema,
      responses: { 200: json(UnauthorizedReport) },
      errors: { 404: '`not_found`: no account with this id' },
    },
    async ({ params, body }) => {
      const n = parseId(params.id);
      if (!n) return notFound(`no account ${params.id}`);
      return tokens.reportUnauthorized(n, body.token_version);
    },
  );
}
