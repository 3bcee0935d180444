import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';

/** The console's session cookie (HttpOnly: page scripts never see the token) and its CSRF companion. */
export const SESSION_COOKIE = 'relay_console_session';
/** Readable by the page, sent back as the `X-CSRF-Token` header on state-changing calls. */
export const CSRF_COOKIE = 'relay_console_csrf';
export const CSRF_HEADER = 'x-csrf-token';

export function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The CSRF token is derived from the secret session token: a cross-site page can neither read nor compute it. */
export function csrfFor(sessionToken: string): string {
  return createHash('sha256').update(`relay-jobs-console-csrf:${sessionToken}`).digest('base64url');
}

export function readCookie(req: FastifyRequest, name: string): string | null {
  const header = req.headers.cookie;
  if (!header) return null;
  for (const part of header.split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) return decodeURIComponent(part.slice(i + 1).trim());
  }
  return null;
}

function secure(req: FastifyRequest): boolean {
  return req.protocol === 'https' || req.headers['x-forwarded-proto'] === 'https';
}

/** Sets both cookies for a new session; SameSite=Strict so no cross-site request carries them. */
export function setSessionCookies(req: FastifyRequest, reply: FastifyReply, token: string, maxAgeSeconds: number): string {
  const csrf = csrfFor(token);
  const common = `Path=/; Max-Age=${maxAgeSeconds}; SameSite=Strict${secure(req) ? '; Secure' : ''}`;
  void reply.header('set-cookie', [`${SESSION_COOKIE}=${token}; HttpOnly; ${common}`, `${CSRF_COOKIE}=${csrf}; ${common}`]);
  return csrf;
}

export function clearSessionCookies(reply: FastifyReply): void {
  const gone = 'Path=/; Max-Age=0; SameSite=Strict';
  void reply.header('set-cookie', [`${SESSION_COOKIE}=; HttpOnly; ${gone}`, `${CSRF_COOKIE}=; ${gone}`]);
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** True when a cookie-authenticated request may proceed: safe methods always, others with the matching CSRF header. */
export function csrfOk(req: FastifyRequest, sessionToken: string): boolean {
  if (SAFE_METHODS.has(req.method)) return true;
  const sent = req.headers[CSRF_HEADER];
  return typeof sent === 'string' && sameSecret(sent, csrfFor(sessionToken));
}
