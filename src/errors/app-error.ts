/**
 * The one error model. Every error a caller can cause (or must be told about) is an AppError
 * with a stable `code` (what scripts match on), a `kind` (what class of failure it is: the HTTP
 * layer maps kinds to status codes in one table, `src/http/errors.ts`, so nothing below http/
 * knows a status code), a message that says what was wrong and where, and optional field errors.
 * `details` are extra, safe, machine-readable facts (never a secret).
 */
export type ErrorKind = 'invalid' | 'unauthorized' | 'not_found' | 'conflict' | 'payment_required' | 'too_large' | 'rate_limited' | 'unavailable' | 'upstream_failed' | 'timeout';

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
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** Input that cannot be accepted: every offending field named; nothing was written. */
export class InvalidInput extends AppError {
  constructor(fields: FieldError[], code = 'invalid') {
    const shown = fields.slice(0, 20).map((f) => `${f.field}: ${f.message}`);
    super('invalid', code, shown.join('; ') + (fields.length > 20 ? `; and ${fields.length - 20} more` : ''), fields);
  }
}

export class NotFound extends AppError {
  constructor(message: string, code = 'not_found') {
    super('not_found', code, message);
  }
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
