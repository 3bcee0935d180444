/**
 * The soak's upstreams and its day-one data: the strict provider fakes (OpenAI/Codex, Anthropic,
 * Google; they record every refresh token presented), an OpenAI-compatible chat upstream and the
 * Batch API fake, then the accounts (token lifetimes spread so each refreshes inside the run),
 * monitors at 60 s on the three providers, account-test plans and billing users, all through the
 * replicas' HTTP API as an operator would.
 */
import pg from 'pg';
import { FakeOAuthServer } from '../test/fixtures/oauth-server.js';
import { FakeAnthropic } from '../test/fixtures/providers/anthropic.js';
import { FakeGoogle } from '../test/fixtures/providers/gemini.js';
import { ChatUpstream } from '../test/fixtures/chat-upstream.js';
import { FakeImageProvider } from '../test/fixtures/image-provider.js';
import { prng, type Load } from './soak-schedule.js';

export const ADMIN = 'soak-admin-token-0123456789abcdef';
export const OPENAI_CLIENT_ID = 'app_EMoamEEZ73f0CkXaXp7hrann';
export const PLATFORMS = ['openai', 'anthropic', 'gemini'] as const;
export const IMAGE_PRICE = 3;

export interface Fakes {
  openai: FakeOAuthServer;
  anthropic: FakeAnthropic;
  google: FakeGoogle;
  chat: ChatUpstream;
  images: FakeImageProvider;
}

export async function startFakes(load: Load, runS: number, seed: number): Promise<Fakes> {
  // A refreshed token outlives the run: each account's one due refresh is the one the spread puts in it.
  const lifetimeSec = load.refreshMarginS + runS + 600;
  const [openai, anthropic, google, chat, images] = await Promise.all([
    FakeOAuthServer.start({ clientId: OPENAI_CLIENT_ID, lifetimeSec, rotate: true, sendExpiresIn: true }),
    FakeAnthropic.start({ lifetimeSec }),
    FakeGoogle.start({ lifetimeSec }),
    ChatUpstream.start(),
    FakeImageProvider.start({ latencyMs: 5, pollsToFinish: 2 }, seed),
  ]);
  for (const f of [openai, anthropic, google]) f.setDefaultBehaviour({ mode: 'ok', latencyMs: 50 });
  chat.setDefault({ mode: 'ok', latencyMs: [20, 200] });
  return { openai, anthropic, google, chat, images };
}

export async function closeFakes(f: Fakes | null): Promise<void> {
  if (!f) return;
  await Promise.allSettled([f.openai.close(), f.anthropic.close(), f.google.close(), f.chat.close(), f.images.stop()]);
}

/** The replicas' settings for the fakes (provider endpoints, image API and prices). */
export function fakeEnv(f: Fakes): Record<string, string> {
  return {
    RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: f.openai.tokenUrl,
    RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__API_URL: f.openai.apiUrl,
    RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: OPENAI_CLIENT_ID,
    RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__MAX_PER_SECOND: '1000',
    RELAY_JOBS__OAUTH__PROVIDERS__ANTHROPIC__TOKEN_URL: f.anthropic.tokenUrl,
    RELAY_JOBS__OAUTH__PROVIDERS__ANTHROPIC__API_URL: f.anthropic.apiUrl,
    RELAY_JOBS__OAUTH__PROVIDERS__ANTHROPIC__MAX_PER_SECOND: '1000',
    RELAY_JOBS__OAUTH__PROVIDERS__GEMINI__TOKEN_URL: f.google.tokenUrl,
    RELAY_JOBS__OAUTH__PROVIDERS__GEMINI__API_URL: f.google.apiUrl,
    RELAY_JOBS__OAUTH__PROVIDERS__GEMINI__GENERATIVE_URL: f.google.generativeUrl,
    RELAY_JOBS__OAUTH__PROVIDERS__GEMINI__MAX_PER_SECOND: '1000',
    RELAY_JOBS__IMAGE__PROVIDER__BASE_URL: f.images.url,
    RELAY_JOBS__IMAGE__PROVIDER__API_KEY: 'sk-soak-image-key',
    RELAY_JOBS__IMAGE__PRICES__IMG_SOAK: String(IMAGE_PRICE),
  };
}

export type Api = (path: string, body?: unknown, method?: string) => Promise<{ status: number; body: Record<string, unknown> | null; text: string }>;

/** Runs `fn` over `items` with `width` in flight. */
export async function inParallel<T>(items: T[], width: number, fn: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i]!, i);
      }
    }),
  );
}

