import type { FastifyReply } from 'fastify';
import { AppError, type ErrorKind } from '../errors/app-error.js';
import type { Logger } from '../telemetry/logger.js';
import { isDataError } from '../store/poison-split.js';

/** The only place an error kind becomes an HTTP status. */
export const STATUS: Record<ErrorKind, number> = {
  invalid: 400,
  unauthorized: 401,
  payment_required: 402,
  not_found: 404,
  conflict: 409,
  too_large: 413,
  rate_limited: 429,
  upstream_failed: 502,
  unavailable: 503,
  timeout: 504,
};

/** The body of every error answer: `{ error: { code, message, fields?, ...details } }`. */
export function errorBody(code: string, message: string, extra: { fields?: unknown; details?: Record<string, unknown> } = {}) {
  return { error: { code, message, ...(extra.fields ? { fields: extra.fields } : {}), ...(extra.details ?? {}) } };
}

export function sendAppError(reply: FastifyReply, err: AppError) {
  if (err.retryAfterSeconds !== undefined) void reply.header('retry-after', String(err.retryAfterSeconds));
  return reply.code(STATUS[err.kind]).send(errorBody(err.code, err.message, { fields: err.fields, details: err.details }));
}

/** Fastify's error handler: AppErrors by their kind, Fastify's own 4xx as they are, anything else 500 without its message. */
export function handleError(log: Logger) {
  return (err: Error & { statusCode?: number; code?: string }, _req: unknown, reply: FastifyReply) => {
    if (err instanceof AppError) return void sendAppError(reply, err);
    // The database refused a value (a data exception or a constraint): the request's fault, never a 500.
    if (isDataError(err)) {
      const conflict = err.code === '23505';
      log.warn({ sqlstate: err.code, err: err.message }, 'request refused by a database constraint');
      return void reply
        .code(conflict ? 409 : 400)
        .send(errorBody(conflict ? 'conflict' : 'invalid', conflict ? 'a record with this unique value already exists' : 'the database refused a value of this request'));
    }
    const status = err.statusCode && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 500;
    if (status === 500) {
      log.error({ err: err.message }, 'http handler failed');
      return void reply.code(500).send(errorBody('internal', 'internal error; see the service log'));
    }
    const code = status === 413 ? 'too_large' : status === 415 ? 'unsupported_media_type' : 'bad_request';
    void reply.code(status).send(errorBody(code, err.message));
  };
}
