import { InvalidInput, notFound } from '../../errors/app-error.js';
import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../jobs/area.js';
import type { AccountsServices } from './wiring.js';
import { ACCOUNT_STATUSES, type AccountMetadata, type Credentials } from './store/accounts.js';
import { jwtExpiry } from './jwt.js';
import { redactedRequest } from './account-tester.js';
import { refreshTokenFingerprint } from './lost-rotation.js';
import { parseBody, parseId, type FieldError } from '../../http/validation.js';
import { id, when } from '../../http/field-schemas.js';

const MAX_TOKEN = 16 * 1024;
/**
 * An on-demand account test waits at most this long for the provider (a stream that completes takes
 * seconds): well inside http.socket_timeout and the CLI's 30 s, so the caller always gets the answer.
 */
const TEST_TIMEOUT_MS = 25_000;
const token = z.string().min(1, 'expected a non-empty string').max(MAX_TOKEN, `expected at most ${MAX_TOKEN} characters`);

// Printable ASCII only: chatgpt_account_id is sent as a header, and a CR/LF there would be refused by the client as a connect error.
const metaValue = z
  .string()
  .min(1)
  .max(200)
  .regex(/^[\x20-\x7e]+$/, 'expected printable ASCII (no line breaks or control characters)');
/** What the provider told beside the tokens; a Codex test needs chatgpt_account_id, a Gemini test without project_id uses the Generative Language API. */
const metadataSchema = z.object({ chatgpt_account_id: metaValue.optional(), project_id: metaValue.optional(), email: metaValue.optional() }).strict();
/** A patch merges into the stored metadata; a key set to null is removed. */
const metadataPatch = z.object({ chatgpt_account_id: metaValue.nullable().optional(), project_id: metaValue.nullable().optional(), email: metaValue.nullable().optional() }).strict();
const credentialsSchema = z.object({ access_token: token, refresh_token: token.optional().nullable(), id_token: token.optional().nullable(), expires_at: when.optional() }).strict();
const newAccountSchema = z
  .object({
    platform: z.string().min(1).max(32),
    name: z.string().min(1).max(200),
    credentials: credentialsSchema,
    proxy_id: id.optional().nullable(),
    expires_at: when.optional().nullable(),
    auto_pause_on_expired: z.boolean().optional(),
    schedulable: z.boolean().optional(),
    metadata: metadataSchema.optional(),
  })
  .strict();
const patchAccountSchema = z
  .object({
    name: z.string().min(1).max(200).optional(),
    credentials: credentialsSchema.optional(),
    proxy_id: id.optional().nullable(),
    expires_at: when.optional().nullable(),
    auto_pause_on_expired: z.boolean().optional(),
    schedulable: z.boolean().optional(),
    status: z.enum(['active', 'disabled'], { message: 'only active or disabled can be set by hand; the other statuses come from refresh results' }).optional(),
    metadata: metadataPatch.optional(),
  })
  .strict();
const testSchema = z.object({ model: z.string().min(1).max(200).optional() }).strict();
const importSchema = z.object({ accounts: z.array(z.unknown()).min(1, 'expected at least one account').max(5000, 'expected at most 5000 accounts per import') }).strict();
const unauthorizedSchema = z.object({ token_version: z.number().int().positive().optional() }).strict();

