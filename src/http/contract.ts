import { STATUS_CODES } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest, HTTPMethods, RouteShorthandOptions } from 'fastify';
import { z } from 'zod';
import { assertNoBody, parseBody } from './validation.js';
import { TAGS } from './openapi-tags.js';

/**
 * A route and its contract, registered together (issue 52): the operation's name, its inputs as the
 * very zod schemas the route validates with, every answer it gives (successes and errors, each with
 * a schema or a media type) and its security. The wrapper parses params, query and body with those
 * schemas and hands the parsed values to the handler, so the OpenAPI document (openapi.ts, served at
 * `GET /api/v1/openapi.json`) cannot drift from validation; with RELAY_JOBS_CONTRACT_CHECK=1 every
 * answer is checked against the document on its way out (contract-check.ts).
 */

/** The one error body: `{ error: { code, message, fields?, ...details } }` (errors.ts writes it). */
export const ErrorBody = z
  .object({
    error: z
      .looseObject({
        code: z.string().meta({ description: 'stable, machine-readable: what scripts match on' }),
        message: z.string().meta({ description: 'what was wrong and where, for a human' }),
        fields: z.array(z.object({ field: z.string().meta({ description: 'dotted path: `events.3.cost`, `query.from`' }), message: z.string() })).optional(),
      })
      .meta({ description: 'extra keys are safe, machine-readable details of the error (e.g. `paused`)' }),
  })
  .meta({ id: 'Error', description: 'Every error answer of the API' });

/**
 * Who may call a route. `admin` (the default under `/api/v1`): `Authorization: Bearer` with the admin
 * token or a session token, or the console's session cookie (plus `X-CSRF-Token` on a state-changing
 * call). `webhook`: the payment provider's HMAC signature header. `none`: anyone (the default
 * outside `/api/v1`).
 */
export type Security = 'admin' | 'webhook' | 'none';

/** One answer of a route: JSON with a schema, or bytes of a media type. Build them with the helpers below. */
export type ResponseSpec =
  | { kind: 'json'; schema: z.ZodType; description?: string; headers?: Record<string, string> }
  | { kind: 'media'; mediaType: string | readonly string[]; description?: string; headers?: Record<string, string> }
  | { kind: 'empty'; description?: string; headers?: Record<string, string> };

type Extra = { description?: string; headers?: Record<string, string> };
/** A JSON answer; `headers` maps a response header's name to its description. */
export const json = (schema: z.ZodType, extra: Extra = {}): ResponseSpec => ({ kind: 'json', schema, ...extra });
/** An event stream (`text/event-stream`); never checked on the wire (the reply is hijacked). */
export const sse = (description: string, extra: Omit<Extra, 'description'> = {}): ResponseSpec => ({ kind: 'media', mediaType: 'text/event-stream', description, ...extra });
/** Bytes of a media type (or one of several): `image/png`, `text/html; charset=utf-8`, Prometheus text, ... */
export const media = (mediaType: string | readonly string[], description: string, extra: Omit<Extra, 'description'> = {}): ResponseSpec => ({ kind: 'media', mediaType, description, ...extra });
/** No body (204). */
export const empty = (description = 'No Content', extra: Omit<Extra, 'description'> = {}): ResponseSpec => ({ kind: 'empty', description, ...extra });

/** Error statuses a route may declare (errors.ts's table, plus the framework's 415). */
export type ErrorStatus = 400 | 401 | 402 | 403 | 404 | 408 | 409 | 413 | 415 | 429 | 431 | 500 | 502 | 503 | 504;

type ObjectSchema = z.ZodObject;
type Parsed<S, Fallback> = [S] extends [z.ZodType] ? z.output<S> : Fallback;

