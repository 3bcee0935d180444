import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/app/config-schema.js';
import { resolveProviders } from '../src/areas/accounts/providers/registry.js';
import { apiKeyJudge, apiKeyRequest, checkChallenge, makeChallenge } from '../src/areas/accounts/providers/api-key.js';
import { CLAUDE_CODE_SYSTEM } from '../src/areas/accounts/providers/anthropic.js';
import { parseSse } from '../src/areas/accounts/providers/sse.js';
import { readError } from '../src/areas/accounts/providers/error-shapes.js';
import type { ProviderAdapter } from '../src/areas/accounts/providers/types.js';
import { saneReset } from '../src/upstream/probe-client.js';

const NOW = Date.UTC(2026, 11, 5, 12);
const jwt = (payload: unknown) => `${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from(JSON.stringify(payload)).toString('base64url')}.sig`;

function providers(env: Record<string, string> = {}): Map<string, ProviderAdapter> {
  const config = loadConfig({ env: { RELAY_JOBS_DATA_DIR: '/tmp/unused', ...env } });
  const { providers, problems } = resolveProviders(config);
  expect(problems).toEqual([]);
  return providers;
}
const sse = (events: Array<[string, unknown]>) => events.map(([e, d]) => `${e ? `event: ${e}\n` : ''}data: ${JSON.stringify(d)}\n\n`).join('');

