import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { AdminServices } from './wiring.js';
import { Forbidden, badRequest } from '../../errors/app-error.js';
import { sessionToken } from '../../http/auth.js';
import { clearSessionCookies, sameSecret, setSessionCookies } from '../../http/console-cookie.js';
import { parseBody } from '../../http/validation.js';

// A strict boolean: `{"cookie": "yes"}` once fell through to a bearer token in the body (issue 51).
const createBody = z.object({ cookie: z.boolean({ message: 'expected true or false' }).optional() }).strict();

/**
 * Admin sessions. `POST /sessions` answers the token in the body; with `{"cookie": true}` (the console)
 * it sets the HttpOnly session cookie instead and answers only the CSRF token, so page scripts never hold the secret.
 */
export function registerSessionRoutes(api: FastifyInstance, deps: Pick<RouteDeps<AdminServices>, 'adminToken' | 'config' | 'log' | 'services'>): void {
  // Only the admin token mints sessions: a session cannot outlive its parent's revocation by minting a child.
  api.post('/sessions', async (req, reply) => {
    const auth = sessionToken(req);
    if (!auth || auth.viaCookie || !deps.adminToken || !sameSecret(auth.token, deps.adminToken)) {
      throw new Forbidden('forbidden', 'sessions are created with the admin token only, not with a session token');
    }
    const { cookie } = parseBody(createBody, req.body);
    const ttl = deps.config.admin.session_ttl_minutes;
    const s = await deps.services.sessions.create(ttl, deps.adminToken);
    const expires_at = s.expiresAt.toISOString();
    if (cookie === true) {
      const csrf = setSessionCookies(req, reply, s.token, ttl * 60);
      return reply.code(201).send({ id: s.id, expires_at, csrf_token: csrf });
    }
    return reply.code(201).send({ id: s.id, token: s.token, expires_at });
  });

  api.get('/sessions/current', async (req) => ({ signed_in: true, via: sessionToken(req)?.viaCookie ? 'cookie' : 'bearer' }));

  // Ends every session at once (a leaked cookie, a departed admin), the caller's own included; the admin token still works.
  api.post('/sessions/revoke-all', async (req, reply) => {
    const revoked = await deps.services.sessions.revokeAll();
    deps.log.warn({ revoked, via: sessionToken(req)?.viaCookie ? 'cookie' : 'bearer' }, 'all admin sessions revoked');
    if (sessionToken(req)?.viaCookie) clearSessionCookies(reply);
    return { revoked };
  });

  api.delete('/sessions/current', async (req, reply) => {
    const auth = sessionToken(req)!;
    if (!auth.viaCookie && auth.token === deps.adminToken) {
      badRequest('bad_request', 'the admin token is not a session; only session tokens can be revoked');
    }
    await deps.services.sessions.revoke(auth.token);
    if (auth.viaCookie) clearSessionCookies(reply);
    return reply.code(204).send();
  });
}
