import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AppError, Conflict, ERROR_KINDS, Forbidden, InvalidInput, NotFound, badRequest, notFound, type ErrorKind } from '../src/errors/app-error.js';
import { STATUS, handleError, rawHttpError } from '../src/http/errors.js';
import { BackupBusy } from '../src/areas/backup/backup-service.js';
import { SubmitRejected } from '../src/areas/images/image-batch-service.js';
import { SqlUnavailable } from '../src/areas/admin/store/sql-console.js';
import { SqlRefused } from '../src/areas/admin/store/sql-guard.js';
import { UserError } from '../src/config/errors.js';
import { captureLogs } from './helpers/log-capture.js';

/** The table the API's clients depend on: changing a row changes a public status code. */
const EXPECTED: Record<ErrorKind, number> = {
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

describe('the kind → status table (src/http/errors.ts)', () => {
  it('maps every kind to its error status, one status per kind', () => {
    expect(STATUS).toEqual(EXPECTED);
    expect([...ERROR_KINDS].sort()).toEqual(Object.keys(STATUS).sort());
    const statuses = Object.values(STATUS);
    expect(new Set(statuses).size).toBe(statuses.length);
    for (const s of statuses) expect(s).toBeGreaterThanOrEqual(400);
  });

  it('the errors a user meets carry the kind and code their answers had', () => {
    const cases: Array<[AppError, ErrorKind, string]> = [
      [new InvalidInput([{ field: 'a', message: 'b' }]), 'invalid', 'invalid'],
      [new NotFound('no x'), 'not_found', 'not_found'],
      [new Conflict('busy', 'x'), 'conflict', 'busy'],
      [new Forbidden('csrf_failed', 'x'), 'forbidden', 'csrf_failed'],
      [new BackupBusy('b1', 'replica-b'), 'conflict', 'busy'],
      [new SubmitRejected('payment_required', 'insufficient_balance', 'short', 'user_id'), 'payment_required', 'insufficient_balance'],
      [new SqlRefused('no'), 'invalid', 'sql_refused'],
      [new SqlUnavailable('busy', 'busy'), 'rate_limited', 'sql_busy'],
      [new SqlUnavailable('role', 'unsafe_role'), 'unavailable', 'sql_unsafe_role'],
      [new UserError('bad'), 'invalid', 'user_error'],
    ];
    for (const [err, kind, code] of cases) {
      expect(err).toBeInstanceOf(AppError);
      expect([err.name, err.kind, err.code]).toEqual([err.constructor.name, kind, code]);
    }
    expect(new SqlUnavailable('busy', 'busy').retryAfterSeconds).toBe(1);
    expect(new SqlUnavailable('role', 'unsafe_role').retryAfterSeconds).toBeUndefined();
    expect(() => notFound('no proxy 7')).toThrow(NotFound);
    expect(() => badRequest('bad_request', 'x')).toThrow(expect.objectContaining({ kind: 'invalid', code: 'bad_request' }));
  });
});

describe('the error shape every answer has', () => {
  let app: FastifyInstance;
  const logs = captureLogs();
  const thrown = new Map<string, Error>();

  beforeAll(async () => {
    app = Fastify({ logger: false });
    app.setErrorHandler(handleError(logs.logger));
    app.get<{ Params: { name: string } }>('/throw/:name', async (req) => {
      throw thrown.get(req.params.name)!;
    });
    app.post('/json', async (req) => req.body);
    await app.ready();
  });
  afterAll(() => app.close());

  async function answer(err: Error) {
    const name = `e${thrown.size}`;
    thrown.set(name, err);
    return app.inject(`/throw/${name}`);
  }

  it('every kind answers its status with { error: { code, message } }', async () => {
    for (const kind of ERROR_KINDS) {
      const res = await answer(new AppError(kind, `code_${kind}`, `message of ${kind}`));
      expect(res.statusCode, kind).toBe(EXPECTED[kind]);
      expect(res.json(), kind).toEqual({ error: { code: `code_${kind}`, message: `message of ${kind}` } });
      expect(res.headers['retry-after']).toBeUndefined();
    }
  });

  it('field errors as `fields`, details beside code and message, Retry-After from the error', async () => {
    const invalid = await answer(new InvalidInput([{ field: 'events.3.cost', message: 'expected a number' }]));
    expect(invalid.json()).toEqual({ error: { code: 'invalid', message: 'events.3.cost: expected a number', fields: [{ field: 'events.3.cost', message: 'expected a number' }] } });

    const busy = await answer(new BackupBusy('livebackup01', 'replica-b'));
    expect(busy.statusCode).toBe(409);
    expect(busy.json()).toEqual({ error: { code: 'busy', message: 'backup livebackup01 is already running on replica-b', running_id: 'livebackup01', instance_id: 'replica-b' } });

    const short = await answer(new SubmitRejected('payment_required', 'insufficient_balance', 'short by 5', 'user_id', { required: 10, balance: 5, shortfall: 5 }));
    expect(short.statusCode).toBe(402);
    expect(short.json()).toEqual({
      error: { code: 'insufficient_balance', message: 'short by 5', fields: [{ field: 'user_id', message: 'short by 5' }], required: 10, balance: 5, shortfall: 5 },
    });

    const sqlBusy = await answer(new SqlUnavailable('the SQL console is running 2 statements already', 'busy'));
    expect([sqlBusy.statusCode, sqlBusy.headers['retry-after'], sqlBusy.json().error.code]).toEqual([429, '1', 'sql_busy']);
  });

  it('an unexpected error is a 500 that keeps its message in the log, not in the answer', async () => {
    const res = await answer(new Error('connection string postgres://user:secret@db/x refused'));
    expect(res.statusCode).toBe(500);
    expect(res.json()).toEqual({ error: { code: 'internal', message: 'internal error; see the service log' } });
    expect(res.body).not.toContain('secret');
    expect(logs.text()).toContain('http handler failed');
  });

  it("Fastify's own 4xx keep their status in the one shape", async () => {
    const res = await app.inject({ method: 'POST', url: '/json', headers: { 'content-type': 'application/json' }, payload: '{"a":' });
    expect(res.statusCode).toBe(400);
    expect(res.json().error.code).toBe('bad_request');
  });

  it("Node's parser errors: a whole HTTP/1.1 answer with the status's reason phrase, closing the connection", () => {
    const raw = rawHttpError(new AppError('request_timeout', 'timeout', 'too slow'));
    const [head, body] = raw.split('\r\n\r\n');
    expect(head!.split('\r\n')).toEqual([
      'HTTP/1.1 408 Request Timeout',
      `Content-Length: ${Buffer.byteLength(body!)}`,
      'Content-Type: application/json; charset=utf-8',
      'Cache-Control: no-store',
      'Connection: close',
    ]);
    expect(JSON.parse(body!)).toEqual({ error: { code: 'timeout', message: 'too slow' } });
    expect(rawHttpError(new AppError('headers_too_large', 'too_large', 'x')).split('\r\n')[0]).toBe('HTTP/1.1 431 Request Header Fields Too Large');
  });
});

/**
 * Classes in src/ that extend Error directly rather than AppError: internal control flow or
 * outcomes that are turned into a value (a run's note, a delivery result) before any caller
 * sees them. A new one must be added here with its reason, or extend AppError.
 */
const INTERNAL_ERRORS: Record<string, string> = {
  ReplyTooLarge: 'an upstream reply over its cap; the caller records it as that upstream failing',
  ImageProviderError: "the image provider's refusal; the batch worker records it on the batch",
  DeliveryFailed: 'a notification delivery outcome; the notifier retries or dead-letters it',
  Stopped: 'a recompute interrupted by shutdown; never leaves the task runner',
  RoundAborted: "a round's AbortSignal fired; recorded as timed_out/failed on the run",
  WatermarkFenced: 'a stale fencing token on the monitor watermark; the round stops',
  AlreadySettled: 'a batch settled by another worker; the transition is skipped',
  SqlTimeout: "an embedded console statement killed at sql.statement_timeout; carries PostgreSQL's 57014, which sql-routes answers as sql_timeout",
  SubmitRefused: "the store's refusal inside a submit transaction; the service answers SubmitRejected",
  RoundRefused: "a requested round the lock or the claim refused; Scheduler.requestRound's retry consumes it and asks again",
};

describe('every error class a user can meet extends AppError', () => {
  it('src/ has no other class extending Error directly', () => {
    const root = join(import.meta.dirname, '..', 'src');
    const found: string[] = [];
    const walk = (dir: string) => {
      for (const name of readdirSync(dir)) {
        const full = join(dir, name);
        if (statSync(full).isDirectory()) walk(full);
        else if (name.endsWith('.ts')) {
          for (const m of readFileSync(full, 'utf8').matchAll(/class (\w+) extends Error\b/g)) {
            if (!(m[1]! in INTERNAL_ERRORS) && m[1] !== 'AppError') found.push(`${relative(root, full)}: ${m[1]}`);
          }
        }
      }
    };
    walk(root);
    expect(found).toEqual([]);
  });
});