describe('built-in platforms speak what the providers speak today (upstream-wire-formats.md)', () => {
  it('openai: form to auth.openai.com with the Codex client id and scope; every 401 is a dead token', async () => {
    const p = providers().get('openai')!;
    const r = p.refreshRequest('rt-1');
    expect(r.url).toBe('https://auth.openai.com/oauth/token');
    expect(r.headers['content-type']).toBe('application/x-www-form-urlencoded');
    expect(Object.fromEntries(new URLSearchParams(r.body))).toEqual({ grant_type: 'refresh_token', refresh_token: 'rt-1', client_id: 'app_EMoamEEZ73f0CkXaXp7hrann', scope: 'openid profile email' });
    expect(p.classifyRefresh(401, '', {}, NOW)).toMatchObject({ kind: 'permanent', reason: 'unauthorized_401', accountStatus: 'expired' });
    for (const code of ['refresh_token_expired', 'refresh_token_reused', 'refresh_token_invalidated', 'invalid_refresh_token', 'app_session_terminated'])
      expect(p.classifyRefresh(401, JSON.stringify({ error: { code, message: 'm', type: 'invalid_request_error' } }), {}, NOW), code).toMatchObject({ kind: 'permanent', reason: code });
    expect(p.classifyRefresh(401, JSON.stringify({ error: 'invalid_client' }), {}, NOW)).toMatchObject({ kind: 'config', reason: 'invalid_client' });
    // OpenAI's type is a category, not a reason: a 401 whose code is null is still a dead session.
    expect(p.classifyRefresh(401, JSON.stringify({ error: { message: 'm', type: 'invalid_request_error', code: null } }), {}, NOW)).toMatchObject({ kind: 'permanent', reason: 'unauthorized_401' });
    // An HTML 401 from a proxy or a wrong host is not the provider's word: no account dies of it.
    expect(p.classifyRefresh(401, '<html><body>401 Authorization Required</body></html>', {}, NOW)).toMatchObject({ kind: 'transient', reason: 'unrecognized_reply' });
    const id = jwt({ email: 'a@example.test', 'https://api.openai.com/auth': { chatgpt_account_id: 'acct-9' } });
    expect(p.classifyRefresh(200, JSON.stringify({ access_token: jwt({ exp: NOW / 1000 + 60 }), id_token: id, refresh_token: 'rt-2', expires_in: 3600 }), {}, NOW)).toMatchObject({
      kind: 'ok',
      refreshToken: 'rt-2',
      metadata: { chatgpt_account_id: 'acct-9', email: 'a@example.test' },
    });
  });

  it('openai: the account test is a streamed Codex responses call with store:false and the ChatGPT account id', async () => {
    const p = providers().get('openai')!;
    const id = jwt({ 'https://api.openai.com/auth': { chatgpt_account_id: 'acct-7' } });
    const r = p.testRequest({ accessToken: 'at', idToken: id, metadata: {} }, 'gpt-5-codex', 'hi');
    expect(r.url).toBe('https://chatgpt.com/backend-api/codex/responses');
    expect(r.headers).toMatchObject({ authorization: 'Bearer at', 'chatgpt-account-id': 'acct-7', accept: 'text/event-stream', originator: 'codex_cli_rs' });
    expect(JSON.parse(r.body)).toMatchObject({ model: 'gpt-5-codex', stream: true, store: false, input: [{ role: 'user', content: [{ type: 'input_text', text: 'hi' }] }] });
    // Stored metadata wins over the token's claim.
    expect(p.testRequest({ accessToken: 'at', idToken: id, metadata: { chatgpt_account_id: 'acct-stored' } }, 'm', 'hi').headers['chatgpt-account-id']).toBe('acct-stored');
    const done = sse([
      ['response.created', { type: 'response.created' }],
      ['response.output_text.delta', { type: 'response.output_text.delta', delta: '4' }],
      ['response.output_text.delta', { type: 'response.output_text.delta', delta: '2' }],
      ['response.completed', { type: 'response.completed' }],
    ]);
    expect(p.judgeTest(200, {}, done, NOW)).toMatchObject({ ok: true, answer: '42' });
    expect(p.judgeTest(200, {}, done.split('event: response.completed')[0]!, NOW)).toMatchObject({ ok: false, errorClass: 'bad_body' });
    expect(p.judgeTest(400, {}, JSON.stringify({ detail: 'Store must be set to false' }), NOW)).toMatchObject({ ok: false, errorClass: 'http_4xx', detail: 'HTTP 400 Store must be set to false' });
    // The Codex reset: headers first, then the body's resets_at.
    expect(p.judgeTest(429, { 'x-codex-primary-reset-after-seconds': '120' }, '{}', NOW).resetAtMs).toBe(NOW + 120_000);
    expect(p.judgeTest(429, {}, JSON.stringify({ error: { type: 'usage_limit_reached', resets_at: NOW / 1000 + 900 } }), NOW)).toMatchObject({ errorClass: 'rate_limited', resetAtMs: NOW + 900_000 });
  });

  it('anthropic: JSON to platform.claude.com; the old host 404 and a form refusal are configuration faults', async () => {
    const p = providers().get('anthropic')!;
    const r = p.refreshRequest('rt');
    expect(r.url).toBe('https://platform.claude.com/v1/oauth/token');
    expect(r.headers['content-type']).toBe('application/json');
    expect(JSON.parse(r.body)).toEqual({ grant_type: 'refresh_token', refresh_token: 'rt', client_id: '9d1c250a-e61b-44d9-88ed-5944d1962f5e' });
    expect(p.classifyRefresh(404, JSON.stringify({ type: 'error', error: { type: 'not_found_error', message: 'Not Found' } }), {}, NOW)).toMatchObject({ kind: 'config', reason: 'not_found_error' });
    expect(p.classifyRefresh(400, JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message: 'Invalid request format' } }), {}, NOW)).toMatchObject({ kind: 'config' });
    expect(p.classifyRefresh(400, JSON.stringify({ error: 'invalid_grant', error_description: 'Refresh token not found or invalid' }), {}, NOW)).toMatchObject({
      kind: 'permanent',
      detail: 'invalid_grant: Refresh token not found or invalid',
    });
    expect(p.classifyRefresh(429, '{}', { retryAfter: '30' }, NOW)).toMatchObject({ kind: 'transient', reason: 'rate_limited', retryAfterMs: 30_000 });
    // A dead token in words under a nested request error is still a dead token, not our configuration.
    expect(p.classifyRefresh(400, JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message: 'Refresh token not found or invalid' } }), {}, NOW)).toMatchObject({
      kind: 'permanent',
      accountStatus: 'expired',
    });
    expect(p.classifyRefresh(401, '', {}, NOW)).toMatchObject({ kind: 'transient', reason: 'bare_http_401' });
    expect(
      p.classifyRefresh(200, JSON.stringify({ access_token: 'sk-ant-oat01-x', refresh_token: 'sk-ant-ort01-y', expires_in: 28800, account: { email_address: 'c@example.test' } }), {}, NOW),
    ).toMatchObject({
      kind: 'ok',
      expiresAt: new Date(NOW + 28_800_000),
      metadata: { email: 'c@example.test' },
    });
    // A JSON refresh can be switched to a form by configuration (oauth.providers.anthropic.body).
    const form = providers({ RELAY_JOBS__OAUTH__PROVIDERS__ANTHROPIC__BODY: 'form' }).get('anthropic')!;
    expect(form.refreshRequest('rt').headers['content-type']).toBe('application/x-www-form-urlencoded');
  });

  it('anthropic: the account test carries the OAuth beta, the version and the Claude Code system prompt, and passes at message_stop', async () => {
    const p = providers().get('anthropic')!;
    const r = p.testRequest({ accessToken: 'oat', idToken: null, metadata: {} }, 'claude-sonnet-4-5', 'hi');
    expect(r.url).toBe('https://api.anthropic.com/v1/messages?beta=true');
    expect(r.headers['anthropic-beta']!.split(',')).toContain('oauth-2025-04-20');
    expect(r.headers).toMatchObject({ authorization: 'Bearer oat', 'anthropic-version': '2023-06-01' });
    const body = JSON.parse(r.body) as { system: Array<{ text: string }>; stream: boolean };
    expect(body.system[0]!.text).toBe(CLAUDE_CODE_SYSTEM);
    expect(body.stream).toBe(true);
    const ok = sse([
      ['message_start', { type: 'message_start' }],
      ['content_block_delta', { type: 'content_block_delta', delta: { type: 'text_delta', text: 'Hello!' } }],
      ['message_stop', { type: 'message_stop' }],
    ]);
    expect(p.judgeTest(200, {}, ok, NOW)).toMatchObject({ ok: true, answer: 'Hello!' });
    expect(p.judgeTest(429, { 'anthropic-ratelimit-unified-reset': String(NOW / 1000 + 3600) }, '{}', NOW)).toMatchObject({ errorClass: 'rate_limited', resetAtMs: NOW + 3_600_000 });
    expect(p.judgeTest(529, {}, JSON.stringify({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }), NOW)).toMatchObject({ errorClass: 'overloaded' });
    expect(p.judgeTest(401, {}, JSON.stringify({ type: 'error', error: { type: 'authentication_error', message: 'OAuth authentication is currently not supported.' } }), NOW)).toMatchObject({
      errorClass: 'auth',
      detail: 'HTTP 401 authentication_error: OAuth authentication is currently not supported.',
    });
  });

  it("gemini: a form with the Gemini CLI's public secret; no rotation; missing secret is a configuration fault", async () => {
    const p = providers().get('gemini')!;
    const fields = Object.fromEntries(new URLSearchParams(p.refreshRequest('1//rt').body));
    expect(fields.client_secret).toMatch(/^GOCSPX-/);
    expect(fields.client_id).toBe('681255809395-oo8ft2oprdrnp9e3aqf6av3hmdib135j.apps.googleusercontent.com');
    expect(p.rotates).toBe(false);
    expect(p.classifyRefresh(200, JSON.stringify({ access_token: 'ya29.x', expires_in: 3599 }), {}, NOW)).toMatchObject({ kind: 'ok', refreshToken: null });
    expect(p.classifyRefresh(400, JSON.stringify({ error: 'invalid_request', error_description: 'client_secret is missing.' }), {}, NOW)).toMatchObject({ kind: 'config', reason: 'invalid_request' });
    expect(p.classifyRefresh(400, JSON.stringify({ error: 'invalid_grant', error_description: 'Token has been expired or revoked.' }), {}, NOW)).toMatchObject({
      kind: 'permanent',
      accountStatus: 'expired',
    });
  });

  it('gemini: Code Assist with the project id, else Generative Language; passes on a finishReason', async () => {
    const p = providers().get('gemini')!;
    const withProject = p.testRequest({ accessToken: 'ya29', idToken: null, metadata: { project_id: 'proj-1' } }, 'gemini-2.5-flash', 'hi');
    expect(withProject.url).toBe('https://cloudcode-pa.googleapis.com/v1internal:streamGenerateContent?alt=sse');
    expect(JSON.parse(withProject.body)).toMatchObject({ model: 'gemini-2.5-flash', project: 'proj-1', request: { contents: [{ role: 'user', parts: [{ text: 'hi' }] }] } });
    expect(p.testRequest({ accessToken: 'ya29', idToken: null, metadata: {} }, 'gemini-2.5-flash', 'hi').url).toBe(
      'https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse',
    );
    const wrapped = sse([
      ['', { response: { candidates: [{ content: { parts: [{ text: '4' }] } }] } }],
      ['', { response: { candidates: [{ content: { parts: [{ text: '2' }] }, finishReason: 'STOP' }] } }],
    ]);
    expect(p.judgeTest(200, {}, wrapped, NOW)).toMatchObject({ ok: true, answer: '42' });
    expect(p.judgeTest(200, {}, sse([['', { candidates: [{ content: { parts: [{ text: 'x' }] } }] }]]), NOW)).toMatchObject({ ok: false, errorClass: 'bad_body' });
    expect(p.judgeTest(429, {}, JSON.stringify({ error: { code: 429, status: 'RESOURCE_EXHAUSTED', details: [{ retryDelay: '30s' }] } }), NOW)).toMatchObject({ resetAtMs: NOW + 30_000 });
  });
});

