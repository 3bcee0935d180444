import Fastify, { type FastifyInstance, type HTTPMethods } from 'fastify';
import type { RouteDeps } from '../modules/area.js';
import type { Services } from '../app/registry.js';
import { requireAdmin } from './auth.js';
import { handleError } from './errors.js';
import { notFound } from '../errors/app-error.js';
import { assertBodyShape, assertNumericQuery, assertStorable } from './validation.js';
import { AREAS } from '../app/registry.js';
import { registerConsoleRoutes } from './console-routes.js';
import { clientErrorHandler, frameworkErrors, serverTimeouts } from './connection-limits.js';
import { registerTimelineRoutes } from './timeline-routes.js';
import { registerEventRoutes } from './event-streams.js';
import { registerJobRoutes } from './job-routes.js';
import { traceRequests } from '../telemetry/tracing-http.js';
import { contractOf, type RegisteredContract } from './contract.js';
import { CONTRACT_CHECK_ENV, ContractChecker, contractCheckHook } from './contract-check.js';
import { openApiDocument, operationDocument } from './openapi.js';
import { registerOpenApiRoutes } from './openapi-routes.js';
import { registerProbeRoutes } from './probe-routes.js';
import { VERSION } from '../version.js';

/**
 * Body size limits. Most admin payloads are a few fields, so the default is small; the routes
 * that take lists say so (usage batches, account imports, quota increments, idempotency bodies).
 * Unauthenticated requests never get this far: the token is checked before the body is read.
 */
export const BODY_LIMIT = 64 * 1024;

/** What the server uses of the running process: the routes' face plus readiness for `/readyz`. */
export interface HttpDeps extends RouteDeps<Services> {
  readiness(): Promise<{ ready: boolean; checks: Record<string, string> }>;
}

/** One registered route: what `registeredRoutes` lists (the generic body and query checks walk it). */
export interface RouteEntry {
  method: string;
  url: string;
  /** Its contract, when registered through `route()` (contract.ts): what the OpenAPI document is made of. */
  contract?: RegisteredContract;
}

const ROUTE_TABLES = new WeakMap<FastifyInstance, RouteEntry[]>();

/** Every route of a server `buildHttpServer` made, as registered (methods one by one, `/api/v1/...` with its prefix). */
export function registeredRoutes(app: FastifyInstance): readonly RouteEntry[] {
  return ROUTE_TABLES.get(app) ?? [];
}

/** The catch-all that answers 404 after auth: no body of its own to check. */
const API_CATCH_ALL = '/api/v1/*';

/** Probes, metrics and the admin API. Routes call the runtime; they know no SQL and no Redis keys. */
export function buildHttpServer(rt: HttpDeps): FastifyInstance {
  // maxParamLength: fastify's default (100) answered 404 "no route" for a path naming a user id of
  // 101-128 characters, which the quota API accepts in a body; longer than any id, so each route's
  // own schema says what is wrong (a 400 naming the parameter).
  const app = Fastify({
    logger: false,
    bodyLimit: BODY_LIMIT,
    routerOptions: { maxParamLength: 1024 },
    forceCloseConnections: 'idle',
    ...serverTimeouts(rt.config),
    clientErrorHandler,
    frameworkErrors,
  });
  // A span per request, continuing the caller's traceparent (telemetry/tracing-http.ts); no hook while tracing is off.
  traceRequests(app);
  const routes: RouteEntry[] = [];
  ROUTE_TABLES.set(app, routes);
  app.addHook('onRoute', (r) => {
    for (const method of ([] as HTTPMethods[]).concat(r.method)) routes.push({ method, url: r.url, contract: contractOf(r.config) });
  });
  // The OpenAPI document of this server's routes, made once on first use (after every route is registered).
  let document: Record<string, unknown> | undefined;
  const openApi = () => (document ??= openApiDocument(routes, VERSION));
  // The check reads the served document once it is made, else generates the one operation it checks
  // (or the whole document, should that operation alone not generate: a component's request form
  // named before its response form throws on its own, where the whole document names it `…Input`).
  const checked = (method: string, path: string) => {
    if (document) return document;
    try {
      return operationDocument(routes, method, path, VERSION);
    } catch {
      return openApi();
    }
  };
  if (process.env[CONTRACT_CHECK_ENV] === '1') app.addHook('onSend', contractCheckHook(new ContractChecker(checked), rt.log));

  app.setErrorHandler(handleError(rt.log));
  app.setNotFoundHandler(async (req) => notFound(`no route ${req.method} ${req.url.slice(0, 200)}`));
  // API answers carry tokens, balances and personal data: no browser or proxy keeps them.
  app.addHook('onRequest', async (req, reply) => {
    if (!req.url.startsWith('/assets/') && req.url !== '/' && !req.url.startsWith('/?')) void reply.header('cache-control', 'no-store');
  });

  registerProbeRoutes(app, rt);

  // Every text field of every JSON API: no NUL, no lone surrogate, no hostile nesting (400 naming the field).
  app.addHook('preValidation', async (req) => {
    assertStorable(req.params, 'params');
    assertStorable(req.query, 'query');
    if (typeof req.body === 'object') assertStorable(req.body);
  });

  for (const area of AREAS) area.publicRoutes?.(app, rt);
  void app.register(
    async (api) => {
      // onRequest, not preHandler: an unauthenticated body is never read or parsed.
      api.addHook('onRequest', requireAdmin(rt));
      // After auth, before every admin route's handler (issue 51): a body is a JSON object (an array
      // only where a route declares `arrayBody`), and numeric query parameters are whole numbers in range.
      api.addHook('preValidation', async (req) => {
        if (req.routeOptions.url === API_CATCH_ALL) return;
        assertBodyShape(req.body, (req.routeOptions.config as { arrayBody?: boolean } | undefined)?.arrayBody === true);
        assertNumericQuery(req.query);
      });
      // Every other path under /api/v1 lands here, after the hook above: 401 to a caller without a token
      // (routes cannot be listed by probing), 404 only after auth.
      api.all('/*', async (req) => notFound(`no route ${req.method} ${req.url.slice(0, 200)}`));

      registerJobRoutes(api, rt);
      registerTimelineRoutes(api, rt);
      // Before the areas' routes: its onResponse hook ends a session's streams at sign-out (admin's DELETE sessions/current).
      registerEventRoutes(api, rt);

      for (const area of AREAS) area.routes?.(api, rt);
    },
    { prefix: '/api/v1' },
  );
  registerOpenApiRoutes(app, openApi);
  registerConsoleRoutes(app);
  return app;
}
