import { z } from 'zod';
import { SESSION_COOKIE } from './console-cookie.js';
import { TAGS } from './openapi-tags.js';
import { allResponses, type RegisteredContract, type ResponseSpec } from './contract.js';

/**
 * The OpenAPI 3.0.3 document of the API, generated from the routes' contracts (contract.ts) with
 * zod's own JSON Schema conversion (`target: 'openapi-3.0'`): requests in zod's input view (what a
 * caller may send: defaults optional), responses in its output view (what the service sends:
 * objects closed, so an undocumented field is drift). A schema given an id (`.meta({ id: 'Job' })`)
 * becomes a component, referenced wherever it is used; two different schemas with one id are refused.
 */

type Json = Record<string, unknown>;
/** A route as the table holds it: full URL (prefix included), method, and its contract when it has one. */
export interface DocumentedRoute {
  method: string;
  url: string;
  contract?: RegisteredContract;
}

export const OPENAPI_PATH = '/api/v1/openapi.json';

/** `/jobs/:name` → `/jobs/{name}`. */
export function openApiPath(fastifyPath: string): string {
  return fastifyPath.replace(/:([A-Za-z_][A-Za-z0-9_]*)/g, '{$1}');
}

/** Collects the components the converted schemas refer to, refusing two different schemas under one id. */
class Components {
  readonly schemas: Record<string, Json> = {};
  private readonly seen = new Map<string, string>();

  /** Registers `schema` as `id`; false when another schema already holds the id. */
  private tryAdd(id: string, schema: Json): boolean {
    const text = JSON.stringify(schema);
    const before = this.seen.get(id);
    if (before !== undefined && before !== text) return false;
    this.seen.set(id, text);
    this.schemas[id] = schema;
    return true;
  }

  /**
   * Registers a named schema; a request's view of a component that differs from the response's (a
   * default makes a field optional) is `<id>Input`. Returns the id used.
   */
  private add(id: string, schema: Json, io: 'input' | 'output', where: string): string {
    if (this.tryAdd(id, schema)) return id;
    if (io === 'input' && this.tryAdd(`${id}Input`, schema)) return `${id}Input`;
    throw new Error(`OpenAPI: two different schemas share the id ${JSON.stringify(id)} (again at ${where}); give one another id`);
  }

  /** zod's JSON Schema for `schema`, its named parts moved to `components.schemas`. */
  convert(schema: z.ZodType, io: 'input' | 'output', where: string): Json {
    const out = z.toJSONSchema(schema, { target: 'openapi-3.0', io, unrepresentable: 'any' }) as Json;
    const defs = (out.definitions ?? {}) as Record<string, Json>;
    delete out.definitions;
    delete out.$schema;
    // Register each definition under its id (or its `Input` twin), then point every $ref at the component.
    const names = new Map<string, string>();
    for (const [id, def] of Object.entries(defs)) names.set(id, this.add(id, def, io, where));
    const relink = (v: unknown): unknown => {
      if (Array.isArray(v)) return v.map(relink);
      if (!v || typeof v !== 'object') return v;
      const o = v as Json;
      if (typeof o.$ref === 'string' && o.$ref.startsWith('#/definitions/')) return { $ref: `#/components/schemas/${names.get(o.$ref.slice(14)) ?? o.$ref.slice(14)}` };
      // zod writes a nullable component or union as `{ nullable, allOf|anyOf: [...] }`, which OpenAPI 3.0
      // reads as never null (nullable needs a type beside it): its branches, or null.
      const branches = (o.anyOf ?? (Array.isArray(o.allOf) && o.allOf.length === 1 ? o.allOf : undefined)) as unknown[] | undefined;
      if (o.nullable === true && o.type === undefined && branches) {
        const { nullable: _n, allOf: _a, anyOf: _o, ...rest } = o;
        return relink({ ...rest, anyOf: [...branches, { type: 'object', nullable: true, enum: [null] }] });
      }
      return Object.fromEntries(Object.entries(o).map(([k, x]) => [k, relink(x)]));
    };
    for (const [id, used] of names) this.schemas[used] = relink(defs[id]) as Json;
    return relink(out) as Json;
  }
}

function parameters(reg: RegisteredContract, comps: Components, where: string): Json[] {
  const out: Json[] = [];
  for (const [location, schema] of [
    ['path', reg.contract.params],
    ['query', reg.contract.query],
  ] as const) {
    if (!schema) continue;
    for (const [name, field] of Object.entries(schema.shape as Record<string, z.ZodType>)) {
      const s = comps.convert(field, 'input', `${where} ${location} ${name}`);
      const description = s.description as string | undefined;
      delete s.description;
      const required = location === 'path' || !field.safeParse(undefined).success;
      out.push({ name, in: location, required, ...(description ? { description } : {}), schema: s });
    }
  }
  return out;
}

function content(spec: ResponseSpec, comps: Components, where: string): Json | undefined {
  if (spec.kind === 'json') return { 'application/json': { schema: comps.convert(spec.schema, 'output', where) } };
  if (spec.kind === 'media') {
    const types = typeof spec.mediaType === 'string' ? [spec.mediaType] : spec.mediaType;
    return Object.fromEntries(types.map((t) => [t, { schema: { type: 'string', ...(/^(image|application\/octet-stream)/.test(t) ? { format: 'binary' } : {}) } }]));
  }
  return undefined;
}

