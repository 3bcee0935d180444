import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { ChatUpstream } from './fixtures/chat-upstream.js';
import { answerFor } from './fixtures/providers/answer.js';
import { events, FORM, JSON_CT, jwtClaims, post } from './helpers/provider-fakes.js';

// The OpenAI stand-ins: the ChatGPT sign-in's token endpoint and the Codex and api.openai.com
// endpoints (FakeOAuthServer), the API-key chat completions upstream (ChatUpstream), and the
// arithmetic answer every fake gives. The fakes stand in for the providers in every adapter test,
// so their strictness is itself tested: a fake that accepted what the provider refuses would let
// a broken adapter pass.

const CODEX_CLIENT = 'app_EMoamEEZ73f0CkXaXp7hrann';

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
