import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Runtime } from '../app/runtime.js';
import { SESSION_COOKIE, csrfOk, readCookie, sameSecret } from './console-cookie.js';

export function bearer(req: FastifyRequest): string | null {
  const h = req.headers.authorization;
  if (!h) return null;
  const m = /^Bearer\s+(.+)$/i.exec(h);
  return m ? m[1]!.trim() : null;
}

/** The session token a request authenticated with: the Bearer header first, else the console's cookie. */
export function sessionToken(req: FastifyRequest): { token: string; viaCookie: boolean } | null {
  const b = bearer(req);
  if (b) return { token: b, viaCookie: false };
  const c = readCookie(req, SESSION_COOKIE);
  return c ? { token: c, viaCookie: true } : null;
}

/**
 * `/api/v1` accepts the admin token or a live admin session token as a Bearer header, or a live session
 * in the console's HttpOnly cookie; a cookie-authenticated state-changing call must carry the CSRF header.
 */
export function requireAdmin(rt: Runtime) {
  return async (req: FastifyRequest, reply: FastifyReply) => {
    if (!rt.adminToken) {
      return reply.code(401).send({ error: { code: 'admin_api_disabled', message: 'the admin API is disabled: set RELAY_JOBS_ADMIN_TOKEN on this replica' } });
    }
    const auth = sessionToken(req);
    if (!auth && req.headers.authorization) {
      // The header is there but not in the Bearer form: say that, instead of "missing".
      return reply.code(401).send({ error: { code: 'unauthorized', message: 'the Authorization header must be "Bearer <token>" (the word Bearer, a space, then the token)' } });
    }
    if (!auth) return reply.code(401).send({ error: { code: 'unauthorized', message: 'missing "Authorization: Bearer <token>" header' } });
    if (!auth.viaCookie && sameSecret(auth.token, rt.adminToken)) return;
    if (!(await rt.sessions.verify(auth.token, rt.adminToken))) return reply.code(401).send({ error: { code: 'unauthorized', message: 'invalid or expired token' } });
    if (auth.viaCookie && !csrfOk(req, auth.token)) {
      return reply.code(403).send({ error: { code: 'csrf_failed', message: 'a cookie-authenticated state-changing call needs the X-CSRF-Token header' } });
    }
  };
}
