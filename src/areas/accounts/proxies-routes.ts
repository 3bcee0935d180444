import { InvalidInput, Conflict, notFound } from '../../errors/app-error.js';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { AccountsServices } from './wiring.js';
import { restoreProxy } from './proxy-expiry.js';
import { date } from './accounts-routes.js';
import { id, when } from '../../http/field-schemas.js';
import { parseBody, parseId } from '../../http/validation.js';
import { AccountMetrics } from './metrics.js';

const proxyUrl = z
  .string()
  .max(2048)
  .regex(/^https?:\/\/[^\s/]+/, 'expected an http:// or https:// proxy URL')
  // The WHATWG parser is what the HTTP client uses: a URL it refuses (http://[::1:bad) would fail every refresh through it.
  .refine((u) => URL.canParse(u), 'expected a valid URL (the host or port could not be parsed)');
const newProxySchema = z
  .object({
    name: z.string().min(1).max(200),
    url: proxyUrl,
    expires_at: when.optional().nullable(),
    fallback_mode: z.enum(['none', 'proxy', 'direct']).optional(),
    backup_proxy_id: id.optional().nullable(),
  })
  .strict();
const patchProxySchema = newProxySchema
  .partial()
  .extend({ status: z.enum(['active', 'disabled']).optional() })
  .strict();

/** Egress proxies: CRUD, their expiry and fallback chain, and the manual restore. URLs are shown with the password masked. */
export function registerProxyRoutes(api: FastifyInstance, deps: Pick<RouteDeps<AccountsServices>, 'clock' | 'db' | 'log' | 'metrics' | 'services'>): void {
  const { proxies } = deps.services;

  async function checkBackup(backup: number | null | undefined, self: number | null): Promise<void> {
    if (backup === undefined || backup === null) return;
    if (backup === self) throw new InvalidInput([{ field: 'backup_proxy_id', message: 'a proxy cannot be its own backup' }]);
    if (!(await proxies.exists(backup))) throw new InvalidInput([{ field: 'backup_proxy_id', message: `no proxy ${backup}` }]);
  }

  api.post('/proxies', async (req, reply) => {
    const b = parseBody(newProxySchema, req.body);
    await checkBackup(b.backup_proxy_id, null);
    const view = await proxies.create({ name: b.name, url: b.url, expiresAt: date(b.expires_at), fallbackMode: b.fallback_mode, backupProxyId: b.backup_proxy_id });
    deps.log.info({ proxy_id: view.id }, 'proxy created');
    return reply.code(201).send(view);
  });

  api.get('/proxies', async () => ({ proxies: await proxies.list() }));

  api.get<{ Params: { id: string } }>('/proxies/:id', async (req) => {
    const n = parseId(req.params.id);
    const view = n && (await proxies.get(n));
    return view || notFound(`no proxy ${req.params.id}`);
  });

  api.patch<{ Params: { id: string } }>('/proxies/:id', async (req) => {
    const n = parseId(req.params.id);
    const b = parseBody(patchProxySchema, req.body);
    if (!n || !(await proxies.exists(n))) return notFound(`no proxy ${req.params.id}`);
    await checkBackup(b.backup_proxy_id, n);
    const view = await proxies.update(n, { name: b.name, url: b.url, expiresAt: date(b.expires_at), fallbackMode: b.fallback_mode, backupProxyId: b.backup_proxy_id, status: b.status });
    deps.log.info({ proxy_id: n, fields: Object.keys(b) }, 'proxy updated');
    return view;
  });

  api.post<{ Params: { id: string } }>('/proxies/:id/restore', async (req) => {
    const n = parseId(req.params.id);
    const view = n && (await proxies.get(n));
    if (!view) return notFound(`no proxy ${req.params.id}`);
    if (view.expires_at && Date.parse(view.expires_at) <= deps.clock.now()) {
      throw new Conflict('proxy_expired', `proxy ${n} expired at ${view.expires_at}; set a later expires_at first (PATCH /api/v1/proxies/${n})`);
    }
    if (view.status === 'disabled') throw new Conflict('proxy_disabled', `proxy ${n} is disabled; enable it first`);
    const moved = await restoreProxy(deps.db, proxies, n, 'manual');
    deps.metrics.group(AccountMetrics).proxyAccountsMoved.inc({ direction: 'restored' }, moved.length);
    deps.log.info({ proxy_id: n, accounts_restored: moved.length }, 'proxy restored by hand');
    return { restored: moved.length, account_ids: moved, proxy: await proxies.get(n) };
  });
}
