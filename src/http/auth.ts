import { timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Runtime } from '../app/runtime.js';

function sameSecret(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export function bearer(req: FastifyRequest): string | null {
  const h = req.headers.authorization;
  if (!h) return null;
  const m = /^Bearer\s+(.+)$/i.exec(h);
  return m ? m[1]!.trim() : null;
}

/** `/api/v1` accepts the admin token or a live admin session token, as a Bearer header. */
export function requireAdmin(rt: Runtime) {
  return async (req: FastifyRequest, reply: FastifyReply) => {
    if (!rt.adminToken) {
      return reply.code(401).send({ error: { code: 'admin_api_disabled', message: 'the admin API is disabled: set RELAY_JOBS_ADMIN_TOKEN on this replica' } });
    }
    const token = bearer(req);
    if (!token && req.headers.authorization) {
      // The header is there but not in the Bearer form: say that, instead of "missing".
      return reply.code(401).send({ error: { code: 'unauthorized', message: 'the Authorization header must be "Bearer <token>" (the word Bearer, a space, then the token)' } });
    }
    if (!token) return reply.code(401).send({ error: { code: 'unauthorized', message: 'missing "Authorization: Bearer <token>" header' } });
    if (sameSecret(token, rt.adminToken)) return;
    if (await rt.sessions.verify(token)) return;
    return reply.code(401).send({ error: { code: 'unauthorized', message: 'invalid or expired token' } });
  };
}
