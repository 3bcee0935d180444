import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeGoogle, GEMINI_CLI_CLIENT_ID, GEMINI_CLI_CLIENT_SECRET } from './fixtures/providers/gemini.js';
import { events, FORM, JSON_CT, jwtClaims, post } from './helpers/provider-fakes.js';

// The Google stand-in (FakeGoogle): oauth2.googleapis.com's token endpoint (Gemini CLI sign-in),
// Code Assist, and the Generative Language API with a bearer or an API key. The fakes stand in
// for the providers in every adapter test, so their strictness is itself tested: a fake that
// accepted what the provider refuses would let a broken adapter pass.

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
