import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import Fastify from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import { registerConsoleRoutes } from '../src/http/console-routes.js';
import { handleError } from '../src/http/errors.js';
import { silentLogger } from '../src/telemetry/logger.js';

/** The console's pages go to browsers only: a health check or curl on a mistyped path must not get 200 and the console. */
describe('console routes: index.html for a browser page, 404 for anything else', () => {
  const root = mkdtempSync(join(tmpdir(), 'rj-console-'));
  mkdirSync(join(root, 'assets'));
  writeFileSync(join(root, 'index.html'), '<!doctype html><title>console</title>');
  writeFileSync(join(root, 'assets', 'app-1a2b.js'), 'console.log(1)');
  const app = Fastify();
  app.setErrorHandler(handleError(silentLogger()));
  registerConsoleRoutes(app, root);
  const get = (url: string, accept?: string) => app.inject({ url, headers: accept ? { accept } : {} });
  const browser = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';
  afterAll(async () => {
    await app.close();
    rmSync(root, { recursive: true, force: true });
  });

  it('a console route reloaded in a browser gets the console; / gets it whatever the Accept', async () => {
    for (const [url, accept] of [
      ['/jobs/token_refresh', browser],
      ['/', undefined],
      ['/', '*/*'],
    ] as const) {
      const res = await get(url, accept);
      expect(res.statusCode, url).toBe(200);
      expect(res.headers['content-type']).toContain('text/html');
      expect(res.body).toContain('<title>console</title>');
    }
    expect((await get('/assets/app-1a2b.js')).headers['cache-control']).toContain('immutable');
  });

  it('a mistyped health path, a missing asset and an API path are 404 in the one error shape', async () => {
    for (const [url, accept] of [
      ['/health', '*/*'],
      ['/health', undefined],
      ['/livez', 'application/json'],
      ['/assets/gone.js', browser],
      ['/api/v1', browser],
    ] as const) {
      const res = await get(url, accept);
      expect(res.statusCode, `${url} (${accept})`).toBe(404);
      expect(res.json().error.code).toBe('not_found');
      expect(res.json().error.message).toContain(url);
    }
  });
});
