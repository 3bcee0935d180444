import type { FastifyRequest } from 'fastify';
import type { RouteDeps } from '../modules/area.js';
import { AppError, Forbidden } from '../errors/app-error.js';
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
export function requireAdmin(deps: Pick<RouteDeps, 'adminToken' | 'sessions'>) {
  const unauthorized = (code: string, message: string) => new AppError('unauthorized', code, message);
  return async (req: FastifyRequest) => {
    if (!deps.adminToken) throw unauthorized('admin_api_disabled', 'the admin API is disabled: set RELAY_JOBS_ADMIN_TOKEN on this replica');
    const auth = sessionToken(req);
    if (!auth && req.headers.authorization) {
      // The header is there but not in the Bearer form: say that, instead of "missing".
      throw unauthorized('unauthorized', 'the Authorization header must be "Bearer <token>" (the word Bearer, a space, then the token)');
    }
    if (!auth) throw unauthorized('unauthorized', 'missing "Authorization: Bearer <token>" header');
    if (!auth.viaCookie && sameSecret(auth.token, deps.adminToken)) return;
    if (!(await deps.sessions.verify(auth.token, deps.adminToken))) throw unauthorized('unauthorized', 'invalid or expired token');
    if (auth.viaCookie && !csrfOk(req, auth.token)) throw new Forbidden('csrf_failed', 'a cookie-authenticated state-changing call needs the X-CSRF-Token header');
  };
}