export interface RouteContract<P extends ObjectSchema | undefined = undefined, Q extends ObjectSchema | undefined = undefined, B extends z.ZodType | undefined = undefined> {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  /** Fastify's form, relative to the instance it is registered on: `/jobs/:name`. */
  path: string;
  /** Unique over the API, lowerCamelCase verb first: `listJobs`, `runJob`. */
  operationId: string;
  summary: string;
  description?: string;
  /** One tag per area (`jobs`, `accounts`, ...; openapi-tags.ts lists them): the reference page's sections. */
  tag: string;
  /** Default: `admin` under `/api/v1`, `none` elsewhere. */
  security?: Security;
  /** Every `:name` of the path, as strings (a route that wants a number parses it and answers 404). */
  params?: P;
  query?: Q;
  body?: B;
  /** A body the handler reads itself (the webhook's raw bytes, checked by signature before parsing): documented, not parsed. */
  rawBody?: { mediaType: string; schema?: z.ZodType; description: string };
  /** Field-path prefixes of 400s, when a route's messages name `query.x` rather than `x`. */
  prefixes?: { params?: string; query?: string; body?: string };
  /** Successes by status: `{ 200: json(JobList) }`, `{ 202: json(Started) }`, `{ 204: empty() }`. */
  responses: Partial<Record<200 | 201 | 202 | 204, ResponseSpec>>;
  /**
   * Error answers by status, each `{ error: {...} }` (the shared `Error` component), with what each
   * means here: `{ 404: 'no such job', 409: 'the job is paused or busy' }`. 400 and 500 are implied
   * on every route, 401 on `admin` ones, 403 (CSRF) on state-changing `admin` ones, 413 and 415 on
   * ones with a body; a non-error answer (readiness's 503 report) goes in `nonErrors`.
   */
  errors?: Partial<Record<ErrorStatus, string>>;
  /** Non-2xx answers that are not the error model: `{ 503: json(Readiness, { description: 'not ready' }) }`. */
  nonErrors?: Partial<Record<number, ResponseSpec>>;
  /** Fastify route options passed through (`bodyLimit`, `config.arrayBody`). */
  options?: Pick<RouteShorthandOptions, 'bodyLimit' | 'config'>;
  /** The path to document when Fastify's is a wildcard (the console's `/*` is documented as `/`). */
  documentAs?: string;
}

export interface Input<P, Q, B> {
  params: Parsed<P, Record<string, string>>;
  query: Parsed<Q, Record<string, never>>;
  body: Parsed<B, undefined>;
}

export type Handler<P, Q, B> = (input: Input<P, Q, B>, req: FastifyRequest, reply: FastifyReply) => Promise<unknown>;

/** What the route table (server.ts's onRoute hook) keeps of a route registered through `route`. */
export interface RegisteredContract {
  contract: RouteContract<ObjectSchema | undefined, ObjectSchema | undefined, z.ZodType | undefined>;
  security: Security;
}

/** The contract of a route, if it was registered through `route` (undefined for a bare Fastify route). */
export function contractOf(config: unknown): RegisteredContract | undefined {
  return (config as { contract?: RegisteredContract } | undefined)?.contract;
}

/** `:name` segments of a Fastify path. */
export function pathParams(path: string): string[] {
  return [...path.matchAll(/:([A-Za-z_][A-Za-z0-9_]*)/g)].map((m) => m[1]!);
}

/** Refuses a contract that cannot be documented, at registration (start-up), naming the route. */
function assertDocumentable(c: RouteContract<ObjectSchema | undefined, ObjectSchema | undefined, z.ZodType | undefined>, where: string): void {
  const declared = Object.keys(c.params?.shape ?? {}).sort();
  const inPath = pathParams(c.path).sort();
  if (declared.join() !== inPath.join()) throw new Error(`route ${where}: params schema declares [${declared.join(', ')}] but the path has [${inPath.join(', ')}]`);
  if (c.body && c.method === 'GET') throw new Error(`route ${where}: a GET takes no body`);
  if (Object.keys(c.responses).length === 0) throw new Error(`route ${where}: declare at least one success response`);
  if (!(c.tag in TAGS)) throw new Error(`route ${where}: tag ${JSON.stringify(c.tag)} is not one of ${Object.keys(TAGS).join(', ')} (src/http/openapi-tags.ts)`);
  if (!/^[a-z][A-Za-z0-9]*$/.test(c.operationId)) throw new Error(`route ${where}: operationId ${JSON.stringify(c.operationId)} must be lowerCamelCase`);
}

