import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { ChatUpstream } from './fixtures/chat-upstream.js';
import { FakeAnthropic, CLAUDE_CODE_SYSTEM } from './fixtures/providers/anthropic.js';
import { FakeGoogle, GEMINI_CLI_CLIENT_ID, GEMINI_CLI_CLIENT_SECRET } from './fixtures/providers/gemini.js';
import { answerFor } from './fixtures/providers/answer.js';

// The fakes stand in for the providers in every adapter test, so their strictness is itself tested:
// a fake that accepted what the provider refuses would let a broken adapter pass.

const CODEX_CLIENT = 'app_EMoamEEZ73f0CkXaXp7hrann';
const FORM = { 'content-type': 'application/x-www-form-urlencoded' };
const JSON_CT = { 'content-type': 'application/json' };

async function post(url: string, body: string | object, headers: Record<string, string> = {}): Promise<{ status: number; headers: Headers; text: string; json: any }> {
  const res = await fetch(url, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: parseOrNull(text) };
}

function parseOrNull(text: string): any {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

/** Parses an event stream by its blank-line framing, as a client must (not by the chunks it arrived in). */
function events(text: string): Array<{ event: string | null; data: any }> {
  return text
    .split('\n\n')
    .filter((block) => block.trim() !== '')
    .map((block) => {
      const lines = block.split('\n');
      const event = lines.find((l) => l.startsWith('event: '))?.slice(7) ?? null;
      const data = lines
        .filter((l) => l.startsWith('data: '))
        .map((l) => l.slice(6))
        .join('\n');
      return { event, data: JSON.parse(data) };
    });
}

function jwtClaims(token: string): any {
  return JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8'));
}

describe('answerFor', () => {
  it('answers the arithmetic challenge in a prompt, wrongly on demand, and greets otherwise', () => {
    expect(answerFor('What is 17 + 25? Reply with the number only.', false)).toBe('42');
    expect(answerFor('compute 9 - 12', false)).toBe('-3');
    expect(answerFor('123456789 * 987654321', false)).toBe('121932631112635269');
    expect(answerFor('What is 17 + 25?', true)).toBe('43');
    expect(answerFor('hi', false)).toBe('Hello!');
    expect(answerFor('hi', true)).toBe('I cannot help');
  });
});

describe('OpenAI (FakeOAuthServer: auth.openai.com, chatgpt.com Codex, api.openai.com)', () => {
  let oai: FakeOAuthServer;
  beforeAll(async () => {
    oai = await FakeOAuthServer.start({ clientId: CODEX_CLIENT });
  });
  afterAll(async () => {
    await oai.close();
  });

  const refreshForm = (rt: string, clientId = CODEX_CLIENT) => post(oai.tokenUrl, new URLSearchParams({ grant_type: 'refresh_token', refresh_token: rt, client_id: clientId }).toString(), FORM);
  const refreshJson = (rt: string) => post(oai.tokenUrl, { grant_type: 'refresh_token', refresh_token: rt, client_id: CODEX_CLIENT }, JSON_CT);

  it('accepts a form and a JSON body, rotates, and refuses the rotated token with the nested 401 refresh_token_reused', async () => {
    const { refresh_token: rt0 } = oai.issue('alice');
    const a = await refreshForm(rt0);
    expect(a.status).toBe(200);
    expect(a.json.refresh_token).not.toBe(rt0);
    const b = await refreshJson(a.json.refresh_token);
    expect(b.status).toBe(200);
    expect(b.json).toMatchObject({ token_type: 'Bearer', expires_in: expect.any(Number) });
    const reusesBefore = oai.reuses;
    const reused = await refreshJson(rt0);
    expect(reused.status).toBe(401);
    expect(reused.json).toEqual({
      error: {
        message: 'Your refresh token has already been used to generate a new access token. Please try signing in again.',
        type: 'invalid_request_error',
        param: null,
        code: 'refresh_token_reused',
      },
    });
    expect(oai.reuses).toBe(reusesBefore + 1);
    expect(oai.reusedBy.at(-1)).toBe('alice');
    expect(oai.presentedCount(rt0)).toBe(2);
    expect(oai.liveTokenOf('alice')).toBe(b.json.refresh_token);
    // What the token endpoint read, compared exactly, and the request as sent beside it.
    expect(oai.requests.at(-1)).toEqual({ grant_type: 'refresh_token', client_id: CODEX_CLIENT, refresh_token: rt0 });
    expect(oai.requests.at(-1)!.headers['content-type']).toBe('application/json');
    expect(oai.requests.at(-1)!.path).toBe('/oauth/token');
  });

  it('puts the ChatGPT account id in the access and id tokens', async () => {
    const { refresh_token } = oai.issue('bob');
    const r = await refreshForm(refresh_token);
    expect(oai.accountIdOf('bob')).toBe('acct-bob');
    expect(jwtClaims(r.json.access_token)['https://api.openai.com/auth']).toEqual({ chatgpt_account_id: 'acct-bob' });
    expect(jwtClaims(r.json.id_token)['https://api.openai.com/auth']).toEqual({ chatgpt_account_id: 'acct-bob' });
  });

  it('refuses other content types, a missing client_id, unknown, revoked and faulted tokens in their own shapes', async () => {
    const { refresh_token: rt } = oai.issue('carol');
    const text = await post(oai.tokenUrl, `grant_type=refresh_token&refresh_token=${rt}&client_id=${CODEX_CLIENT}`, { 'content-type': 'text/plain' });
    expect(text.status).toBe(400);
    expect(text.json).toEqual({ error: { message: 'Unsupported content type', type: 'invalid_request_error', param: null, code: null } });
    const noClient = await post(oai.tokenUrl, new URLSearchParams({ grant_type: 'refresh_token', refresh_token: rt }).toString(), FORM);
    expect([noClient.status, noClient.json]).toEqual([400, { error: 'invalid_request', error_description: 'Missing required parameter: client_id' }]);
    const unknown = await refreshForm('rt_never_issued');
    expect([unknown.status, unknown.json.error]).toEqual([400, 'invalid_grant']);
    oai.revoke(rt);
    const revoked = await refreshForm(rt);
    expect(revoked.status).toBe(401);
    expect(revoked.json.error).toMatchObject({ type: 'invalid_request_error', param: null, code: 'refresh_token_invalidated' });
    const { refresh_token: rt2 } = oai.issue('dave');
    oai.fail('bare_401', 1, (t) => t === rt2);
    const bare = await refreshForm(rt2);
    expect([bare.status, bare.text]).toEqual([401, '']);
    oai.fail('expired_401', 1, (t) => t === rt2);
    const expired = await refreshForm(rt2);
    expect([expired.status, expired.json.error.code]).toEqual([401, 'refresh_token_expired']);
    // Faults did not consume the grant: it still refreshes.
    expect((await refreshForm(rt2)).status).toBe(200);
  });

  const codexBody = (over: Record<string, unknown> = {}) => ({
    model: 'gpt-5-codex',
    instructions: 'You are Codex.',
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'What is 6 * 7?' }] }],
    stream: true,
    store: false,
    ...over,
  });
  const codex = (token: string, body: object, account: string | null = oai.accountIdOf('erin')) =>
    post(`${oai.apiUrl}/responses`, body, { ...JSON_CT, authorization: `Bearer ${token}`, accept: 'text/event-stream', ...(account !== null ? { 'chatgpt-account-id': account } : {}) });

  it('the Codex endpoint refuses unknown and expired tokens, a missing or foreign account id, store:true, stream:false, no instructions, bad input', async () => {
    const { access_token } = oai.issue('erin');
    expect(await codex('not-a-token', codexBody())).toMatchObject({ status: 401, json: { detail: 'Could not parse your authentication token. Please try signing in again.' } });
    const { access_token: stale } = oai.issue('erin', 0);
    const expired = await codex(stale, codexBody());
    expect(expired.status).toBe(401);
    expect(expired.json).toEqual({ error: { message: 'Provided authentication token is expired. Please try signing in again.', type: null, code: 'token_expired', param: null } });
    expect((await codex(access_token, codexBody(), null)).status).toBe(403);
    expect((await codex(access_token, codexBody(), null)).json.detail).toEqual(expect.any(String));
    expect((await codex(access_token, codexBody(), oai.accountIdOf('someone-else'))).status).toBe(403);
    expect(await codex(access_token, codexBody({ store: true }))).toMatchObject({ status: 400, json: { detail: 'Store must be set to false' } });
    expect(await codex(access_token, codexBody({ store: undefined }))).toMatchObject({ status: 400, json: { detail: 'Store must be set to false' } });
    expect(await codex(access_token, codexBody({ stream: false }))).toMatchObject({ status: 400, json: { detail: 'Stream must be set to true' } });
    expect(await codex(access_token, codexBody({ instructions: '' }))).toMatchObject({ status: 400, json: { detail: 'Instructions are required' } });
    expect((await codex(access_token, codexBody({ input: [] }))).status).toBe(400);
    expect((await codex(access_token, codexBody({ input: [{ role: 'user', content: 'hi' }] }))).status).toBe(400);
  });

  it('a good Codex request streams the answer and ends in response.completed', async () => {
    const { access_token } = oai.issue('erin');
    const r = await codex(access_token, codexBody());
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('text/event-stream');
    const evs = events(r.text);
    expect(evs[0]!.event).toBe('response.created');
    for (const e of evs) expect(e.data.type).toBe(e.event);
    expect(evs.filter((e) => e.event === 'response.output_text.delta').map((e) => e.data.delta)).toEqual(['42']);
    expect(evs.at(-1)!.event).toBe('response.completed');
    expect(evs.at(-1)!.data.response).toMatchObject({ status: 'completed', output: [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: '42' }] }] });
    // A refreshed token works there too.
    const refreshed = await refreshForm(oai.liveTokenOf('erin')!);
    expect((await codex(refreshed.json.access_token, codexBody())).status).toBe(200);
  });

  it('Codex behaviours: usage limit with its reset, 503 for overload, wrong answers', async () => {
    const { access_token: limited } = oai.issue('erin');
    const resetAt = Math.floor(Date.now() / 1000) + 1234;
    oai.setBehaviour(limited, { mode: 'rate_limited', resetAt });
    const r = await codex(limited, codexBody());
    expect(r.status).toBe(429);
    expect(r.headers.get('x-codex-primary-used-percent')).toBe('100');
    expect(Number(r.headers.get('x-codex-primary-reset-after-seconds'))).toBeGreaterThan(1200);
    expect(r.json.error).toMatchObject({ type: 'usage_limit_reached', plan_type: 'plus', resets_at: resetAt, resets_in_seconds: expect.any(Number) });
    const { access_token: busy } = oai.issue('erin');
    oai.setBehaviour(busy, { mode: 'overloaded' });
    expect(await codex(busy, codexBody())).toMatchObject({ status: 503, json: { detail: 'Service temporarily unavailable' } });
    const { access_token: liar } = oai.issue('erin');
    oai.setBehaviour(liar, { mode: 'wrong_answer' });
    const wrong = events((await codex(liar, codexBody())).text);
    expect(wrong.find((e) => e.event === 'response.output_text.delta')!.data.delta).toBe('43');
  });

  it('api.openai.com refuses a ChatGPT token: Missing scopes: model.request', async () => {
    const { access_token } = oai.issue('frank');
    const r = await post(`${oai.url}/v1/chat/completions`, { model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }, { ...JSON_CT, authorization: `Bearer ${access_token}` });
    expect(r.status).toBe(401);
    expect(r.json).toEqual({ error: { message: 'Missing scopes: model.request', type: 'invalid_request_error', param: null, code: null } });
  });
});