describe('platforms configured by hand', () => {
  it('speak like a built-in one; a bad dialect, an api_url with credentials and a missing client id are refused by name', async () => {
    const p = providers({
      RELAY_JOBS__OAUTH__PROVIDERS__ACME__TOKEN_URL: 'https://auth.acme.test/token',
      RELAY_JOBS__OAUTH__PROVIDERS__ACME__CLIENT_ID: 'c',
      RELAY_JOBS__OAUTH__PROVIDERS__ACME__LIKE: 'anthropic',
      RELAY_JOBS__OAUTH__PROVIDERS__ACME__API_URL: 'https://api.acme.test/',
    }).get('acme')!;
    expect(p.dialect).toBe('anthropic');
    expect(p.body).toBe('json');
    expect(p.testRequest({ accessToken: 'a', idToken: null, metadata: {} }, 'm', 'hi').url).toBe('https://api.acme.test/v1/messages?beta=true');
    expect(() => loadConfig({ env: { RELAY_JOBS_DATA_DIR: '/tmp/u', RELAY_JOBS__OAUTH__PROVIDERS__ACME__LIKE: 'cohere' } })).toThrow(
      /oauth\.providers\.acme\.like.*expected openai, anthropic or gemini/,
    );
    expect(() => loadConfig({ env: { RELAY_JOBS_DATA_DIR: '/tmp/u', RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__API_URL: 'https://user:pw@chatgpt.example/x' } })).toThrow(
      /oauth\.providers\.openai\.api_url.*must not carry credentials/,
    );
    expect(() => loadConfig({ env: { RELAY_JOBS_DATA_DIR: '/tmp/u', RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__BODY: 'xml' } })).toThrow(/oauth\.providers\.openai\.body.*expected json or form/);
    const config = loadConfig({ env: { RELAY_JOBS_DATA_DIR: '/tmp/u', RELAY_JOBS__OAUTH__PROVIDERS__ACME__TOKEN_URL: 'https://auth.acme.test/token' } });
    expect(resolveProviders(config).problems).toEqual(['oauth.providers.acme: a platform that is not built in needs both token_url and client_id']);
  });
});

