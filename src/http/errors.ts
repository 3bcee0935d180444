import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { FastifyReply } from 'fastify';
import { AppError, type ErrorKind } from '../errors/app-error.js';
import type { Logger } from '../telemetry/logger.js';
import { isDataError } from '../store/poison-split.js';

/**
 * The only place an error kind becomes an HTTP status. Nothing else in src/ writes an error status
 * (ESLint refuses `reply.code(4xx/5xx)`, a computed `reply.code(x)`, `writeHead(4xx/5xx)` and a
 * hand-built `{ error: {...} }` body anywhere but here): routes throw an AppError of a kind.
 */
export const STATUS: Record<ErrorKind, number> = {
  invalid: 400,
  unauthorized: 401,
  payment_required: 402,
  forbidden: 403,
  not_found: 404,
  request_timeout: 408,
  conflict: 409,
  too_large: 413,
  rate_limited: 429,
  headers_too_large: 431,
  internal: 500,
  upstream_failed: 502,
  unavailable: 503,
  timeout: 504,
};

/** The body of every error answer: `{ error: { code, message, fields?, ...details } }`. */
export function errorBody(code: string, message: string, extra: { fields?: unknown; details?: Record<string, unknown> } = {}) {
  return { error: { code, message, ...(extra.fields ? { fields: extra.fields } : {}), ...(extra.details ?? {}) } };
}

function bodyOf(err: AppError) {
  return errorBody(err.code, err.message, { fields: err.fields, details: err.details });
}

export function sendAppError(reply: FastifyReply, err: AppError) {
  if (err.retryAfterSeconds !== undefined) void reply.header('retry-after', String(err.retryAfterSeconds));
  return reply.code(STATUS[err.kind]).send(bodyOf(err));
}

/** For a hijacked reply (the event stream): the same answer written on the raw response. */
export function writeRawAppError(res: ServerResponse, err: AppError): void {
  res.writeHead(STATUS[err.kind], { 'content-type': 'application/json', ...(err.retryAfterSeconds !== undefined ? { 'retry-after': String(err.retryAfterSeconds) } : {}) });
  res.end(JSON.stringify(bodyOf(err)));
}

/** For Node's HTTP parser errors (no request, no reply yet): a whole HTTP/1.1 answer that closes the connection. */
export function rawHttpError(err: AppError): string {
  const status = STATUS[err.kind];
  const body = JSON.stringify(bodyOf(err));
  return `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json; charset=utf-8\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n${body}`;
}

/** Fastify's error handler: AppErrors by their kind, Fastify's own 4xx as they are, anything else 500 without its message. */
export function handleError(log: Logger) {
  return (err: Error & { statusCode?: number; code?: string }, _req: unknown, reply: FastifyReply) => {
    if (err instanceof AppError) return void sendAppError(reply, err);
    // The database refused a value (a data exception or a constraint): the request's fault, never a 500.
    if (isDataError(err)) {
      const conflict = err.code === '23505';
      log.warn({ sqlstate: err.code, err: err.message }, 'request refused by a database constraint');
      return void sendAppError(
        reply,
        conflict ? new AppError('conflict', 'conflict', 'a record with this unique value already exists') : new AppError('invalid', 'invalid', 'the database refused a value of this request'),
      );
    }
    // Fastify's own 4xx (a body too large, a wrong media type, a JSON syntax error) keep Fastify's status.
    const status = err.statusCode;
    if (status && status >= 400 && status < 500) {
      const code = status === 413 ? 'too_large' : status === 415 ? 'unsupported_media_type' : 'bad_request';
      return void reply.code(status).send(errorBody(code, err.message));
    }
    log.error({ err: err.message }, 'http handler failed');
    void sendAppError(reply, new AppError('internal', 'internal', 'internal error; see the service log'));
  };
}

/**
 * RELAY_JOBS_CONTRACT_CHECK (tests only, contract-check.ts): an answer that broke its route's
 * contract is replaced by a 500 `contract_violation` naming the route and the field.
 */
export function contractViolation(reply: FastifyReply, message: string): string {
  void reply.code(500).header('content-type', 'application/json; charset=utf-8').removeHeader('content-length');
  return JSON.stringify(errorBody('contract_violation', message));
}