const listQuery = z
  .object({
    status: z.enum(ACCOUNT_STATUSES).optional(),
    platform: z.string().optional(),
    limit: z.coerce.number().int().min(1).max(1000).default(100),
    after: z.coerce.number().int().min(0).default(0),
  })
  .strict();

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
  const { accounts, proxies, tokenRefresh, tokens, providers, tester } = deps.services;

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

  api.post('/accounts', async (req, reply) => {
    const body = parseBody(newAccountSchema, req.body);
    const errors = await checkRefs(body);
    if (errors.length) throw new InvalidInput(errors);
    const { input, warning } = toNew(body);
    const view = await accounts.create(input);
    deps.log.info({ account_id: view.id, platform: view.platform }, 'account created');
    return reply.code(201).send({ ...view, ...(warning ? { warnings: [warning] } : {}) });
  });

  api.post('/accounts/import', { bodyLimit: 16 * 1024 * 1024 }, async (req, reply) => {
    const { accounts: items } = parseBody(importSchema, req.body);
    const errors: FieldError[] = [];
    const parsed: Array<z.infer<typeof newAccountSchema>> = [];
    for (const [i, item] of items.entries()) {
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
  });

  api.get('/accounts', async (req) => {
    const q = parseBody(listQuery, req.query, 'query');
    const list = await accounts.list({ status: q.status, platform: q.platform, limit: q.limit, afterId: q.after });
    return { accounts: list, next_after: list.length === q.limit ? list[list.length - 1]!.id : null };
  });

  api.get<{ Params: { id: string } }>('/accounts/:id', async (req) => {
    const n = parseId(req.params.id);
    const view = n && (await accounts.get(n));
    return view || notFound(`no account ${req.params.id}`);
  });

  api.patch<{ Params: { id: string } }>('/accounts/:id', async (req) => {
    const n = parseId(req.params.id);
    const body = parseBody(patchAccountSchema, req.body);
    const cur = n && (await accounts.get(n));
    if (!cur) return notFound(`no account ${req.params.id}`);
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
    deps.log.info({ account_id: n, fields: Object.keys(body) }, 'account updated');
    return { ...view, ...(exp?.warning ? { warnings: [exp.warning] } : {}) };
  });

  for (const [action, status] of [
    ['disable', 'disabled'],
    ['enable', 'active'],
  ] as const) {
    api.post<{ Params: { id: string } }>(`/accounts/:id/${action}`, async (req) => {
      const n = parseId(req.params.id);
      const view = n && (await accounts.update(n, { status }));
      if (!view) return notFound(`no account ${req.params.id}`);
      // Re-enabling is the operator's word that the account's refresh token is worth presenting again.
      if (status === 'active') {
        const rt = (await accounts.openSecrets(view.id))?.credentials.refresh_token;
        if (rt && (await accounts.forgetDeadToken(refreshTokenFingerprint(rt)))) deps.log.info({ account_id: n }, 'account enabled: its refresh token is no longer remembered as dead');
      }
      deps.log.info({ account_id: n, status }, `account ${action}d`);
      return view;
    });
  }

  api.post<{ Params: { id: string } }>('/accounts/:id/refresh', async (req) => {
    const n = parseId(req.params.id);
    const before = n && (await accounts.get(n));
    if (!before) return notFound(`no account ${req.params.id}`);
    const outcome = await tokenRefresh.refreshNow(before.id, 'admin', before.token_version);
    const { result, ...rest } = outcome;
    const detail = 'reason' in rest ? rest.reason : undefined;
    return { result, reason: detail ?? null, account: await accounts.get(before.id) };
  });

  /**
   * One account test now, as the scheduled tests send it: what was sent (secrets masked), what
   * came back, and what it did to the account (an operator's explicit test recovers an account
   * the way auto_recover does).
   */
  api.post<{ Params: { id: string } }>('/accounts/:id/test', async (req) => {
    const n = parseId(req.params.id);
    const body = parseBody(testSchema, req.body ?? {});
    if (!n || !(await accounts.get(n))) return notFound(`no account ${req.params.id}`);
    const run = await tester.run(n, { model: body.model, timeoutMs: TEST_TIMEOUT_MS, storedTokenForError: true });
    const r = run.result;
    const effect = await tester.applyEffect(
      n,
      { ok: r.ok, errorClass: r.errorClass, status: r.status, detail: r.detail, resetAtMs: r.resetAtMs },
      { autoRecover: true, actor: 'admin_test', context: { model: run.model } },
    );
    deps.log.info({ account_id: n, platform: run.platform, ok: r.ok, status: r.status, error_class: r.errorClass }, 'account tested');
    const secrets = await accounts.openSecrets(n);
    return {
      account_id: n,
      platform: run.platform,
      model: run.model,
      ok: r.ok,
      status: r.status,
      latency_ms: r.latencyMs,
      error_class: r.errorClass,
      detail: r.detail,
      answer: r.answer,
      reset_at: r.resetAtMs === null ? null : new Date(r.resetAtMs).toISOString(),
      request: redactedRequest(run.request, secrets?.proxyUrl ?? null),
      response: r.reply && { status: r.status, headers: r.reply.headers, body_excerpt: r.reply.bodyExcerpt },
      effect,
    };
  });

  api.post<{ Params: { id: string } }>('/accounts/:id/token', async (req, reply) => {
    const n = parseId(req.params.id);
    if (!n) return notFound(`no account ${req.params.id}`);
    return reply.header('cache-control', 'no-store').send(await tokens.getAccessToken(n));
  });

  api.post<{ Params: { id: string } }>('/accounts/:id/unauthorized', async (req) => {
    const n = parseId(req.params.id);
    const body = parseBody(unauthorizedSchema, req.body);
    if (!n) return notFound(`no account ${req.params.id}`);
    return tokens.reportUnauthorized(n, body.token_version);
  });
}