describe('the shapes every reader shares', () => {
  it('reads flat, OpenAI-nested, Anthropic-nested, Google and detail errors', () => {
    expect(readError({ error: 'invalid_grant', error_description: 'd' })).toEqual({ code: 'invalid_grant', message: 'd' });
    expect(readError({ error: { code: 'refresh_token_reused', type: 'invalid_request_error', message: 'm' } })).toEqual({ code: 'refresh_token_reused', message: 'm' });
    expect(readError({ error: { code: null, type: 'invalid_request_error', message: 'm' } })).toEqual({ code: '', message: 'm' });
    expect(readError({ type: 'error', error: { type: 'not_found_error', message: 'Not Found' } })).toEqual({ code: 'not_found_error', message: 'Not Found' });
    expect(readError({ error: { code: 401, message: 'm', status: 'UNAUTHENTICATED' } })).toEqual({ code: 'unauthenticated', message: 'm' });
    expect(readError({ detail: 'Store must be set to false' })).toEqual({ code: '', message: 'Store must be set to false' });
  });
  it('a reset is a time to come and at most a day away', () => {
    expect(saneReset(NOW + 60_000, NOW)).toBe(NOW + 60_000);
    expect(saneReset(1e203, NOW)).toBe(NOW + 86_400_000);
    expect(saneReset(NOW - 1, NOW)).toBeNull();
    expect(saneReset(Number.NaN, NOW)).toBeNull();
    expect(saneReset(null, NOW)).toBeNull();
  });
  it('splits SSE with CRLF, multi-line data and a last event without its blank line', () => {
    expect(parseSse('event: a\r\ndata: 1\r\n\r\ndata: x\ndata: y\n\nevent: b\ndata: 2')).toEqual([
      { event: 'a', data: '1' },
      { event: '', data: 'x\ny' },
      { event: 'b', data: '2' },
    ]);
  });
  it('API-key monitors: each provider its path, auth header and reply; the challenge catches a wrong answer', () => {
    expect(apiKeyRequest('anthropic', 'https://r.test/', 'k', 'm', 'q')).toMatchObject({ url: 'https://r.test/v1/messages', headers: { 'x-api-key': 'k', 'anthropic-version': '2023-06-01' } });
    expect(apiKeyRequest('gemini', 'https://r.test', 'k', 'gemini-2.5-flash', 'q')).toMatchObject({
      url: 'https://r.test/v1beta/models/gemini-2.5-flash:generateContent',
      headers: { 'x-goog-api-key': 'k' },
    });
    expect(apiKeyRequest('openai', 'https://r.test', 'k', 'm', 'q')).toMatchObject({ url: 'https://r.test/v1/chat/completions', headers: { authorization: 'Bearer k' } });
    const { prompt, expected } = makeChallenge(() => 0.5);
    expect(prompt).toBe('What is 50 + 50? Reply with the number only.');
    const anthropic = apiKeyJudge('anthropic');
    expect(checkChallenge(anthropic(200, {}, JSON.stringify({ type: 'message', content: [{ type: 'text', text: `It is ${expected}.` }] }), NOW), expected)).toMatchObject({ ok: true });
    expect(checkChallenge(anthropic(200, {}, JSON.stringify({ type: 'message', content: [{ type: 'text', text: '101' }] }), NOW), expected)).toMatchObject({ ok: false, errorClass: 'wrong_answer' });
    // A list of numbers that merely contains the sum does not pass.
    expect(checkChallenge(anthropic(200, {}, JSON.stringify({ type: 'message', content: [{ type: 'text', text: '99 100 101' }] }), NOW), expected)).toMatchObject({
      ok: false,
      errorClass: 'wrong_answer',
    });
    expect(anthropic(200, {}, JSON.stringify({ choices: [] }), NOW)).toMatchObject({ ok: false, errorClass: 'bad_body' });
    expect(apiKeyJudge('gemini')(200, {}, JSON.stringify({ candidates: [{ content: { parts: [{ text: '100' }] }, finishReason: 'STOP' }] }), NOW)).toMatchObject({ ok: true, answer: '100' });
    expect(apiKeyJudge('gemini')(400, {}, JSON.stringify({ error: { code: 400, message: 'API key not valid. Please pass a valid API key.', status: 'INVALID_ARGUMENT' } }), NOW)).toMatchObject({
      errorClass: 'http_4xx',
    });
  });
});
