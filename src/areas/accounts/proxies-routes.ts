import { InvalidInput, Conflict, notFound } from '../../errors/app-error.js';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../modules/area.js';
import type { AccountsServices } from './wiring.js';
import { restoreProxy } from './proxy-expiry.js';
import { date } from './accounts-routes.js';
import { id, when } from '../../http/field-schemas.js';
import { parseId } from '../../http/validation.js';
import { json, route } from '../../http/contract.js';
import { AccountMetrics } from './metrics.js';
import { httpUrlProblem } from '../../config/server-url.js';

const proxyUrl = z
  .string()
  .max(2048)
  .regex(/^https?:\/\/[^\s/]+/, 'expected an http:// or https:// proxy URL')
  // Checked as the HTTP client will read it, as the config's URLs are: a URL the WHATWG parser refuses
  // (http://[::1:bad), or whose password does not decode (%ZZ), would fail every refresh through it.
  // The message never quotes the URL (it may hold a password).
  .superRefine((u, ctx) => {
    const problem = httpUrlProblem(u);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  });
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

const tag = 'accounts';
const NO_PROXY = 'no proxy with this id';
const Params = z.object({ id: z.string().meta({ description: 'the proxy id' }) });
const time = z.iso.datetime({ offset: true });
const Proxy = z
  .object({
    id: z.number().int(),
    name: z.string(),
    url: z.string().meta({ description: 'the URL with any password masked; the full URL is sealed and never returned' }),
    status: z.enum(['active', 'expired', 'disabled']),
    expires_at: time.nullable(),
    fallback_mode: z.enum(['none', 'proxy', 'direct']),
    backup_proxy_id: z.number().int().nullable(),
    expired_at: time.nullable(),
    accounts: z.number().int().meta({ description: 'accounts using it now' }),
    fallback_accounts: z.number().int().meta({ description: 'accounts moved off it when it expired, to come back on restore' }),
    created_at: time,
    updated_at: time,
  })
  .meta({ id: 'Proxy' });
const ProxyList = z.object({ proxies: z.array(Proxy) }).meta({ id: 'ProxyList' });
const ProxyRestored = z.object({ restored: z.number().int(), account_ids: z.array(z.number().int()), proxy: Proxy.nullable() }).meta({ id: 'ProxyRestored' });

/** Egress proxies: CRUD, their expiry and fallback chain, and the manual restore. URLs are shown with the password masked. */
export function registerProxyRoutes(api: FastifyInstance, deps: Pick<RouteDeps<AccountsServices>, 'clock' | 'db' | 'log' | 'metrics' | 'services'>): void {
  const { proxies } = deps.services;

  async function checkBackup(backup: number | null | undefined, self: number | null): Promise<void> {
    if (backup === undefined || backup === null) return;
    if (backup === self) throw new InvalidInput([{ field: 'backup_proxy_id', message: 'a proxy cannot be its own backup' }]);
    if (!(await proxies.exists(backup))) throw new InvalidInput([{ field: 'backup_proxy_id', message: `no proxy ${backup}` }]);
  }

  route(
    api,
    {
      method: 'POST',
      path: '/proxies',
      operationId: 'createProxy',
      summary: 'Add an egress proxy (its URL is sealed; shown with the password masked)',
      tag,
      body: newProxySchema,
      responses: { 201: json(Proxy) },
    },
    async ({ body: b }, _req, reply) => {
      await checkBackup(b.backup_proxy_id, null);
      const view = await proxies.create({ name: b.name, url: b.url, expiresAt: date(b.expires_at), fallbackMode: b.fallback_mode, backupProxyId: b.backup_proxy_id });
      deps.log.info({ proxy_id: view.id }, 'proxy created');
      return reply.code(201).send(view);
    },
  );

  route(api, { method: 'GET', path: '/proxies', operationId: 'listProxies', summary: 'Every proxy', tag, responses: { 200: json(ProxyList) } }, async () => ({ proxies: await proxies.list() }));

  route(
    api,
    { method: 'GET', path: '/proxies/:id', operationId: 'getProxy', summary: 'One proxy', tag, params: Params, responses: { 200: json(Proxy) }, errors: { 404: NO_PROXY } },
    async ({ params }) => {
      const n = parseId(params.id);
      const view = n && (await proxies.get(n));
      return view || notFound(`no proxy ${params.id}`);
    },
  );

  route(
    api,
    {
      method: 'PATCH',
      path: '/proxies/:id',
      operationId: 'updateProxy',
      summary: 'Change a proxy',
      tag,
      params: Params,
      body: patchProxySchema,
      responses: { 200: json(Proxy) },
      errors: { 404: NO_PROXY },
    },
    async ({ params, body: b }) => {
      const n = parseId(params.id);
      if (!n || !(await proxies.exists(n))) return notFound(`no proxy ${params.id}`);
      await checkBackup(b.backup_proxy_id, n);
      const view = await proxies.update(n, { name: b.name, url: b.url, expiresAt: date(b.expires_at), fallbackMode: b.fallback_mode, backupProxyId: b.backup_proxy_id, status: b.status });
      deps.log.info({ proxy_id: n, fields: Object.keys(b) }, 'proxy updated');
      return view;
    },
  );

  route(
    api,
    {
      method: 'POST',
      path: '/proxies/:id/restore',
      operationId: 'restoreProxy',
      summary: 'Move the accounts that fell back off this proxy back onto it',
      tag,
      params: Params,
      responses: { 200: json(ProxyRestored) },
      errors: { 404: NO_PROXY, 409: '`proxy_expired`: set a later expires_at first; `proxy_disabled`: enable it first' },
    },
    async ({ params }) => {
      const n = parseId(params.id);
      const view = n && (await proxies.get(n));
      if (!view) return notFound(`no proxy ${params.id}`);
      if (view.expires_at && Date.parse(view.expires_at) <= deps.clock.now()) {
        throw new Conflict('proxy_expired', `proxy ${n} expired at ${view.expires_at}; set a later expires_at first (PATCH /api/v1/proxies/${n})`);
      }
      if (view.status === 'disabled') throw new Conflict('proxy_disabled', `proxy ${n} is disabled; enable it first`);
      const moved = await restoreProxy(deps.db, proxies, n, 'manual');
      deps.metrics.group(AccountMetrics).proxyAccountsMoved.inc({ direction: 'restored' }, moved.length);
      deps.log.info({ proxy_id: n, accounts_restored: moved.length }, 'proxy restored by hand');
      return { restored: moved.length, account_ids: moved, proxy: await proxies.get(n) };
    },
  );
}
