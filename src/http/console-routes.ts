import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { notFound } from '../errors/app-error.js';
import { media, route } from './contract.js';

/** web/dist, found from src/http (tsx, tests) and from dist/http (the build) alike. */
export const CONSOLE_DIST = fileURLToPath(new URL('../../web/dist', import.meta.url));

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
};

/** What the console's route answers with (its files' types, JSON aside: the bundle has none). */
const CONSOLE_TYPES = [
  ...new Set(
    Object.entries(TYPES)
      .filter(([ext]) => ext !== '.json')
      .map(([, t]) => t),
  ),
];

const HEADERS = {
  'content-security-policy': "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
};

interface Asset {
  body: Buffer;
  type: string;
  immutable: boolean;
}

/** Every file of the bundle, keyed by its URL path, read once. Requests are looked up here: no path from a request reaches the filesystem. */
export function loadBundle(root = CONSOLE_DIST): Map<string, Asset> {
  const files = new Map<string, Asset>();
  if (!existsSync(root)) return files;
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const full = join(dir, name);
      if (statSync(full).isDirectory()) walk(full);
      else {
        const url = '/' + relative(root, full).split(sep).join('/');
        files.set(url, { body: readFileSync(full), type: TYPES[extname(name)] ?? 'application/octet-stream', immutable: url.startsWith('/assets/') });
      }
    }
  };
  walk(root);
  return files;
}

/**
 * The console at `/`: the bundle's files by exact path, and index.html for a page a browser asks
 * for (a console route such as `/jobs/token_refresh`, reloaded or linked). Anything else is 404:
 * an API path, a missing file (`/assets/gone.js`), and a request that does not accept HTML, such as
 * a health check or `curl` pointed at a mistyped path (`/health`), which must not pass on the console's page.
 */
export function registerConsoleRoutes(app: FastifyInstance, root = CONSOLE_DIST): void {
  const files = loadBundle(root);
  const index = files.get('/index.html');
  route(
    app,
    {
      method: 'GET',
      path: '/*',
      documentAs: '/',
      operationId: 'getConsole',
      summary: 'The web console',
      description:
        "`/` and any extensionless page a browser asks for (`Accept: text/html`) answer the console's index.html; the bundle's files (`/assets/...`) answer by exact path. Any other path is 404, `/api/...` included.",
      tag: 'console',
      responses: { 200: media(CONSOLE_TYPES, "the console's page, or one of its files") },
      errors: { 404: 'no such file, or a request that does not accept HTML' },
      nonErrors: { 503: media('text/plain; charset=utf-8', 'the console is not built (web/dist is missing): an instruction in plain text') },
    },
    async (_input, req, reply) => {
      const path = req.url.split('?')[0]!;
      if (path.startsWith('/api/') || path === '/api') notFound(`no route GET ${path}`);
      const page = path === '/' || (/\btext\/html\b/.test(req.headers.accept ?? '') && !extname(path));
      const asset = files.get(path) ?? (page ? index : undefined);
      if (!asset && index) notFound(`no route GET ${path.slice(0, 200)}; the console's pages are answered to a browser (Accept: text/html)`);
      // Not an error answer but an operator's instruction, in plain text for curl and a browser alike.
      // eslint-disable-next-line no-restricted-syntax -- a plain-text page, not the API's error shape
      if (!asset) return reply.code(503).type('text/plain; charset=utf-8').send('the console is not built: run `npm run build` (web/dist is missing)\n');
      void reply.headers(HEADERS).header('cache-control', asset === index || !asset.immutable ? 'no-cache' : 'public, max-age=31536000, immutable');
      return reply.type(asset.type).send(asset.body);
    },
  );
}
