import { InvalidInput, notFound } from '../../errors/app-error.js';
import type { FastifyInstance } from 'fastify';
import type { z } from 'zod';
import type { RouteDeps } from '../../modules/area.js';
import type { AccountsServices } from './wiring.js';
import type { AccountMetadata, Credentials } from './store/accounts.js';
import { jwtExpiry } from './jwt.js';
import { refreshTokenFingerprint } from './lost-rotation.js';
import { parseBody, parseId, type FieldError } from '../../http/validation.js';
import { json, route } from '../../http/contract.js';
import { registerTokenRoutes } from './token-routes.js';
import { Account, AccountImport, AccountList, AccountWritten, IdParams, importSchema, listQuery, newAccountSchema, patchAccountSchema, type credentialsSchema } from './accounts-contracts.js';

const tag = 'accounts';
const NO_ACCOUNT = 'no account with this id';

function mergeMetadata(cur: AccountMetadata, patch: Record<string, string | null | undefined>): AccountMetadata {
  const out: Record<string, string> = { ...(cur as Record<string, string>) };
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else if (v !== undefined) out[k] = v;
  }
  return out as AccountMetadata;
}

export const date = (v: string | null | undefined) => (v === undefined ? undefined : v === null ? null : new Date(v));

function tokenExpiry(c: z.infer<typeof credentialsSchema>): { at: Date | null; warning?: string } {
  if (c.expires_at) return { at: new Date(c.expires_at) };
  const at = jwtExpiry(c.access_token);
  return at
    ? { at }
    : { at: null, warning: 'credentials.access_token is not a JWT with an exp claim and credentials.expires_at is not set: the token expiry is unknown, so it is refreshed only on 401 or on request' };
}

function creds(c: z.infer<typeof credentialsSchema>): Credentials {
  return { access_token: c.access_token, refresh_token: c.refresh_token ?? null, id_token: c.id_token ?? null };
}

