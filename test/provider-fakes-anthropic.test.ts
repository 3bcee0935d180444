import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeAnthropic, CLAUDE_CODE_SYSTEM } from './fixtures/providers/anthropic.js';
import { events, FORM, JSON_CT, post } from './helpers/provider-fakes.js';

// The Anthropic stand-in (FakeAnthropic): the Claude sign-in's token endpoint, the old host that
// no longer answers, and api.anthropic.com's messages endpoint for OAuth (Claude Code) and API keys.
// The fakes stand in for the providers in every adapter test, so their strictness is itself
// tested: a fake that accepted what the provider refuses would let a broken adapter pass.

describe('Anthropic (FakeAnthropic: platform.claude.com, api.anthropic.com)', () => {
  let ant: FakeAnthropic;
  let old: FakeAnthropic;
  beforeAll(async () => {
    ant = await FakeAnthropic.start();
    old = await FakeAnthropic.start({ oldHost: true });
    ant.addApiKey('sk-ant-api03-good');
    ant.addApiKey('sk-ant-api03-liar');
    ant.setBehaviour('sk-ant-api03-liar', { mode: 'wrong_answer' });
  });
  afterAll(async () => {
    await ant.close();
    await old.close();
  });

  const CLIENT = '9d1c250a-e61b-44d9-88ed-5944d1962f5e';
  const refresh = (rt: string, over: Record<string, unknown> = {}) => post(ant.tokenUrl, { grant_type: 'refresh_token', refresh_token: rt, client_id: CLIENT, ...over }, JSON_CT);
  const oauthHeaders = (token: string, beta = 'claude-code-20250219,oauth-2025-04-20') => ({
    ...JSON_CT,
    authorization: `Bearer ${token}`,
    'anthropic-version': '2023-06-01',
    'anthropic-beta': beta,
    'user-agent': 'claude-cli/2.1.0 (external, cli)',
    'x-app': 'cli',
  });
  const claudeBody = (over: Record<string, unknown> = {}) => ({
    model: 'claude-sonnet-4-5',
    max_tokens: 64,
    system: [{ type: 'text', text: CLAUDE_CODE_SYSTEM }],
    messages: [{ role: 'user', content: 'What is 40 + 2?' }],
    stream: true,
    ...over,
  });
  const messages = (headers: Record<string, string>, body: object) => post(`${ant.apiUrl}/v1/messages?beta=true`, body, headers);

  it('the old host answers every request 404 not_found_error', async () => {
    const r = await post(`${old.url}/v1/oauth/token`, { grant_type: 'refresh_token', refresh_token: 'x', client_id: CLIENT }, JSON_CT);
    expect([r.status, r.json]).toEqual([404, { type: 'error', error: { type: 'not_found_error', message: 'Not Found' } }]);
  });

  it('refuses a form body, another grant, another client, unknown, revoked and expired tokens', async () => {
    const { refresh_token: rt } = ant.issue('ann');
    const form = await post(ant.tokenUrl, new URLSearchParams({ grant_type: 'refresh_token', refresh_token: rt, client_id: CLIENT }).toString(), FORM);
    expect([form.status, form.json]).toEqual([400, { type: 'error', error: { type: 'invalid_request_error', message: 'Invalid request format' } }]);
    expect((await refresh(rt, { grant_type: 'authorization_code' })).json).toEqual({ error: 'unsupported_grant_type', error_description: 'Grant type not supported' });
    expect((await refresh(rt, { client_id: 'someone-else' })).json).toEqual({ error: 'invalid_client', error_description: 'Invalid client_id' });
    expect(await refresh('sk-ant-ort01-never')).toMatchObject({ status: 400, json: { error: 'invalid_grant', error_description: 'Refresh token not found or invalid' } });
    ant.revoke(rt);
    expect(await refresh(rt)).toMatchObject({ status: 400, json: { error: 'invalid_grant', error_description: 'Refresh token not found or invalid' } });
    const { refresh_token: rt2 } = ant.issue('ann');
    ant.expireRefreshToken(rt2);
    expect(await refresh(rt2)).toMatchObject({ status: 400, json: { error: 'invalid_grant', error_description: 'Refresh token expired' } });
    expect(ant.presentedCount(rt)).toBe(4);
    expect(ant.refusals).toBeGreaterThanOrEqual(6);
  });

  it('a JSON refresh rotates: the reply has a new refresh token and the old one is dead', async () => {
    const { refresh_token: rt } = ant.issue('ben');
    const before = ant.successes;
    const r = await refresh(rt);
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({
      token_type: 'Bearer',
      access_token: expect.stringMatching(/^sk-ant-oat01-/),
      refresh_token: expect.stringMatching(/^sk-ant-ort01-/),
      expires_in: 28_800,
      scope: 'user:inference user:profile',
      organization: { uuid: expect.any(String), name: expect.any(String) },
      account: { uuid: expect.any(String), email_address: 'ben@example.test' },
    });
    expect(r.json.refresh_token).not.toBe(rt);
    expect(ant.successes).toBe(before + 1);
    expect(ant.liveTokenOf('ben')).toBe(r.json.refresh_token);
    expect((await refresh(rt)).json).toEqual({ error: 'invalid_grant', error_description: 'Refresh token not found or invalid' });
    expect((await refresh(r.json.refresh_token)).status).toBe(200);
  });

  it('token endpoint faults: 429 with retry-after, 529 overloaded', async () => {
    const { refresh_token: rt } = ant.issue('cat');
    ant.fail('429');
    const limited = await refresh(rt);
    expect([limited.status, limited.headers.get('retry-after'), limited.json]).toEqual([429, '2', { type: 'error', error: { type: 'rate_limit_error', message: 'Rate limited' } }]);
    ant.fail('overloaded');
    expect((await refresh(rt)).status).toBe(529);
    expect((await refresh(rt)).status).toBe(200);
  });

  it('OAuth: refuses an unknown bearer, no anthropic-version, no oauth beta, a wrong system prompt', async () => {
    const { access_token } = ant.issue('dan');
    expect((await messages(oauthHeaders('sk-ant-oat01-nope'), claudeBody())).json).toEqual({ type: 'error', error: { type: 'authentication_error', message: 'Invalid bearer token' } });
    const { access_token: stale } = ant.issue('dan', 0);
    expect((await messages(oauthHeaders(stale), claudeBody())).status).toBe(401);
    const { 'anthropic-version': _v, ...noVersion } = oauthHeaders(access_token);
    expect(await messages(noVersion, claudeBody())).toMatchObject({ status: 400, json: { error: { type: 'invalid_request_error', message: 'anthropic-version: header is required' } } });
    expect(await messages(oauthHeaders(access_token, 'claude-code-20250219'), claudeBody())).toMatchObject({
      status: 401,
      json: { type: 'error', error: { type: 'authentication_error', message: 'OAuth authentication is currently not supported.' } },
    });
    const notClaudeCode = {
      type: 'error',
      error: { type: 'invalid_request_error', message: 'This credential is only authorized for use with Claude Code and cannot be used for other API requests.' },
    };
    expect(await messages(oauthHeaders(access_token), claudeBody({ system: 'You are a helpful assistant.' }))).toMatchObject({ status: 400, json: notClaudeCode });
    expect(await messages(oauthHeaders(access_token), claudeBody({ system: undefined }))).toMatchObject({ status: 400, json: notClaudeCode });
    expect(
      await messages(
        oauthHeaders(access_token),
        claudeBody({
          system: [
            { type: 'text', text: 'Be brief.' },
            { type: 'text', text: CLAUDE_CODE_SYSTEM },
          ],
        }),
      ),
    ).toMatchObject({
      status: 400,
      json: notClaudeCode,
    });
    expect((await messages(oauthHeaders(access_token), claudeBody({ max_tokens: 0 }))).json.error.message).toMatch(/^max_tokens/);
    expect((await messages(oauthHeaders(access_token), claudeBody({ messages: [] }))).json.error.message).toMatch(/^messages/);
  });

  it('OAuth: a Claude Code request streams the answer to message_stop; without stream it is one message', async () => {
    const { access_token } = ant.issue('eve');
    const r = await messages(oauthHeaders(access_token), claudeBody());
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('text/event-stream');
    const evs = events(r.text);
    for (const e of evs) expect(e.data.type).toBe(e.event);
    expect(evs.map((e) => e.event).filter((e) => e !== 'ping')).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
    expect(evs.find((e) => e.event === 'content_block_delta')!.data.delta).toEqual({ type: 'text_delta', text: '42' });
    expect(evs.find((e) => e.event === 'message_delta')!.data.delta.stop_reason).toBe('end_turn');
    const plain = await messages(oauthHeaders(access_token), claudeBody({ stream: false, system: CLAUDE_CODE_SYSTEM }));
    expect(plain.json).toMatchObject({
      id: expect.stringMatching(/^msg_/),
      type: 'message',
      role: 'assistant',
      model: 'claude-sonnet-4-5',
      content: [{ type: 'text', text: '42' }],
      stop_reason: 'end_turn',
    });
  });

  it('API key: answers the challenge (wrongly in wrong_answer), refuses unknown keys and a key sent as a bearer', async () => {
    const keyHeaders = (key: string) => ({ ...JSON_CT, 'x-api-key': key, 'anthropic-version': '2023-06-01' });
    const body = { model: 'claude-haiku-4-5', max_tokens: 16, messages: [{ role: 'user', content: [{ type: 'text', text: 'What is 100 - 58?' }] }] };
    const ok = await post(`${ant.apiUrl}/v1/messages`, body, keyHeaders('sk-ant-api03-good'));
    expect([ok.status, ok.json.content[0].text]).toEqual([200, '42']);
    expect((await post(`${ant.apiUrl}/v1/messages`, body, keyHeaders('sk-ant-api03-liar'))).json.content[0].text).toBe('43');
    expect((await post(`${ant.apiUrl}/v1/messages`, body, keyHeaders('sk-ant-api03-unknown'))).json).toEqual({ type: 'error', error: { type: 'authentication_error', message: 'invalid x-api-key' } });
    const asBearer = await post(`${ant.apiUrl}/v1/messages`, body, { ...JSON_CT, authorization: 'Bearer sk-ant-api03-good', 'anthropic-version': '2023-06-01' });
    expect(asBearer.status).toBe(401);
    const { 'anthropic-version': _v, ...noVersion } = keyHeaders('sk-ant-api03-good');
    expect((await post(`${ant.apiUrl}/v1/messages`, body, noVersion)).status).toBe(400);
  });

  it('behaviours: rate limit with the unified reset, 529 overloaded, 403 permission_error', async () => {
    ant.addApiKey('k-limited');
    ant.addApiKey('k-busy');
    ant.addApiKey('k-banned');
    const resetAt = Math.floor(Date.now() / 1000) + 900;
    ant.setBehaviour('k-limited', { mode: 'rate_limited', resetAt });
    ant.setBehaviour('k-busy', { mode: 'overloaded' });
    ant.setBehaviour('k-banned', { mode: 'forbidden' });
    const send = (key: string) =>
      post(`${ant.apiUrl}/v1/messages`, { model: 'm', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] }, { ...JSON_CT, 'x-api-key': key, 'anthropic-version': '2023-06-01' });
    const limited = await send('k-limited');
    expect([limited.status, limited.headers.get('anthropic-ratelimit-unified-reset'), limited.json.error.type]).toEqual([429, String(resetAt), 'rate_limit_error']);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(800);
    expect((await send('k-busy')).json).toEqual({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
    expect((await send('k-busy')).status).toBe(529);
    expect((await send('k-banned')).json.error.type).toBe('permission_error');
  });
});
