import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import { json, media, route } from './contract.js';
import { OPENAPI_PATH } from './openapi.js';
import { AppError } from '../errors/app-error.js';
import { assertNumericQuery } from './validation.js';

/** The reference page and its renderer (Redoc's standalone bundle, served by the replica itself: no CDN). */
export const REFERENCE_PATH = '/api/v1/docs';
const BUNDLE_PATH = `${REFERENCE_PATH}/redoc.standalone.js`;

/**
 * Redoc's bundle: copied beside this module by the build (scripts/build.mjs, so the npm package
 * carries it), else read from node_modules (a checkout run with tsx, the tests). Read once.
 */
let bundle: Buffer | null | undefined;
function redocBundle(): Buffer | null {
  if (bundle !== undefined) return bundle;
  const beside = fileURLToPath(new URL('./redoc.standalone.js', import.meta.url));
  let file: string | null = existsSync(beside) ? beside : null;
  if (!file) {
    try {
      file = createRequire(import.meta.url).resolve('redoc/bundles/redoc.standalone.js');
    } catch {
      file = null;
    }
  }
  bundle = file ? readFileSync(file) : null;
  return bundle;
}

// Relative URLs: the page works behind a proxy that mounts the service under a path prefix.
const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>relay-jobs API reference</title>
<style>body { margin: 0; }</style>
</head>
<body>
<redoc spec-url="openapi.json" hide-download-button="false"></redoc>
<script src="docs/redoc.standalone.js"></script>
</body>
</html>
`;

/**
 * `GET /api/v1/openapi.json` (pinned by issue 52): the OpenAPI document; `GET /api/v1/docs`: the
 * reference page rendering it. No authentication (the document holds no secret: schemas, paths and
 * the names of the security schemes only). Registered on the root, outside the admin API's token hook.
 */
export function registerOpenApiRoutes(app: FastifyInstance, document: () => Record<string, unknown>): void {
  const tag = 'meta';
  route(
    app,
    {
      method: 'GET',
      path: OPENAPI_PATH,
      operationId: 'getOpenApiDocument',
      summary: 'This OpenAPI document',
      description: "Generated from the routes' own validation schemas; no authentication.",
      tag,
      responses: {
        200: json(
          z.looseObject({ openapi: z.literal('3.0.3'), info: z.looseObject({ title: z.string(), version: z.string() }), paths: z.record(z.string(), z.unknown()) }).meta({ id: 'OpenApiDocument' }),
        ),
      },
    },
    async (_input, req) => {
      assertNumericQuery(req.query);
      return document();
    },
  );
  route(
    app,
    { method: 'GET', path: REFERENCE_PATH, operationId: 'getApiReference', summary: 'The API reference page (Redoc)', tag, responses: { 200: media('text/html; charset=utf-8', 'the page') } },
    async (_input, req, reply) => {
      assertNumericQuery(req.query);
      return reply.type('text/html; charset=utf-8').header('x-content-type-options', 'nosniff').send(PAGE);
    },
  );
  route(
    app,
    {
      method: 'GET',
      path: BUNDLE_PATH,
      operationId: 'getApiReferenceScript',
      summary: "The reference page's renderer (Redoc's standalone bundle)",
      tag,
      responses: { 200: media('text/javascript; charset=utf-8', 'Redoc') },
      errors: { 503: '`reference_unavailable`: this installation has no Redoc bundle' },
    },
    async (_input, req, reply) => {
      // Like every /api/v1 route (server.ts), though outside the admin API's hooks: numeric query parameters in range.
      assertNumericQuery(req.query);
      const js = redocBundle();
      if (!js) throw new AppError('unavailable', 'reference_unavailable', 'the API reference renderer (redoc.standalone.js) is not installed; the document itself is at /api/v1/openapi.json');
      return reply.type('text/javascript; charset=utf-8').header('cache-control', 'public, max-age=3600').header('x-content-type-options', 'nosniff').send(js);
    },
  );
}
