/**
 * A gateway that calls a running relay-jobs service over HTTP with the typed client
 * (`relay-jobs/client`, generated from the service's OpenAPI document): one round of the hot path
 * as docs/gateway-integration.md describes it. It registers an account (a gateway's admin side
 * would), gets its access token, records usage in a batch keyed by request ids (retried the way a
 * gateway retries: the same batch again, nothing counted twice), reads the routing snapshot,
 * increments a quota, and shows a refused batch (400: never retried).
 *
 *   RELAY_JOBS_URL=http://127.0.0.1:8080 RELAY_JOBS_ADMIN_TOKEN=... \
 *     npx tsx --tsconfig examples/tsconfig.json examples/gateway-client.ts
 *
 * In a project that depends on relay-jobs, the same code runs as it is.
 */
import { randomUUID } from 'node:crypto';
import { createClient, type ApiError } from 'relay-jobs/client';

const token = process.env.RELAY_JOBS_ADMIN_TOKEN;
if (!token) throw new Error('set RELAY_JOBS_ADMIN_TOKEN (embedded mode writes one to <data dir>/admin-token)');
const api = createClient({ baseUrl: process.env.RELAY_JOBS_URL ?? 'http://127.0.0.1:8080', token, timeoutMs: 12_000 });

/** Statuses worth a retry: the request may succeed as it is. Any other 4xx is the request's own fault. */
const RETRYABLE = new Set([429, 502, 503, 504]);

/**
 * Repeats `call` while it gets no answer or a retryable status, waiting `Retry-After` or a jittered
 * backoff (100 ms doubling to 2 s), at most `attempts` times. Only for calls safe to repeat.
 */
async function withRetry<T extends { response?: Response; error?: unknown }>(call: () => Promise<T>, attempts = 5): Promise<T> {
  for (let i = 1; ; i++) {
    let result: T | undefined;
    try {
      result = await call();
      if (!result.error || !RETRYABLE.has(result.response?.status ?? 0) || i === attempts) return result;
    } catch (err) {
      if (i === attempts) throw err; // no answer (refused, reset, timed out)
    }
    const after = Number(result?.response?.headers.get('retry-after'));
    await new Promise((r) => setTimeout(r, after > 0 ? after * 1000 : Math.random() * Math.min(2000, 100 * 2 ** i)));
  }
}

function fail(what: string, error: ApiError): never {
  // `error` is the API's error model; a proxy in between may answer something else: show it whole.
  throw new Error(`${what}: ${error.error ? `${error.error.code}: ${error.error.message}` : JSON.stringify(error)}`);
}

const run = randomUUID().slice(0, 8);
const user = `user-${run}`;
const accessToken = `example-access-${run}`;

// The admin side: an upstream account the gateway pools (a JWT's exp, or expires_at, dates the token).
const created = await api.POST('/api/v1/accounts', {
  body: {
    platform: 'openai',
    name: `example-${run}`,
    credentials: { access_token: accessToken, refresh_token: `example-refresh-${run}`, expires_at: new Date(Date.now() + 6 * 3_600_000).toISOString() },
  },
});
if (created.error) fail('create the account', created.error);
const accountId = created.data.id;

// Hot path, per upstream request: the account's access token (cache it until its margin; never log it).
const tok = await withRetry(() => api.POST('/api/v1/accounts/{id}/token', { params: { path: { id: String(accountId) } } }));
if (tok.error) fail('get the access token', tok.error);

// After the upstream answered: usage, keyed by request ids. Sent twice, as a retry after a lost answer would be.
const events = [0, 1].map((i) => ({ request_id: `${run}-${i}`, user_id: user, account_id: accountId, platform: 'openai', model: 'gpt-4o', input_tokens: 120, output_tokens: 30, cost: '0.0012' }));
const usage = [];
for (let i = 0; i < 2; i++) {
  const sent = await withRetry(() => api.POST('/api/v1/usage', { body: { events } }));
  if (sent.error) fail('record usage', sent.error);
  usage.push({ stored: sent.data.stored, duplicates: sent.data.duplicates });
}

// A batch the service refuses is never retried: its 400 names each bad field.
const bad = await withRetry(() => api.POST('/api/v1/usage', { body: { events: [{ ...events[0], request_id: `${run}-bad`, input_tokens: -1 }] } }));

// The routing cache: the platform's schedulable accounts in routing order, with the bucket's epoch.
let inSnapshot = false;
for (let i = 0; i < 100 && !inSnapshot; i++) {
  const snap = await withRetry(() => api.GET('/api/v1/scheduler/accounts', { params: { query: { platform: 'openai' } } }));
  if (snap.error) fail('read the scheduler snapshot', snap.error);
  inSnapshot = snap.data.accounts.some((a) => a.id === accountId);
  if (!inSnapshot) await new Promise((r) => setTimeout(r, 200));
}

// Quota: no idempotency key, so a retry may count twice; the service answers 503 (Redis down) or nothing at all.
const quota = await withRetry(() => api.POST('/api/v1/quota/usage', { body: { increments: [{ user_id: user, platform: 'openai', amount: 150 }] } }));
if (quota.error) fail('increment the quota', quota.error);

process.stdout.write(
  JSON.stringify({
    token_matches: tok.data.access_token === accessToken,
    usage,
    in_snapshot: inSnapshot,
    quota_used: quota.data.results[0]?.used,
    bad_batch: { status: bad.response.status, code: bad.error?.error.code },
  }) + '\n',
);