function securityOf(reg: RegisteredContract): Json[] {
  if (reg.security === 'none') return [];
  if (reg.security === 'webhook') return [{ webhookSignature: [] }];
  const cookie = reg.contract.method === 'GET' ? { sessionCookie: [] } : { sessionCookie: [], csrfHeader: [] };
  return [{ adminToken: [] }, cookie];
}

function operation(reg: RegisteredContract, comps: Components, where: string): Json {
  const c = reg.contract;
  const op: Json = { operationId: c.operationId, summary: c.summary, tags: [c.tag] };
  if (c.description) op.description = c.description;
  const params = parameters(reg, comps, where);
  if (params.length) op.parameters = params;
  if (c.body) op.requestBody = { required: !c.body.safeParse(undefined).success, content: { 'application/json': { schema: comps.convert(c.body, 'input', `${where} body`) } } };
  if (c.rawBody) {
    const schema = c.rawBody.schema ? comps.convert(c.rawBody.schema, 'input', `${where} body`) : { type: 'string' };
    op.requestBody = { required: true, description: c.rawBody.description, content: { [c.rawBody.mediaType]: { schema } } };
  }
  const responses: Json = {};
  for (const [status, spec] of [...allResponses(reg)].sort(([a], [b]) => a - b)) {
    const r: Json = { description: spec.description ?? '' };
    const body = content(spec, comps, `${where} ${status}`);
    if (body) r.content = body;
    if (spec.headers) r.headers = Object.fromEntries(Object.entries(spec.headers).map(([h, d]) => [h, { description: d, schema: { type: 'string' } }]));
    responses[String(status)] = r;
  }
  op.responses = responses;
  op.security = securityOf(reg);
  return op;
}

const SECURITY_SCHEMES: Record<string, Json> = {
  adminToken: { type: 'http', scheme: 'bearer', description: 'RELAY_JOBS_ADMIN_TOKEN, or a session token from `POST /api/v1/sessions`' },
  sessionCookie: { type: 'apiKey', in: 'cookie', name: SESSION_COOKIE, description: "The console's HttpOnly session cookie (`POST /api/v1/sessions` with `cookie: true`)" },
  csrfHeader: { type: 'apiKey', in: 'header', name: 'X-CSRF-Token', description: 'Required with the session cookie on every call but GET, HEAD and OPTIONS' },
  webhookSignature: { type: 'apiKey', in: 'header', name: 'X-Signature', description: "The payment provider's HMAC-SHA256 signature over `<timestamp>.<raw body>`" },
};

/** The whole document for the routes of one server (`registeredRoutes(app)`); routes without a contract are left out. */
export function openApiDocument(routes: readonly DocumentedRoute[], version: string): Json {
  const comps = new Components();
  const paths: Record<string, Record<string, Json>> = {};
  const tags = new Set<string>();
  const operationIds = new Map<string, string>();
  for (const r of routes) {
    if (!r.contract || r.method === 'HEAD') continue;
    const where = `${r.method} ${r.url}`;
    const c = r.contract.contract;
    const before = operationIds.get(c.operationId);
    if (before && before !== where) throw new Error(`OpenAPI: operationId ${c.operationId} is used by ${before} and ${where}`);
    operationIds.set(c.operationId, where);
    const path = openApiPath(c.documentAs ?? r.url);
    (paths[path] ??= {})[r.method.toLowerCase()] = operation(r.contract, comps, where);
    tags.add(c.tag);
  }
  const used = new Set(
    Object.values(paths)
      .flatMap((ops) => Object.values(ops))
      .flatMap((op) => (op.security as Json[]).flatMap((alt) => Object.keys(alt))),
  );
  const sortedPaths = Object.fromEntries(Object.entries(paths).sort(([a], [b]) => a.localeCompare(b)));
  return {
    openapi: '3.0.3',
    info: {
      title: 'relay-jobs API',
      version,
      description:
        "The HTTP API of relay-jobs: probes and metrics, and under `/api/v1` the admin API (jobs, accounts, usage, billing, ...). Every error answer has the `Error` shape. Generated from the routes' own validation schemas.",
      license: { name: 'MIT', url: 'https://opensource.org/licenses/MIT' },
    },
    servers: [{ url: '/', description: 'this replica' }],
    tags: [...tags].sort().map((name) => ({ name, description: TAGS[name] ?? name })),
    paths: sortedPaths,
    components: {
      schemas: Object.fromEntries(Object.entries(comps.schemas).sort(([a], [b]) => a.localeCompare(b))),
      // Only the schemes some operation uses (an unused one is noise to a client generator).
      securitySchemes: Object.fromEntries(Object.entries(SECURITY_SCHEMES).filter(([name]) => used.has(name))),
    },
  };
}

/** The document of one operation alone (`method` as registered, `path` as the route or its `documentAs` names it): what the contract check compiles per route. */
export function operationDocument(routes: readonly DocumentedRoute[], method: string, path: string, version: string): Json {
  return openApiDocument(
    routes.filter((r) => r.method === method && (r.contract?.contract.documentAs ?? r.url) === path),
    version,
  );
}