/**
 * Registers `contract`'s route on `app` (the `/api/v1` instance an area's `routes` gets, or the root):
 * params, query and body are parsed with the contract's schemas (a 400 naming every field, as
 * `parseBody` always did) before `handler` runs with the parsed values.
 */
export function route<P extends ObjectSchema | undefined = undefined, Q extends ObjectSchema | undefined = undefined, B extends z.ZodType | undefined = undefined>(
  app: FastifyInstance,
  contract: RouteContract<P, Q, B>,
  handler: Handler<P, Q, B>,
): void {
  const c = contract as RouteContract<ObjectSchema | undefined, ObjectSchema | undefined, z.ZodType | undefined>;
  assertDocumentable(c, `${c.method} ${app.prefix}${c.path}`);
  const security: Security = c.security ?? (app.prefix.startsWith('/api/v1') ? 'admin' : 'none');
  const registered: RegisteredContract = { contract: c, security };
  const pre = c.prefixes ?? {};
  app.route({
    method: c.method as HTTPMethods,
    url: c.path,
    ...c.options,
    config: { ...(c.options?.config as object | undefined), contract: registered },
    handler: async (req, reply) => {
      if (!c.body && !c.rawBody) assertNoBody(req.body);
      const input = {
        params: c.params ? parseBody(c.params, req.params, pre.params) : req.params,
        query: c.query ? parseBody(c.query, req.query, pre.query) : {},
        body: c.body ? parseBody(c.body, req.body, pre.body) : undefined,
      } as Input<P, Q, B>;
      return handler(input, req, reply);
    },
  });
}

/** The answers a route gives besides its own: the hooks every route passes through. */
export function impliedErrors(c: RouteContract<ObjectSchema | undefined, ObjectSchema | undefined, z.ZodType | undefined>, security: Security): Partial<Record<ErrorStatus, string>> {
  const out: Partial<Record<ErrorStatus, string>> = {
    400: `invalid input: every offending field is named in \`error.fields\` (${c.body || c.rawBody || c.method === 'GET' ? 'a body that is not a JSON object' : 'a body with fields: this route takes none'}, text that cannot be stored, a numeric query parameter out of range, ...)`,
  };
  if (security === 'admin') {
    out[401] = 'no token, a malformed Authorization header, or an invalid or expired token; `admin_api_disabled` when the replica has no admin token';
    if (c.method !== 'GET') out[403] = '`csrf_failed`: a cookie-authenticated state-changing call without the X-CSRF-Token header';
  }
  if (c.body || c.rawBody) {
    out[413] = 'the body is larger than the route accepts';
    out[415] = 'the body is not JSON';
  }
  out[500] = 'internal error; the service log has the details (never the answer)';
  return out;
}

/** Every status a route may answer with, and how: its successes, its errors (own and implied), its non-error answers. */
export function allResponses(reg: RegisteredContract): Map<number, ResponseSpec> {
  const c = reg.contract;
  const out = new Map<number, ResponseSpec>();
  for (const [s, r] of Object.entries(c.responses)) out.set(Number(s), { ...r, description: r.description ?? STATUS_CODES[Number(s)] ?? 'OK' });
  const errors = { ...impliedErrors(c, reg.security), ...c.errors };
  for (const [s, d] of Object.entries(errors)) {
    const retry = Number(s) === 429 || Number(s) === 503 ? { headers: { 'Retry-After': 'seconds to wait before trying again, when known' } } : {};
    out.set(Number(s), { kind: 'json', schema: ErrorBody, description: d, ...retry });
  }
  for (const [s, r] of Object.entries(c.nonErrors ?? {})) if (r) out.set(Number(s), { ...r, description: r.description ?? STATUS_CODES[Number(s)] ?? '' });
  return out;
}
