import { z } from 'zod';
import { ACCOUNT_STATUSES } from './store/accounts.js';
import { id, when } from '../../http/field-schemas.js';

/**
 * The accounts API's schemas (issue 52): what the routes validate with and what they answer, so the
 * OpenAPI document is generated from the very schemas in use. Requests first, then responses (the
 * JSON on the wire: dates as ISO strings, every field the route sends).
 */

const MAX_TOKEN = 16 * 1024;
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
export const credentialsSchema = z.object({ access_token: token, refresh_token: token.optional().nullable(), id_token: token.optional().nullable(), expires_at: when.optional() }).strict();
export const newAccountSchema = z
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
export const patchAccountSchema = z
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
export const testSchema = z.object({ model: z.string().min(1).max(200).optional().meta({ description: "the model to test with; the platform's default when absent" }) }).strict();
export const importSchema = z
  .object({
    accounts: z
      .array(z.unknown())
      .min(1, 'expected at least one account')
      .max(5000, 'expected at most 5000 accounts per import')
      .meta({ description: 'each item as `POST /api/v1/accounts` takes it (validated one by one: errors name `accounts.<i>.<field>`); all or none are created' }),
  })
  .strict();
export const unauthorizedSchema = z
  .object({
    token_version: z.number().int().positive().optional().meta({ description: 'the version of the token that got the 401; an older one than stored answers `stale: true` and cools nothing down' }),
  })
  .strict();

export const listQuery = z
  .object({
    status: z.enum(ACCOUNT_STATUSES).optional(),
    platform: z.string().optional(),
    limit: z.coerce.number().int().min(1).max(1000).default(100),
    after: z.coerce.number().int().min(0).default(0).meta({ description: 'the `next_after` of the previous page' }),
  })
  .strict();

export const IdParams = z.object({ id: z.string().meta({ description: 'the account id' }) });

const time = z.iso.datetime({ offset: true });
const status = z.enum(ACCOUNT_STATUSES);

/** An account as the API shows it: never a credential. */
export const Account = z
  .object({
    id: z.number().int(),
    platform: z.string(),
    name: z.string(),
    status,
    status_reason: z.string().nullable(),
    schedulable: z.boolean(),
    expires_at: time.nullable(),
    auto_pause_on_expired: z.boolean(),
    temp_unschedulable_until: time.nullable(),
    temp_unschedulable_reason: z.string().nullable(),
    proxy_id: z.number().int().nullable(),
    proxy_fallback_origin_id: z.number().int().nullable().meta({ description: 'the proxy the account was moved off when it expired (restored to it later)' }),
    has_refresh_token: z.boolean(),
    token_expires_at: time.nullable(),
    token_version: z.number().int(),
    metadata: z
      .object({ chatgpt_account_id: z.string().optional(), project_id: z.string().optional(), email: z.string().optional() })
      .meta({ description: 'what the provider told beside the tokens' }),
    refresh: z.object({ last_attempt_at: time.nullable(), last_success_at: time.nullable(), consecutive_failures: z.number().int(), last_error: z.string().nullable() }),
    created_at: time,
    updated_at: time,
  })
  .meta({ id: 'Account' });

/** A created or changed account, with a warning when its token expiry is unknown. */
export const AccountWritten = Account.extend({
  warnings: z.array(z.string()).optional().meta({ description: 'present when the token expiry is unknown (not a JWT with exp, and no credentials.expires_at)' }),
}).meta({ id: 'AccountWritten' });

export const AccountList = z
  .object({ accounts: z.array(Account), next_after: z.number().int().nullable().meta({ description: 'pass as `after` for the next page; null on the last' }) })
  .meta({ id: 'AccountList' });
export const AccountImport = z.object({ imported: z.number().int(), ids: z.array(z.number().int()).meta({ description: 'the new ids, in the order given' }) }).meta({ id: 'AccountImport' });

export const RefreshResult = z
  .object({
    result: z.enum(['refreshed', 'superseded', 'lease_held', 'skipped', 'transient', 'permanent', 'config']),
    reason: z.string().nullable(),
    account: Account.nullable(),
  })
  .meta({ id: 'AccountRefreshResult' });

const TestEffect = z.object({
  status_before: status.nullable(),
  status_after: status.nullable(),
  temp_unschedulable_until: time.nullable(),
  temp_unschedulable_reason: z.string().nullable(),
  recovered: z.boolean().meta({ description: 'a pass cleared an error or a rate limit' }),
  note: z.string(),
});

export const AccountTestResult = z
  .object({
    account_id: z.number().int(),
    platform: z.string(),
    model: z.string(),
    ok: z.boolean(),
    status: z.number().int().nullable().meta({ description: "the provider's HTTP status; null when no answer came" }),
    latency_ms: z.number(),
    error_class: z.string().nullable(),
    detail: z.string().nullable(),
    answer: z.string().nullable(),
    reset_at: time.nullable(),
    request: z.object({
      method: z.string(),
      url: z.string(),
      headers: z.record(z.string(), z.string()).meta({ description: 'secret headers shown as `***`' }),
      body: z.unknown(),
      via_proxy: z.boolean(),
    }),
    response: z.object({ status: z.number().int().nullable(), headers: z.record(z.string(), z.string()), body_excerpt: z.string() }).nullable(),
    effect: TestEffect,
  })
  .meta({ id: 'AccountTestResult' });

export const AccessToken = z
  .object({
    account_id: z.number().int(),
    access_token: z.string().meta({ description: 'the secret: never logged; the answer is `Cache-Control: no-store`' }),
    token_expires_at: time.nullable(),
    token_version: z.number().int().meta({ description: 'send it back with `POST /accounts/{id}/unauthorized`' }),
    status,
  })
  .meta({ id: 'AccessToken' });

export const UnauthorizedReport = z
  .object({
    account_id: z.number().int(),
    stale: z.boolean().meta({ description: 'the report was about an older token than the stored one: nothing cooled down, fetch the new token' }),
    cooldown_until: time.nullable(),
    refresh: z.enum(['refreshed', 'superseded', 'lease_held', 'skipped', 'transient', 'permanent', 'config', 'pending']).nullable(),
    token_version: z.number().int(),
  })
  .meta({ id: 'UnauthorizedReport' });
