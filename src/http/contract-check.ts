import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ValidateFunction } from 'ajv';
import { contractOf } from './contract.js';
import { openApiPath } from './openapi.js';
import { contractViolation } from './errors.js';
import type { Logger } from '../telemetry/logger.js';

/**
 * Issue 52: every answer the test suite receives is checked against the OpenAPI document. With
 * `RELAY_JOBS_CONTRACT_CHECK=1` (the tests set it: vitest.config.ts, and the harness passes it on to
 * the replicas it spawns) an `onSend` hook validates each answer of a route registered through
 * `route()` against that route's entry in the served document: an undeclared status, a body off
 * its schema (a missing, renamed, mistyped or undocumented field), or another media type becomes a
 * 500 `contract_violation` naming the route, the status and the field, so any test that touches a
 * drifted answer fails. Off in production: it costs a validation per answer. Ajv (a devDependency)
 * is loaded only when the check is on.
 */
export const CONTRACT_CHECK_ENV = 'RELAY_JOBS_CONTRACT_CHECK';

type Json = Record<string, unknown>;

/** Ajv speaks JSON Schema draft 7: OpenAPI 3.0's boolean `exclusiveMinimum`/`exclusiveMaximum` become numbers (same meaning). */
function toDraft7(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(toDraft7);
  if (!v || typeof v !== 'object') return v;
  const o = Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toDraft7(x)])) as Json;
  for (const [flag, bound] of [
    ['exclusiveMinimum', 'minimum'],
    ['exclusiveMaximum', 'maximum'],
  ] as const) {
    if (typeof o[flag] !== 'boolean') continue;
    if (o[flag] === true && typeof o[bound] === 'number') {
      o[flag] = o[bound];
      delete o[bound];
    } else delete o[flag];
  }
  // OpenAPI 3.0's `nullable: true` (zod writes it beside a `$ref` in `allOf` and beside an `enum`, which Ajv's own support refuses): null or the rest.
  if (typeof o.nullable === 'boolean') {
    const nullable = o.nullable;
    delete o.nullable;
    if (nullable) return { anyOf: [o, { type: 'null' }] };
  }
  return o;
}

const pointer = (...parts: string[]) => parts.map((p) => p.replace(/~/g, '~0').replace(/\//g, '~1')).join('/');

/**
 * One route's answer against the document: undefined when it conforms, else what is wrong.
 * `document(method, path)` gives a document holding at least that operation, the one the server
 * serves or one generated for that operation alone (server.ts): the same generator, so the same
 * schemas. Per operation, because a replica of the test suite answers a handful of routes, and
 * generating and compiling the whole document cost each of the suite's 125 replica starts about a
 * third of a CPU second.
 */
export class ContractChecker {
  private readonly documents = new Map<string, { doc: Json; id: string }>();
  /** Ajv's id of each document given (the served one may be given for every operation: added once). */
  private readonly ids = new Map<Json, string>();
  private readonly validators = new Map<string, ValidateFunction>();
  private ajv: import('ajv').Ajv | undefined;

  constructor(private readonly document: (method: string, path: string) => Json) {}

  private documentOf(method: string, path: string): { doc: Json; id: string } {
    const key = `${method} ${path}`;
    let d = this.documents.get(key);
    if (!d) {
      const doc = this.document(method, path);
      const id = this.ids.get(doc) ?? `openapi-${this.ids.size}.json`;
      this.ids.set(doc, id);
      this.documents.set(key, (d = { doc, id }));
    }
    return d;
  }

  private async validator(method: string, path: string, status: number): Promise<ValidateFunction> {
    const key = `${method} ${path} ${status}`;
    let v = this.validators.get(key);
    if (!v) {
      if (!this.ajv) {
        // The named export, or (bundled into the CLI, where the CommonJS module comes as `default`) the default's.
        const mod = (await import('ajv')) as unknown as { Ajv?: typeof import('ajv').Ajv; default?: { Ajv?: typeof import('ajv').Ajv } };
        const Ajv = (mod.Ajv ?? mod.default?.Ajv)!;
        this.ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
      }
      const { doc, id } = this.documentOf(method, path);
      if (!this.ajv.getSchema(id)) this.ajv.addSchema(toDraft7(doc) as Json, id);
      v = this.ajv.compile({ $ref: `${id}#/${pointer('paths', openApiPath(path), method.toLowerCase(), 'responses', String(status), 'content', 'application/json', 'schema')}` });
      this.validators.set(key, v);
    }
    return v;
  }

  /** What is wrong with this answer of `method url`, or undefined. */
  async check(method: string, url: string, status: number, contentType: string, payload: unknown): Promise<string | undefined> {
    const { doc } = this.documentOf(method, url);
    const docPath = openApiPath(url);
    const op = (doc.paths as Record<string, Record<string, Json>>)[docPath]?.[method.toLowerCase()];
    if (!op) return `${method} ${url} is not in the document`;
    const answer = (op.responses as Record<string, Json>)[String(status)];
    if (!answer) return `status ${status} is not declared (declared: ${Object.keys(op.responses as Json).join(', ')})`;
    const declared = Object.keys((answer.content as Json | undefined) ?? {});
    if (declared.length === 0) return payload === '' || payload === undefined || payload === null ? undefined : `status ${status} declares no body, but one was sent`;
    const type = contentType.split(';')[0]!.trim();
    const match = declared.find((d) => d.split(';')[0]!.trim() === type);
    if (!match) return `status ${status} is sent as ${type || '(no content type)'}, the document declares ${declared.join(', ')}`;
    if (match !== 'application/json' || typeof payload !== 'string') return undefined;
    let body: unknown;
    try {
      body = JSON.parse(payload);
    } catch {
      return `status ${status}: the body is not JSON`;
    }
    const validate = await this.validator(method, url, status);
    if (validate(body)) return undefined;
    return (validate.errors ?? [])
      .slice(0, 5)
      .map((e) => {
        const at = e.instancePath.slice(1).replace(/\//g, '.');
        const under = (key: string) => (at ? `${at}.${key}` : key);
        const p = e.params as { additionalProperty?: string; missingProperty?: string };
        if (p.additionalProperty) return `${under(p.additionalProperty)}: undocumented field`;
        if (p.missingProperty) return `${under(p.missingProperty)}: required field missing`;
        return `${at || '(body)'}: ${e.message}`;
      })
      .join('; ');
  }
}

/** The `onSend` hook: a drifted answer becomes a 500 `contract_violation` (and an error line in the log). */
export function contractCheckHook(checker: ContractChecker, log: Logger) {
  return async (req: FastifyRequest, reply: FastifyReply, payload: unknown) => {
    const reg = contractOf(req.routeOptions.config);
    if (!reg || req.method === 'HEAD') return payload;
    const url = reg.contract.documentAs ?? req.routeOptions.url ?? '';
    const problem = await checker.check(req.method, url, reply.statusCode, String(reply.getHeader('content-type') ?? ''), payload);
    if (!problem) return payload;
    const message = `${req.method} ${url} (${reg.contract.operationId}) broke its contract: ${problem}`;
    log.error({ operation: reg.contract.operationId, status: reply.statusCode }, message);
    return contractViolation(reply, message);
  };
}