async function must(api: Api, path: string, body: unknown): Promise<Record<string, unknown>> {
  for (let attempt = 1; ; attempt++) {
    const r = await api(path, body).catch((err: Error) => ({ status: 0, body: null, text: err.message }));
    if (r.status === 201 || r.status === 200) return r.body!;
    if (attempt >= 5 || (r.status >= 400 && r.status < 500)) throw new Error(`soak setup: POST ${path} answered ${r.status}: ${r.text.slice(0, 300)}`);
    await new Promise((res) => setTimeout(res, 500 * attempt));
  }
}

export interface Seeded {
  accounts: Array<{ id: number; platform: (typeof PLATFORMS)[number]; firstRefreshDueMs: number }>;
  monitors: number;
  plans: number;
  /** billing user id → starting balance (minor units). */
  users: Map<number, number>;
}

/** Accounts, monitors, plans and billing users. */
export async function seed(api: Api, sql: pg.Pool, f: Fakes, load: Load, seedNo: number): Promise<Seeded> {
  const rand = prng(seedNo ^ 0x5eed);
  const accounts: Seeded['accounts'] = [];
  const specs = Array.from({ length: load.accounts }, (_, i) => ({ i, platform: PLATFORMS[i % 3]!, firstDue: 5 + rand() * load.refreshSpreadS }));
  // Through the bulk import (how a big relay loads its pool: 500 accounts a request, all or none),
  // not one POST per account: one at a time ran at about 7 accounts/s across 9 replicas on a
  // loaded machine, so 100,000 accounts would have taken hours to seed.
  const chunks = Array.from({ length: Math.ceil(specs.length / 500) }, (_, c) => specs.slice(c * 500, c * 500 + 500));
  await inParallel(chunks, 2, async (chunk) => {
    const body = chunk.map(({ i, platform, firstDue }) => {
      // Due `firstDue` after its creation: inside the run however long the seeding takes.
      const lifetime = Math.round(load.refreshMarginS + firstDue);
      const subject = `soak-${platform}-${i}`;
      const credentials =
        platform === 'openai' ? f.openai.issue(subject, lifetime) : platform === 'anthropic' ? f.anthropic.issue(subject, lifetime) : f.google.issue(subject, { lifetimeSec: lifetime });
      return { platform, name: subject, credentials };
    });
    const issuedAt = Date.now();
    const r = await must(api, '/accounts/import', { accounts: body });
    const ids = r.ids as Array<number | string>;
    if (ids.length !== chunk.length) throw new Error(`soak setup: import of ${chunk.length} accounts answered ${ids.length} ids`);
    chunk.forEach(({ platform, firstDue }, k) => accounts.push({ id: Number(ids[k]), platform, firstRefreshDueMs: issuedAt + firstDue * 1000 }));
  });
  const providers = [
    { provider: 'openai', base_url: f.chat.url, model: 'gpt-soak' },
    { provider: 'anthropic', base_url: f.anthropic.url, model: 'claude-soak' },
    { provider: 'gemini', base_url: f.google.generativeUrl, model: 'gemini-soak' },
  ];
  await inParallel(
    Array.from({ length: load.monitors }, (_, m) => m),
    12,
    async (m) => {
      const p = providers[m % 3]!;
      const key = `soak-monitor-key-${m}`;
      if (p.provider === 'openai') f.chat.addApiKey(key);
      if (p.provider === 'anthropic') f.anthropic.addApiKey(key);
      if (p.provider === 'gemini') f.google.addApiKey(key);
      await must(api, '/monitors', { name: `soak-m${m}`, ...p, api_key: key, interval: `${load.monitorIntervalS}s`, timeout: '10s', jitter: `${load.monitorIntervalS}s` });
    },
  );
  const planAccounts = accounts.slice(0, load.accountTestPlans);
  await inParallel(planAccounts, 12, async (a, k) => {
    await must(api, '/account-tests', {
      account_id: a.id,
      cron: `${k % 60} * * * * *`,
      model: a.platform === 'openai' ? 'gpt-5' : a.platform === 'anthropic' ? 'claude-sonnet-4' : 'gemini-2.5-pro',
      max_results: 100,
    });
  });
  const users = new Map<number, number>();
  for (let u = 0; u < Math.max(3, load.imageBatches); u++) {
    const balance = 50 + ((u * 37) % 200);
    const { rows } = await sql.query(`INSERT INTO billing_users (email, balance) VALUES ($1, $2) RETURNING id`, [`soak${u}@soak.test`, balance]);
    users.set(Number(rows[0].id), balance);
  }
  return { accounts, monitors: load.monitors, plans: planAccounts.length, users };
}
