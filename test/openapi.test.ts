import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { FastifyInstance } from 'fastify';
import { loadConfig } from '../src/app/config-schema.js';
import { Runtime } from '../src/app/runtime.js';
import { buildHttpServer, registeredRoutes } from '../src/http/server.js';
import { openApiPath } from '../src/http/openapi.js';
import { silentLogger } from '../src/telemetry/logger.js';
import { REDIS_URL, TEST_MASTER_KEY, dropRedisPrefix, freshDatabase, uniqueName } from './helpers/services.js';

const ADMIN = 'openapi-admin-token-0123456789abcdef';

/**
 * Routes that are not operations: Fastify's automatic HEAD twin of every GET, and the admin API's
 * catch-all (`/api/v1/*`: 401 before auth, 404 after), which answers for every path no route has.
 */
const NOT_OPERATIONS = (r: { method: string; url: string }) => r.method === 'HEAD' || r.url === '/api/v1/*';

type Doc = {
  openapi: string;
  paths: Record<string, Record<string, { operationId: string; security: unknown[]; responses: Record<string, unknown> }>>;
  components: { schemas: Record<string, unknown> };
};

/** Issue 52: the document is generated from the routes' contracts, served without auth, and covers every route. */
describe('OpenAPI document (cluster runtime, real PostgreSQL and Redis)', () => {
  let db: Awaited<ReturnType<typeof freshDatabase>>;
  let rt: Runtime;
  let http: FastifyInstance;
  let doc: Doc;
  const prefix = uniqueName('rjoapi');

  beforeAll(async () => {
    db = await freshDatabase({ migrated: true });
    const config = loadConfig({
      env: {
        DATABASE_URL: db.url,
        REDIS_URL,
        RELAY_JOBS_INSTANCE_ID: 'openapi-1',
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS__USAGE__RETENTION: '7d', // a week of usage: 11 daily partitions made at the first start, not 94 (test/helpers/cluster.ts)
        RELAY_JOBS_ADMIN_TOKEN: ADMIN,
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
        RELAY_JOBS__REDIS__KEY_PREFIX: prefix,
      },
    });
    rt = await Runtime.create(config, { logger: silentLogger() });
    http = buildHttpServer(rt);
    await http.ready();
    const res = await http.inject({ url: '/api/v1/openapi.json' });
    expect(res.statusCode, res.body).toBe(200);
    doc = res.json();
  });
  afterAll(async () => {
    await rt?.shutdown();
    await http?.close();
    await db?.drop();
    await dropRedisPrefix(prefix);
  });

  it('is OpenAPI 3.0.3, served without a token, and holds no secret', async () => {
    expect(doc.openapi).toBe('3.0.3');
    const res = await http.inject({ url: '/api/v1/openapi.json' });
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(res.body).not.toContain(ADMIN);
    expect(res.body).not.toContain(TEST_MASTER_KEY);
    // The document describes itself, and the admin API's routes carry the bearer/cookie security.
    expect(doc.paths['/api/v1/openapi.json']?.get?.security).toEqual([]);
    expect(doc.paths['/api/v1/scheduler/accounts']?.get?.security).toEqual([{ adminToken: [] }, { sessionCookie: [] }]);
    expect(Object.keys(doc.paths['/api/v1/scheduler/accounts']!.get!.responses)).toEqual(['200', '400', '401', '500']);
    expect(doc.components.schemas.Error).toBeDefined();
  });

  it('the reference page (Redoc, served by the replica: no CDN) renders this document, without a token', async () => {
    const page = await http.inject({ url: '/api/v1/docs' });
    expect(page.statusCode).toBe(200);
    expect(page.headers['content-type']).toMatch(/^text\/html/);
    expect(page.body).toContain('<redoc spec-url="openapi.json"');
    // Every script is the replica's own.
    expect([...page.body.matchAll(/src="([^"]+)"/g)].map((m) => m[1])).toEqual(['docs/redoc.standalone.js']);
    const js = await http.inject({ url: '/api/v1/docs/redoc.standalone.js' });
    expect(js.statusCode).toBe(200);
    expect(js.headers['content-type']).toMatch(/^text\/javascript/);
    expect(js.body.length).toBeGreaterThan(500_000);
  });

  it('documents every route the server registered (the failure lists the missing ones)', () => {
    const routes = registeredRoutes(http).filter((r) => !NOT_OPERATIONS(r));
    expect(routes.length).toBeGreaterThan(100);
    const documented = (r: { method: string; url: string; contract?: { contract: { documentAs?: string } } }) =>
      doc.paths[openApiPath(r.contract?.contract.documentAs ?? r.url)]?.[r.method.toLowerCase()] !== undefined;
    const missing = routes.filter((r) => !documented(r)).map((r) => `${r.method} ${r.url}`);
    expect(missing, `${missing.length} route(s) are not in the OpenAPI document (register them with route() from src/http/contract.ts)`).toEqual([]);
  });

  it('operationIds are unique and every path parameter is declared', () => {
    const ids = Object.values(doc.paths).flatMap((ops) => Object.values(ops).map((o) => o.operationId));
    expect(new Set(ids).size).toBe(ids.length);
    for (const [path, ops] of Object.entries(doc.paths)) {
      const inPath = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]).sort();
      for (const op of Object.values(ops) as Array<{ parameters?: Array<{ in: string; name: string }> }>) {
        expect(
          (op.parameters ?? [])
            .filter((p) => p.in === 'path')
            .map((p) => p.name)
            .sort(),
          path,
        ).toEqual(inPath);
      }
    }
  });

  it('passes `redocly lint` (the recommended rules, redocly.yaml), offline', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rj-openapi-'));
    try {
      const file = join(dir, 'openapi.json');
      writeFileSync(file, JSON.stringify(doc));
      const run = await promisify(execFile)(process.execPath, ['node_modules/@redocly/cli/bin/cli.js', 'lint', file, '--config', 'redocly.yaml', '--format', 'stylish'], {
        env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
        timeout: 120_000,
      }).catch((err: { stdout: string; stderr: string; code: number }) => err);
      const out = `${run.stdout}${run.stderr}`;
      expect(out, out).toMatch(/Woohoo! Your API description is valid/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
