import type { FastifyReply } from 'fastify';
import type { z } from 'zod';

import { InvalidInput } from '../errors/app-error.js';
import { errorBody } from './errors.js';

export type { FieldError } from '../errors/app-error.js';

export function parseBody<S extends z.ZodType>(schema: S, body: unknown, prefix = ''): z.infer<S> {
  const r = schema.safeParse(body ?? {});
  if (r.success) return r.data;
  throw new InvalidInput(
    r.error.issues.map((i) => {
      const path = [prefix, ...i.path.map(String)].filter(Boolean).join('.');
      if (i.code === 'unrecognized_keys') return { field: [path, ...i.keys].filter(Boolean).join('.'), message: `unknown field${i.keys.length > 1 ? 's' : ''} ${i.keys.join(', ')}` };
      return { field: path || '(body)', message: i.message };
    }),
  );
}

/** Route ids are positive integers; anything else is simply not found. */
export function parseId(raw: string): number | null {
  if (!/^[1-9][0-9]{0,15}$/.test(raw)) return null;
  const n = Number(raw);
  return Number.isSafeInteger(n) ? n : null;
}

export function sendError(reply: FastifyReply, status: number, code: string, message: string) {
  return reply.code(status).send(errorBody(code, message));
}
