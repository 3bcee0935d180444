/**
 * The typed HTTP client of relay-jobs, for a gateway written in TypeScript that talks to the
 * service over HTTP (one embedding the runtime uses `runtime.services` instead):
 *
 *   import { createClient } from 'relay-jobs/client';
 *   const api = createClient({ baseUrl: 'http://relay-jobs:8080', token: process.env.RELAY_JOBS_ADMIN_TOKEN });
 *   const { data, error } = await api.POST('/api/v1/accounts/{id}/token', { params: { path: { id: '42' } } });
 *
 * It is openapi-fetch over the types `npm run api:types` generates from the service's OpenAPI
 * document (api-types.ts): every path, parameter, body and answer is typed as the document says,
 * `error` is the `Error` model. It imports nothing of the service, so a gateway loads only this.
 */
import createFetchClient, { type Client, type ClientOptions } from 'openapi-fetch';
import type { components, operations, paths } from './api-types.js';

export type { components, operations, paths };

/** The body of every error answer: `{ error: { code, message, fields? } }` (docs/api.md). */
export type ApiError = components['schemas']['Error'];

/** The client `createClient` makes: `GET`, `POST`, `PATCH`, `DELETE`, ... by path, typed by the document. */
export type RelayJobsClient = Client<paths>;

export interface RelayJobsClientOptions {
  /** Where the service listens, e.g. `http://127.0.0.1:8080` (the paths carry `/api/v1`). */
  baseUrl: string;
  /** `RELAY_JOBS_ADMIN_TOKEN` or a session token, sent as `Authorization: Bearer`. */
  token?: string;
  /**
   * Each call gives up after this many milliseconds (default 10,000), on top of any `signal` the
   * call passes. A token call may refresh first and wait up to `auth.hot_path_wait` (10 s): keep it above.
   */
  timeoutMs?: number;
  /** Another fetch (a proxy agent, a test double); default `globalThis.fetch`. */
  fetch?: ClientOptions['fetch'];
  /** Headers sent with every call (a `traceparent` is better set per call). */
  headers?: Record<string, string>;
}

export const DEFAULT_TIMEOUT_MS = 10_000;

/** A client of one service. Calls never throw for an HTTP status: they resolve with `{ data }` or `{ error, response }`. */
export function createClient(opts: RelayJobsClientOptions): RelayJobsClient {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const own = opts.fetch;
  const send = (request: Request, signal: AbortSignal) => (own ? own(new Request(request, { signal })) : globalThis.fetch(request, { signal }));
  return createFetchClient<paths>({
    baseUrl: opts.baseUrl.replace(/\/+$/, ''),
    headers: { ...opts.headers, ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}) },
    fetch: (request) => send(request, deadline(request.signal, timeoutMs)),
  });
}

/**
 * A signal that aborts after `timeoutMs` or when the caller's own `signal` does. Not
 * `AbortSignal.any([..., AbortSignal.timeout()])`, and handed to fetch as its `signal` option, not
 * bound into a new Request: a Request follows its signal through a weak reference, and on Node 20 a
 * garbage collection during the wait broke that link, so the call never timed out (nodejs/node#55428).
 * The timer's closure holds the controller until it fires; it is unref'd, so a pending deadline never
 * keeps a process alive, and it still covers reading the body.
 */
function deadline(signal: AbortSignal, timeoutMs: number): AbortSignal {
  const controller = new AbortController();
  const callerAborted = () => controller.abort(signal.reason);
  // eslint-disable-next-line no-restricted-syntax -- the client stands alone (it imports nothing of src/ outside src/client/); real time is the point
  const timer = setTimeout(() => controller.abort(new DOMException(`no answer within ${timeoutMs} ms`, 'TimeoutError')), Math.min(timeoutMs, 2 ** 31 - 1));
  timer.unref();
  const cancel = () => clearTimeout(timer);
  // Either way it ends, both links go: a caller's long-lived signal keeps no listener past the deadline.
  controller.signal.addEventListener('abort', () => (cancel(), signal.removeEventListener('abort', callerAborted)), { once: true });
  if (signal.aborted) callerAborted();
  else signal.addEventListener('abort', callerAborted, { once: true });
  return controller.signal;
}