/** Accounts admin API, plus the hot path's token and 401 endpoints. No response ever carries a credential except `POST accounts/:id/token`. */
export function registerAccountRoutes(api: FastifyInstance, deps: Pick<RouteDeps<AccountsServices>, 'log' | 'services'>): void {
  const { accounts, proxies, tokens, providers } = deps.services;

  async function checkRefs(body: { platform?: string; proxy_id?: number | null }, prefix = ''): Promise<FieldError[]> {
    const errors: FieldError[] = [];
    const at = (f: string) => (prefix ? `${prefix}.${f}` : f);
    if (body.platform !== undefined && !providers.has(body.platform)) {
      errors.push({
        field: at('platform'),
        message: `unknown platform ${JSON.stringify(body.platform)}: expected one of ${[...providers.keys()].join(', ')}, or configure oauth.providers.${body.platform}.token_url and .client_id`,
      });
    }
    if (body.proxy_id && !(await proxies.exists(body.proxy_id))) errors.push({ field: at('proxy_id'), message: `no proxy ${body.proxy_id}` });
    return errors;
  }

  function toNew(b: z.infer<typeof newAccountSchema>) {
    const exp = tokenExpiry(b.credentials);
    return {
      input: {
        platform: b.platform,
        name: b.name,
        credentials: creds(b.credentials),
        tokenExpiresAt: exp.at,
        proxyId: b.proxy_id ?? null,
        expiresAt: date(b.expires_at) ?? null,
        autoPauseOnExpired: b.auto_pause_on_expired,
        schedulable: b.schedulable,
        metadata: b.metadata,
      },
      warning: exp.warning,
    };
  }

  route(
    api,
    {
      method: 'POST',
      path: '/accounts',
      operationId: 'createAccount',
      summary: 'Add an account (its credentials are sealed, never returned)',
      description: 'An unknown platform or proxy is a 400 naming the field.',
      tag,
      body: newAccountSchema,
      responses: { 201: json(AccountWritten) },
    },
    async ({ body }, _req, reply) => {
      const errors = await checkRefs(body);
      if (errors.length) throw new InvalidInput(errors);
      const { input, warning } = toNew(body);
      const view = await accounts.create(input);
      deps.log.info({ account_id: view.id, platform: view.platform }, 'account created');
      return reply.code(201).send({ ...view, ...(warning ? { warnings: [warning] } : {}) });
    },
  );

  route(
    api,
    {
      method: 'POST',
      path: '/accounts/import',
      operationId: 'importAccounts',
      summary: 'Add up to 5000 accounts at once, all or none',
      tag,
      body: importSchema,
      responses: { 201: json(AccountImport) },
      options: { bodyLimit: 16 * 1024 * 1024 },
    },
    async ({ body }, _req, reply) => {
      const errors: FieldError[] = [];
      const parsed: Array<z.infer<typeof newAccountSchema>> = [];
      for (const [i, item] of body.accounts.entries()) {
        try {
          const b = parseBody(newAccountSchema, item, `accounts.${i}`);
          errors.push(...(await checkRefs(b, `accounts.${i}`)));
          parsed.push(b);
        } catch (err) {
          if (err instanceof InvalidInput) errors.push(...(err.fields ?? []));
          else throw err;
        }
      }
      if (errors.length) throw new InvalidInput(errors);
      const created = await accounts.importAll(
        parsed.map((b) => toNew(b).input),
        (done) => deps.log.info({ imported: done, total: parsed.length }, 'account import progress'),
      );
      deps.log.info({ imported: created.length }, 'accounts imported');
      return reply.code(201).send({ imported: created.length, ids: created });
    },
  );

  route(
    api,
    {
      method: 'GET',
      path: '/accounts',
      operationId: 'listAccounts',
      summary: 'List accounts, by id, a page at a time',
      tag,
      query: listQuery,
      prefixes: { query: 'query' },
      responses: { 200: json(AccountList) },
    },
    async ({ query: q }) => {
      const list = await accounts.list({ status: q.status, platform: q.platform, limit: q.limit, afterId: q.after });
      return { accounts: list, next_after: list.length === q.limit ? list[list.length - 1]!.id : null };
    },
  );

  route(
    api,
    { method: 'GET', path: '/accounts/:id', operationId: 'getAccount', summary: 'One account', tag, params: IdParams, responses: { 200: json(Account) }, errors: { 404: NO_ACCOUNT } },
    async ({ params }) => {
      const n = parseId(params.id);
      const view = n && (await accounts.get(n));
      return view || notFound(`no account ${params.id}`);
    },
  );

  route(
    api,
    {
      method: 'PATCH',
      path: '/accounts/:id',
      operationId: 'updateAccount',
      summary: 'Change an account',
      description: 'Answers once no replica can serve a token it held before a disable or new credentials.',
      tag,
      params: IdParams,
      body: patchAccountSchema,
      responses: { 200: json(AccountWritten) },
      errors: { 404: NO_ACCOUNT },
    },
    async ({ params, body }) => {
      const n = parseId(params.id);
      const cur = n && (await accounts.get(n));
      if (!cur) return notFound(`no account ${params.id}`);
      const errors = await checkRefs(body);
      if (errors.length) throw new InvalidInput(errors);
      const exp = body.credentials && tokenExpiry(body.credentials);
      const view = await accounts.update(n, {
        name: body.name,
        proxyId: body.proxy_id,
        expiresAt: date(body.expires_at),
        autoPauseOnExpired: body.auto_pause_on_expired,
        schedulable: body.schedulable,
        status: body.status,
        metadata: body.metadata && mergeMetadata(cur.metadata, body.metadata),
        credentials: body.credentials && { value: creds(body.credentials), tokenExpiresAt: exp!.at },
      });
      // Acknowledged only once no replica's token cache can serve what it held before (token-cache.ts).
      if (view && (body.status === 'disabled' || body.credentials)) await tokens.settle(n);
      deps.log.info({ account_id: n, fields: Object.keys(body) }, 'account updated');
      return { ...view, ...(exp?.warning ? { warnings: [exp.warning] } : {}) };
    },
  );

  for (const [action, status] of [
    ['disable', 'disabled'],
    ['enable', 'active'],
  ] as const) {
    route(
      api,
      {
        method: 'POST',
        path: `/accounts/:id/${action}`,
        operationId: `${action}Account`,
        summary: action === 'disable' ? 'Disable an account (it serves no tokens)' : 'Enable an account (its refresh token is no longer remembered as dead)',
        tag,
        params: IdParams,
        responses: { 200: json(Account) },
        errors: { 404: NO_ACCOUNT },
      },
      async ({ params }) => {
        const n = parseId(params.id);
        const view = n && (await accounts.update(n, { status }));
        if (!view) return notFound(`no account ${params.id}`);
        if (status === 'disabled') await tokens.settle(view.id);
        // Re-enabling is the operator's word that the account's refresh token is worth presenting again.
        if (status === 'active') {
          const rt = (await accounts.openSecrets(view.id))?.credentials.refresh_token;
          if (rt && (await accounts.forgetDeadToken(refreshTokenFingerprint(rt)))) deps.log.info({ account_id: n }, 'account enabled: its refresh token is no longer remembered as dead');
        }
        deps.log.info({ account_id: n, status }, `account ${action}d`);
        return view;
      },
    );
  }

  registerTokenRoutes(api, deps);
}
