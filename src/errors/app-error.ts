/**
 * The one error model. Every error a caller can cause (or must be told about) is an AppError
 * with a stable `code` (what scripts match on), a `kind` (what class of failure it is: the HTTP
 * layer maps kinds to status codes in one table, `src/http/errors.ts`, so nothing below http/
 * knows a status code), a message that says what was wrong and where, and optional field errors.
 * `details` are extra, safe, machine-readable facts (never a secret).
 */
export type ErrorKind =
  | 'invalid'
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'conflict'
  | 'payment_required'
  | 'too_large'
  | 'headers_too_large'
  | 'request_timeout'
  | 'rate_limited'
  | 'unavailable'
  | 'upstream_failed'
  | 'timeout'
  | 'internal';

/** Every kind, in the order of the status table (tests walk it). */
export const ERROR_KINDS: readonly ErrorKind[] = [
  'invalid',
  'unauthorized',
  'payment_required',
  'forbidden',
  'not_found',
  'request_timeout',
  'conflict',
  'too_large',
  'rate_limited',
  'headers_too_large',
  'internal',
  'upstream_failed',
  'unavailable',
  'timeout',
];

export interface FieldError {
  /** Dotted path of the offending field: `events.3.cost`, `query.from`. */
  field: string;
  message: string;
}

export class AppError extends Error {
  /** For a retryable refusal: how long the caller should wait (HTTP `Retry-After`). */
  readonly retryAfterSeconds?: number;

  constructor(
    readonly kind: ErrorKind,
    readonly code: string,
    message: string,
    readonly fields?: FieldError[],
    readonly details?: Record<string, unknown>,
    retryAfterSeconds?: number,
  ) {
    super(message);
    this.name = new.target.name;
    if (retryAfterSeconds !== undefined) this.retryAfterSeconds = retryAfterSeconds;
  }
}

/** Input that cannot be accepted: every offending field named; nothing was written. */
export class InvalidInput extends AppError {
  constructor(all: FieldError[], code = 'invalid') {
    // One problem per field, the first: zod reports an integer past 2^53 twice (outside the safe range, and past the maximum).
    const seen = new Set<string>();
    const fields = all.filter((f) => !seen.has(f.field) && seen.add(f.field));
    const shown = fields.slice(0, 20).map((f) => `${f.field}: ${f.message}`);
    super('invalid', code, shown.join('; ') + (fields.length > 20 ? `; and ${fields.length - 20} more` : ''), fields);
  }
}

export class NotFound extends AppError {
  constructor(message: string, code = 'not_found') {
    super('not_found', code, message);
  }
}

/** The caller is known but may not do this (a session minting sessions, a cookie call without its CSRF header). */
export class Forbidden extends AppError {
  constructor(code: string, message: string) {
    super('forbidden', code, message);
  }
}

/** For `value ?? notFound('no proxy 7')`: the value, or a NotFound thrown in its place. */
export function notFound(message: string, code = 'not_found'): never {
  throw new NotFound(message, code);
}

/** A request the service understood but cannot take as it stands (`code` names the rule). */
export function badRequest(code: string, message: string): never {
  throw new AppError('invalid', code, message);
}

export class Conflict extends AppError {
  constructor(code: string, message: string, details?: Record<string, unknown>) {
    super('conflict', code, message, undefined, details);
  }
}

/** A write carrying a fencing token older than the job's latest grant: the round lost its lease. */
export class FencedWriteRefused extends AppError {
  constructor(
    readonly job: string,
    readonly key: string,
    readonly token: number,
  ) {
    super('conflict', 'fenced_write_refused', `fenced write refused: ${job}/${key} with fencing token ${token}; a newer round of ${job} holds a newer token`);
  }
}
