import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../modules/area.js';
import type { AdminServices } from './wiring.js';
import { Forbidden, badRequest } from '../../errors/app-error.js';
import { sessionToken } from '../../http/auth.js';
import { clearSessionCookies, sameSecret, setSessionCookies } from '../../http/console-cookie.js';
import { empty, json, route } from '../../http/contract.js';

// A strict boolean: `{"cookie": "yes"}` once fell through to a bearer token in the body (issue 51).
const createBody = z
  .object({ cookie: z.boolean({ message: 'expected true or false' }).optional().meta({ description: 'true (the console): set the HttpOnly session cookie and answer only the CSRF token' }) })
  .strict();
const time = z.iso.datetime({ offset: true });
const Created = z.union([
  z.object({ id: z.string(), token: z.string().meta({ description: 'the session token: send it as `Authorization: Bearer`' }), expires_at: time }),
  z.object({ id: z.string(), expires_at: time, csrf_token: z.string().meta({ description: 'send it as `X-CSRF-Token` on state-changing calls' }) }),
]);
const Via = z.enum(['cookie', 'bearer']);
const tag = 'sessions';

/**
 * Admin sessions. `POST /sessions` answers the token in the body; with `{"cookie": true}` (the console)
 * it sets the HttpOnly session cookie instead and answers only the CSRF token, so page scripts never hold the secret.
 */
export function registerSessionRoutes(api: FastifyInstance, deps: Pick<RouteDeps<AdminServices>, 'adminToken' | 'config' | 'log' | 'services'>): void {
  // Only the admin token mints sessions: a session cannot outlive its parent's revocation by minting a child.
  route(
    api,
    {
      method: 'POST',
      path: '/sessions',
      operationId: 'createSession',
      summary: 'Sign in: mint a session (admin token only)',
      tag,
      body: createBody,
      responses: {
        201: json(Created, {
          description: 'the session: its token, or (`cookie: true`) the cookie set and its CSRF token',
          headers: { 'Set-Cookie': 'with `cookie: true`: the session and CSRF cookies' },
        }),
      },
      errors: { 403: '`forbidden`: sessions are minted with the admin token only; `csrf_failed` without the X-CSRF-Token header' },
    },
    async ({ body }, req, reply) => {
      const auth = sessionToken(req);
      if (!auth || auth.viaCookie || !deps.adminToken || !sameSecret(auth.token, deps.adminToken)) {
        throw new Forbidden('forbidden', 'sessions are created with the admin token only, not with a session token');
      }
      const { cookie } = body;
      const ttl = deps.config.admin.session_ttl_minutes;
      const s = await deps.services.sessions.create(ttl, deps.adminToken);
      const expires_at = s.expiresAt.toISOString();
      if (cookie === true) {
        const csrf = setSessionCookies(req, reply, s.token, ttl * 60);
        return reply.code(201).send({ id: s.id, expires_at, csrf_token: csrf });
      }
      return reply.code(201).send({ id: s.id, token: s.token, expires_at });
    },
  );

  route(
    api,
    {
      method: 'GET',
      path: '/sessions/current',
      operationId: 'getCurrentSession',
      summary: 'Who is signed in, and how',
      tag,
      responses: { 200: json(z.object({ signed_in: z.literal(true), via: Via })) },
    },
    async (_input, req) => ({ signed_in: true, via: sessionToken(req)?.viaCookie ? 'cookie' : 'bearer' }),
  );

  // Ends every session at once (a leaked cookie, a departed admin), the caller's own included; the admin token still works.
  route(
    api,
    {
      method: 'POST',
      path: '/sessions/revoke-all',
      operationId: 'revokeAllSessions',
      summary: "End every session at once, the caller's own included (the admin token still works)",
      tag,
      responses: { 200: json(z.object({ revoked: z.number().int() })) },
    },
    async (_input, req, reply) => {
      const revoked = await deps.services.sessions.revokeAll();
      deps.log.warn({ revoked, via: sessionToken(req)?.viaCookie ? 'cookie' : 'bearer' }, 'all admin sessions revoked');
      if (sessionToken(req)?.viaCookie) clearSessionCookies(reply);
      return { revoked };
    },
  );

  route(
    api,
    {
      method: 'DELETE',
      path: '/sessions/current',
      operationId: 'deleteCurrentSession',
      summary: 'Sign out: revoke the calling session',
      tag,
      responses: { 204: empty('signed out (the console cookie cleared)') },
      errors: { 400: '`bad_request`: the admin token is not a session' },
    },
    async (_input, req, reply) => {
      const auth = sessionToken(req)!;
      if (!auth.viaCookie && auth.token === deps.adminToken) {
        badRequest('bad_request', 'the admin token is not a session; only session tokens can be revoked');
      }
      await deps.services.sessions.revoke(auth.token);
      if (auth.viaCookie) clearSessionCookies(reply);
      return reply.code(204).send();
    },
  );
}
