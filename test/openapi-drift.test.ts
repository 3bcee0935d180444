import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Fastify, { type FastifyInstance } from 'fastify';
import { z } from 'zod';
import { json, empty, media, route, contractOf } from '../src/http/contract.js';
import { ContractChecker, contractCheckHook } from '../src/http/contract-check.js';
import { operationDocument, type DocumentedRoute } from '../src/http/openapi.js';
import { handleError } from '../src/http/errors.js';
import { Conflict, notFound } from '../src/errors/app-error.js';
import { silentLogger } from '../src/telemetry/logger.js';

const Thing = z.object({ id: z.number().int(), name: z.string(), note: z.string().nullable(), at: z.iso.datetime({ offset: true }) }).meta({ id: 'TestThing' });

/** What the handler sends for each `?send=`: the contract's answer, and the ways it can drift. */
const ANSWERS: Record<string, unknown> = {
  ok: { id: 1, name: 'a', note: null, at: '2027-01-31T00:00:00Z' },
  renamed: { id: 1, title: 'a', note: null, at: '2027-01-31T00:00:00Z' },
  extra: { id: 1, name: 'a', note: null, at: '2027-01-31T00:00:00Z', secret_hint: 'x' },
  mistyped: { id: '1', name: 'a', note: null, at: '2027-01-31T00:00:00Z' },
  nested: { id: 1, name: 'a', note: 5, at: 'yesterday' },
};

/**
 * Issue 52, the response check itself (src/http/contract-check.ts), on a real Fastify server with
 * the real error handler and the real document generator: a drifted field or status is a 500
 * `contract_violation` naming the route and the field. The whole suite runs with the check on
 * (vitest.config.ts), so every test that touches a drifted answer of the real API fails the same way.
 */
describe('contract check: a drifted answer is caught', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = Fastify();
    const routes: DocumentedRoute[] = [];
    app.addHook('onRoute', (r) => void routes.push({ method: String(r.method), url: r.url, contract: contractOf(r.config) }));
    app.setErrorHandler(handleError(silentLogger()));
    app.addHook('onSend', contractCheckHook(new ContractChecker((method, path) => operationDocument(routes, method, path, '0.0.0')), silentLogger()));
    route(
      app,
      {
        method: 'GET',
        path: '/things/:id',
        operationId: 'getThing',
        summary: 'A thing',
        tag: 'meta',
        params: z.object({ id: z.string() }),
        query: z.strictObject({ send: z.string().optional() }),
        responses: { 200: json(Thing) },
        errors: { 404: 'no such thing' },
      },
      async ({ params, query }, _req, reply) => {
        if (params.id === '404') notFound('no thing 404');
        if (params.id === '409') throw new Conflict('busy', 'an undeclared conflict');
        if (query.send === 'text') return reply.type('text/plain').send('hello');
        return ANSWERS[query.send ?? 'ok'];
      },
    );
    route(
      app,
      { method: 'DELETE', path: '/things/:id', operationId: 'deleteThing', summary: 'Delete', tag: 'meta', params: z.object({ id: z.string() }), responses: { 204: empty() } },
      async (_i, _req, reply) => reply.code(204).send(),
    );
    route(app, { method: 'GET', path: '/page', operationId: 'page', summary: 'HTML', tag: 'meta', responses: { 200: media('text/html; charset=utf-8', 'a page') } }, async (_i, _req, reply) =>
      reply.type('text/html; charset=utf-8').send('<p>hi</p>'),
    );
    await app.ready();
  });
  afterAll(async () => app?.close());

  const get = (url: string) => app.inject({ url });

  it('a conforming answer, a declared error, a 204 and an HTML page pass unchanged', async () => {
    expect((await get('/things/1')).json()).toEqual(ANSWERS.ok);
    const missing = await get('/things/404');
    expect(missing.statusCode).toBe(404);
    expect(missing.json().error.code).toBe('not_found');
    expect((await app.inject({ method: 'DELETE', url: '/things/1' })).statusCode).toBe(204);
    expect((await get('/page')).body).toBe('<p>hi</p>');
    // A 400 from the contract's own query schema is implied on every route.
    const bad = await get('/things/1?other=1');
    expect(bad.statusCode, bad.body).toBe(400);
  });

  it.each([
    ['renamed', 'name: required field missing', 'title: undocumented field'],
    ['extra', 'secret_hint: undocumented field', undefined],
    ['mistyped', 'id: must be integer', undefined],
    ['nested', 'note: must be string', 'at: must match pattern'],
  ])('a %s field is a 500 contract_violation naming it', async (send, first, second) => {
    const res = await get(`/things/1?send=${send}`);
    expect(res.statusCode).toBe(500);
    const { error } = res.json();
    expect(error.code).toBe('contract_violation');
    expect(error.message).toContain('GET /things/:id (getThing) broke its contract');
    expect(error.message).toContain(first);
    if (second) expect(error.message).toContain(second);
  });

  it('an undeclared status and an undeclared media type are violations too', async () => {
    const conflict = await get('/things/409');
    expect(conflict.statusCode).toBe(500);
    expect(conflict.json().error.message).toContain('status 409 is not declared (declared: 200, 400, 404, 500)');
    const text = await get('/things/1?send=text');
    expect(text.statusCode).toBe(500);
    expect(text.json().error.message).toContain('status 200 is sent as text/plain, the document declares application/json');
  });
});