describe('OpenAI API key (ChatUpstream)', () => {
  let up: ChatUpstream;
  beforeAll(async () => {
    up = await ChatUpstream.start();
    up.addApiKey('sk-good');
  });
  afterAll(async () => {
    await up.close();
  });
  const chat = (key: string | null, body: object) => post(`${up.url}/v1/chat/completions`, body, { ...JSON_CT, ...(key ? { authorization: `Bearer ${key}` } : {}) });
  const challenge = {
    model: 'gpt-4o-mini',
    messages: [
      { role: 'system', content: 'Answer with a number.' },
      { role: 'user', content: 'What is 19 + 23?' },
    ],
    max_tokens: 8,
  };

  it('answers the arithmetic challenge, and wrongly in wrong_answer', async () => {
    const ok = await chat('sk-good', challenge);
    expect(ok.status).toBe(200);
    expect(ok.json.choices[0].message.content).toBe('42');
    up.setBehaviour('sk-liar', { mode: 'wrong_answer' });
    expect((await chat('sk-liar', challenge)).json.choices[0].message.content).toBe('43');
    expect(up.count('sk-good')).toBe(1);
    expect(up.requests.at(-1)!.headers.authorization).toBe('Bearer sk-liar');
  });

  it('refuses a missing key and a malformed body; rate limits in OpenAI’s shape', async () => {
    expect((await chat(null, challenge)).status).toBe(401);
    expect((await chat('sk-good', { model: 'gpt-4o-mini', messages: [] })).status).toBe(400);
    up.setBehaviour('sk-limited', { mode: 'rate_limited' });
    const r = await chat('sk-limited', challenge);
    expect(r.status).toBe(429);
    expect(r.json.error.code).toBe('rate_limit_exceeded');
  });

  it('refuses a key it does not know with 401 invalid_api_key, quoting it redacted; after a missing key, before the body', async () => {
    const stranger = 'sk-proj-stranger-abcdefghijklmnopqrstuvwxyz-0123wxyz';
    const before = up.requests.length;
    const r = await chat(stranger, challenge);
    expect(r.status).toBe(401);
    expect(r.json).toEqual({
      error: {
        message: `Incorrect API key provided: sk-proj-${'*'.repeat(40)}wxyz. You can find your API key at https://platform.openai.com/account/api-keys.`,
        type: 'invalid_request_error',
        param: null,
        code: 'invalid_api_key',
      },
    });
    expect(r.text).not.toContain(stranger);
    expect(r.text).not.toContain('stranger');
    // Still counted as arrived: in the request log and the per-key hits.
    expect(up.requests.length).toBe(before + 1);
    expect(up.requests.at(-1)!.headers.authorization).toBe(`Bearer ${stranger}`);
    expect(up.count(stranger)).toBe(1);
    // No key at all is its own refusal (checked first); a key is checked before the body: a malformed body
    // from a stranger is still invalid_api_key, from a known key a 400.
    expect((await chat(null, { model: 'gpt-4o-mini', messages: [] })).json.error).toMatchObject({ message: expect.stringMatching(/^You didn't provide an API key/), code: null });
    expect((await chat(stranger, { model: 'gpt-4o-mini', messages: [] })).json.error.code).toBe('invalid_api_key');
    expect((await chat('sk-good', { model: 'gpt-4o-mini', messages: [] })).status).toBe(400);
    // setDefault is the behaviour of known keys only: a stranger never gets it.
    up.setDefault({ mode: 'wrong_answer' });
    try {
      expect((await chat(stranger, challenge)).status).toBe(401);
      expect((await chat('sk-good', challenge)).json.choices[0].message.content).toBe('43');
    } finally {
      up.setDefault({ mode: 'ok' });
    }
    // A known key still gets its completion.
    const ok = await chat('sk-good', challenge);
    expect(ok.status).toBe(200);
    expect(ok.json.choices[0].message.content).toBe('42');
  });
});

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

describe('Google (FakeGoogle: oauth2.googleapis.com, Code Assist, Generative Language)', () => {
  let g: FakeGoogle;
  beforeAll(async () => {
    g = await FakeGoogle.start();
    g.addApiKey('AIza-good');
    g.addApiKey('AIza-liar');
    g.setBehaviour('AIza-liar', { mode: 'wrong_answer' });
  });
  afterAll(async () => {
    await g.close();
  });

  const refresh = (rt: string, over: Record<string, string> = {}) =>
    post(g.tokenUrl, new URLSearchParams({ grant_type: 'refresh_token', refresh_token: rt, client_id: GEMINI_CLI_CLIENT_ID, client_secret: GEMINI_CLI_CLIENT_SECRET, ...over }).toString(), FORM);
  const contents = (text: string) => [{ role: 'user', parts: [{ text }] }];
  const codeAssist = (token: string, body: object, query = '?alt=sse') =>
    post(`${g.apiUrl}/v1internal:streamGenerateContent${query}`, body, { ...JSON_CT, authorization: `Bearer ${token}`, 'user-agent': 'GeminiCLI/0.20.0' });

  it('refuses JSON, a missing client_secret, a wrong secret, another grant, revoked tokens', async () => {
    const { refresh_token: rt } = g.issue('gus', { projectId: 'proj-gus' });
    const json = await post(g.tokenUrl, { grant_type: 'refresh_token', refresh_token: rt, client_id: GEMINI_CLI_CLIENT_ID, client_secret: GEMINI_CLI_CLIENT_SECRET }, JSON_CT);
    expect([json.status, json.json]).toEqual([400, { error: 'invalid_request', error_description: 'Invalid content type' }]);
    const noSecret = await post(g.tokenUrl, new URLSearchParams({ grant_type: 'refresh_token', refresh_token: rt, client_id: GEMINI_CLI_CLIENT_ID }).toString(), FORM);
    expect([noSecret.status, noSecret.json]).toEqual([400, { error: 'invalid_request', error_description: 'client_secret is missing.' }]);
    expect(await refresh(rt, { client_secret: 'GOCSPX-wrong' })).toMatchObject({ status: 401, json: { error: 'invalid_client', error_description: 'Unauthorized' } });
    expect(await refresh(rt, { grant_type: 'password' })).toMatchObject({ status: 400, json: { error: 'unsupported_grant_type' } });
    expect(await refresh('1//never')).toMatchObject({ status: 400, json: { error: 'invalid_grant', error_description: 'Token has been expired or revoked.' } });
    g.revoke(rt);
    expect(await refresh(rt)).toMatchObject({ status: 400, json: { error: 'invalid_grant', error_description: 'Token has been expired or revoked.' } });
  });

  it('does not rotate: the same refresh token works twice and the reply has no refresh_token', async () => {
    const { refresh_token: rt } = g.issue('hal', { projectId: 'proj-hal' });
    const a = await refresh(rt);
    const b = await refresh(rt);
    for (const r of [a, b]) {
      expect(r.status).toBe(200);
      expect(r.json).not.toHaveProperty('refresh_token');
      expect(r.json).toMatchObject({
        access_token: expect.stringMatching(/^ya29\./),
        expires_in: 3599,
        token_type: 'Bearer',
        scope: expect.stringContaining('https://www.googleapis.com/auth/cloud-platform'),
      });
      expect(jwtClaims(r.json.id_token)).toMatchObject({ sub: 'hal', aud: GEMINI_CLI_CLIENT_ID });
    }
    expect(a.json.access_token).not.toBe(b.json.access_token);
    expect(g.presentedCount(rt)).toBe(2);
    // Both access tokens work.
    for (const r of [a, b]) expect((await codeAssist(r.json.access_token, { model: 'gemini-2.5-pro', project: 'proj-hal', request: { contents: contents('hi') } })).status).toBe(200);
  });

  it('Code Assist refuses a bad token, no alt=sse, a missing project, another project, an account without one', async () => {
    const { access_token } = g.issue('ivy', { projectId: 'proj-ivy' });
    const body = { model: 'gemini-2.5-pro', project: 'proj-ivy', request: { contents: contents('What is 2 + 2?') } };
    const bad = await codeAssist('ya29.nope', body);
    expect([bad.status, bad.json.error.status]).toEqual([401, 'UNAUTHENTICATED']);
    expect(bad.json.error.code).toBe(401);
    const { access_token: stale } = g.issue('ivy', { projectId: 'proj-ivy', lifetimeSec: 0 });
    expect((await codeAssist(stale, body)).status).toBe(401);
    expect((await codeAssist(access_token, body, '')).status).toBe(400);
    expect(await codeAssist(access_token, { ...body, project: undefined })).toMatchObject({ status: 400, json: { error: { code: 400, status: 'INVALID_ARGUMENT' } } });
    expect(await codeAssist(access_token, { ...body, project: 'proj-other' })).toMatchObject({
      status: 403,
      json: { error: { code: 403, message: 'Permission denied on resource project proj-other.', status: 'PERMISSION_DENIED' } },
    });
    const { access_token: noProject } = g.issue('jay');
    expect((await codeAssist(noProject, { ...body, project: 'proj-ivy' })).status).toBe(403);
    expect((await codeAssist(access_token, { ...body, request: { contents: [] } })).status).toBe(400);
  });

  it('Code Assist streams the answer over two events in the response wrapper, finishReason only in the last', async () => {
    const { access_token } = g.issue('kim', { projectId: 'proj-kim' });
    const r = await codeAssist(access_token, { model: 'gemini-2.5-pro', project: 'proj-kim', request: { contents: contents('What is 1000 + 337?') } });
    expect([r.status, r.headers.get('content-type')]).toEqual([200, 'text/event-stream']);
    const evs = events(r.text);
    expect(evs).toHaveLength(2);
    expect(evs.every((e) => e.event === null && e.data.response?.candidates?.[0]?.content?.role === 'model')).toBe(true);
    expect(evs.map((e) => e.data.response.candidates[0].content.parts[0].text).join('')).toBe('1337');
    expect(evs.map((e) => e.data.response.candidates[0].finishReason)).toEqual([undefined, 'STOP']);
    expect(evs[1]!.data.response.usageMetadata).toMatchObject({ promptTokenCount: expect.any(Number), totalTokenCount: expect.any(Number) });
  });

  it('Generative Language with a bearer streams without the wrapper', async () => {
    const { access_token } = g.issue('lou');
    const r = await post(
      `${g.generativeUrl}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse`,
      { contents: contents('What is 3 * 14?') },
      { ...JSON_CT, authorization: `Bearer ${access_token}` },
    );
    expect(r.status).toBe(200);
    const evs = events(r.text);
    expect(evs.every((e) => e.data.response === undefined && Array.isArray(e.data.candidates))).toBe(true);
    expect(evs.map((e) => e.data.candidates[0].content.parts[0].text).join('')).toBe('42');
    expect(evs.at(-1)!.data.candidates[0].finishReason).toBe('STOP');
    expect(
      (await post(`${g.generativeUrl}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse`, { contents: contents('hi') }, { ...JSON_CT, authorization: 'Bearer ya29.nope' })).status,
    ).toBe(401);
  });

  it('API key: generateContent answers the challenge (wrongly in wrong_answer), refuses missing and unknown keys', async () => {
    const url = `${g.generativeUrl}/v1beta/models/gemini-2.5-flash:generateContent`;
    const body = { contents: contents('What is 50 - 8? Answer with the number only.') };
    const ok = await post(url, body, { ...JSON_CT, 'x-goog-api-key': 'AIza-good' });
    expect(ok.status).toBe(200);
    expect(ok.json).toMatchObject({ candidates: [{ content: { parts: [{ text: '42' }], role: 'model' }, finishReason: 'STOP', index: 0 }], modelVersion: 'gemini-2.5-flash' });
    expect((await post(url, body, { ...JSON_CT, 'x-goog-api-key': 'AIza-liar' })).json.candidates[0].content.parts[0].text).toBe('43');
    const badKey = { error: { code: 400, message: 'API key not valid. Please pass a valid API key.', status: 'INVALID_ARGUMENT' } };
    expect(await post(url, body, { ...JSON_CT, 'x-goog-api-key': 'AIza-unknown' })).toMatchObject({ status: 400, json: badKey });
    expect(await post(url, body, JSON_CT)).toMatchObject({ status: 400, json: badKey });
  });

  it('behaviours: 429 RESOURCE_EXHAUSTED, 503 UNAVAILABLE; hang never answers', async () => {
    const url = `${g.generativeUrl}/v1beta/models/gemini-2.5-flash:generateContent`;
    const body = { contents: contents('hi') };
    for (const k of ['k-limited', 'k-busy', 'k-hang']) g.addApiKey(k);
    g.setBehaviour('k-limited', { mode: 'rate_limited' });
    g.setBehaviour('k-busy', { mode: 'overloaded' });
    g.setBehaviour('k-hang', { mode: 'hang' });
    expect(await post(url, body, { ...JSON_CT, 'x-goog-api-key': 'k-limited' })).toMatchObject({
      status: 429,
      json: { error: { code: 429, message: 'Resource has been exhausted (e.g. check quota).', status: 'RESOURCE_EXHAUSTED' } },
    });
    expect(await post(url, body, { ...JSON_CT, 'x-goog-api-key': 'k-busy' })).toMatchObject({ status: 503, json: { error: { status: 'UNAVAILABLE' } } });
    // The client's own deadline is the only way out of a hang: the fake must not answer late, or at all.
    await expect(fetch(url, { method: 'POST', headers: { ...JSON_CT, 'x-goog-api-key': 'k-hang' }, body: JSON.stringify(body), signal: AbortSignal.timeout(300) })).rejects.toThrow();
  });
});
