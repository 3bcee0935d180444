import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startCluster, type Cluster, type Replica } from './helpers/cluster.js';
import { FakeOAuthServer } from './fixtures/oauth-server.js';
import { FakeAnthropic } from './fixtures/providers/anthropic.js';
import { FakeGoogle } from './fixtures/providers/gemini.js';
import { ReplyGate } from './helpers/reply-gate.js';
import { importAccounts, startReplica, waitFor } from './helpers/refresh-cluster.js';

/**
 * Soak finding 3 (issue 53, "no refresh token presented twice"), with real processes and the strict
 * provider fakes. Replica lr0 refreshes four accounts; each provider processes its request (OpenAI
 * and Anthropic rotate the refresh token) while a gate in front of it holds the reply, and lr0 is
 * SIGKILLed then: the rotated tokens die with it. Replica lr1 takes the accounts over.
 * - OpenAI and Anthropic (rotating, no reuse grace): the old refresh token is NOT presented again
 *   (the provider saw it exactly once); the account is `expired` with the lost-rotation reason, and
 *   no later attempt presents it either.
 * - A platform that speaks OpenAI with `reuse_grace` 2 min (the fake accepts a just-rotated token
 *   again for as long): presented a second time, within the grace, and that succeeds.
 * - Google (no rotation): presented again, and that succeeds.
 */
const CLIENT = 'lr-client';

describe('a rotating refresh token whose sender was SIGKILLed mid-refresh', () => {
  let cluster: Cluster;
  let sql: pg.Client;
  let openai: FakeOAuthServer;
  let graceful: FakeOAuthServer;
  let anthropic: FakeAnthropic;
  let google: FakeGoogle;
  let gates: Record<'openai' | 'graceful' | 'anthropic' | 'google', ReplyGate>;

  beforeAll(async () => {
    openai = await FakeOAuthServer.start({ clientId: CLIENT });
    graceful = await FakeOAuthServer.start({ clientId: CLIENT, reuseGraceMs: 120_000 });
    anthropic = await FakeAnthropic.start();
    google = await FakeGoogle.start();
    const [o, g, a, gg] = await Promise.all([openai.tokenUrl, graceful.tokenUrl, anthropic.tokenUrl, google.tokenUrl].map((u) => ReplyGate.start(u)));
    gates = { openai: o!, graceful: g!, anthropic: a!, google: gg! };
    cluster = await startCluster({ replicas: 0 });
    sql = await cluster.sql();
  });
  afterAll(async () => {
    await cluster?.stop();
    await Promise.all([...Object.values(gates ?? {}), openai, graceful, anthropic, google].map((f) => f?.close()));
  });

  const env = () => ({
    RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: gates.openai.tokenUrl,
    RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_ID: CLIENT,
    RELAY_JOBS__OAUTH__PROVIDERS__CODEXGRACE__LIKE: 'openai',
    RELAY_JOBS__OAUTH__PROVIDERS__CODEXGRACE__TOKEN_URL: gates.graceful.tokenUrl,
    RELAY_JOBS__OAUTH__PROVIDERS__CODEXGRACE__CLIENT_ID: CLIENT,
    RELAY_JOBS__OAUTH__PROVIDERS__CODEXGRACE__REUSE_GRACE: '2m',
    RELAY_JOBS__OAUTH__PROVIDERS__ANTHROPIC__TOKEN_URL: gates.anthropic.tokenUrl,
    RELAY_JOBS__OAUTH__PROVIDERS__GEMINI__TOKEN_URL: gates.google.tokenUrl,
    // Due at once: the imported tokens live 30 s, refreshed ones (an hour and more) are not due again.
    RELAY_JOBS__AUTH__REFRESH_MARGIN_SECONDS: '60',
    RELAY_JOBS__AUTH__REFRESH_CONCURRENCY: '8',
  });
  const accountRows = async () =>
    (
      await sql.query<{ name: string; id: number; status: string; status_reason: string | null; last_refresh_error: string | null; token_version: number; sent: boolean }>(
        `SELECT name, id::int, status, status_reason, last_refresh_error, token_version::int, refresh_sent_at IS NOT NULL AS sent FROM accounts ORDER BY id`,
      )
    ).rows;

  it('is presented once on OpenAI and Anthropic (account expired, re-authorize), again within a reuse grace and on Google', async () => {
    const creds = {
      openai: openai.issue('lr-openai', 30),
      graceful: graceful.issue('lr-graceful', 30),
      anthropic: anthropic.issue('lr-anthropic', 30),
      google: google.issue('lr-google', { lifetimeSec: 30 }),
    };
    const first: Replica = await startReplica(cluster, 'lr0', env());
    await first.waitStarted();
    await importAccounts(cluster, first, [
      { platform: 'openai', name: 'openai', credentials: creds.openai },
      { platform: 'codexgrace', name: 'graceful', credentials: creds.graceful },
      { platform: 'anthropic', name: 'anthropic', credentials: creds.anthropic },
      { platform: 'gemini', name: 'google', credentials: creds.google },
    ]);
    // Every provider has processed lr0's request (rotated where it rotates), and lr0 recorded each as sent.
    await waitFor(async () => Object.values(gates).every((g) => g.held === 1) && (await accountRows()).every((r) => r.sent), {
      timeoutMs: 60_000,
      what: async () => `lr0's four refreshes to reach the providers: held ${JSON.stringify(Object.values(gates).map((g) => g.held))}, ${JSON.stringify(await accountRows())}`,
    });
    expect(openai.presented.map((p) => p.outcome)).toEqual(['ok']);
    expect(anthropic.liveTokenOf('lr-anthropic')).not.toBe(creds.anthropic.refresh_token);
    await first.kill('SIGKILL');
    for (const g of Object.values(gates)) g.pass();

    const second = await startReplica(cluster, 'lr1', env());
    await second.waitStarted();
    await waitFor(async () => (await accountRows()).every((r) => !r.sent && r.status !== 'refreshing'), {
      timeoutMs: 60_000,
      what: async () => `lr1 to settle the four accounts lr0 left: ${JSON.stringify(await accountRows())}`,
    });
    const rows = new Map((await accountRows()).map((r) => [r.name, r]));

    // Rotating, no grace: presented exactly once, never reused; the account needs re-authorization, and says why.
    expect(openai.presentedCount(creds.openai.refresh_token)).toBe(1);
    expect(openai.reuses).toBe(0);
    expect(anthropic.presentedCount(creds.anthropic.refresh_token)).toBe(1);
    expect(anthropic.refusals).toBe(0);
    for (const [name, platform] of [
      ['openai', 'openai'],
      ['anthropic', 'anthropic'],
    ] as const) {
      const r = rows.get(name)!;
      expect(r, name).toMatchObject({ status: 'expired', last_refresh_error: 'rotation_lost_in_crash', token_version: 1 });
      expect(r.status_reason).toMatch(/^refresh token rotation lost in a crash: a refresh sent at \S+ by lr0:/);
      expect(r.status_reason).toContain(`${platform} refresh tokens are single-use and the provider may already have rotated it, so it is not presented again`);
      expect(r.status_reason).toContain(`oauth.providers.${platform}.reuse_grace is 0`);
      expect(r.status_reason).toContain('Re-authorize this account');
      expect(r.status_reason).not.toContain(creds[name].refresh_token);
    }
    // Within the operator's reuse grace the second presentation is the intended recovery, and it works.
    expect(graceful.presented.map((p) => p.outcome)).toEqual(['ok', 'grace']);
    expect(rows.get('graceful')).toMatchObject({ status: 'active', token_version: 2, last_refresh_error: null });
    // Google does not rotate: presenting again is harmless, and refreshes the account.
    expect(google.presentedCount(creds.google.refresh_token)).toBe(2);
    expect(rows.get('google')).toMatchObject({ status: 'active', token_version: 2 });

    // What lr1 said and counted.
    const said = second.lines.filter((l) => l.includes('a refresh sent earlier was never answered in the store') && l.includes('"sent_by":"lr0:'));
    expect(said.filter((l) => l.includes('not presented again'))).toHaveLength(2);
    expect(said.filter((l) => l.includes('retrying with the same refresh token now'))).toHaveLength(2);
    const metrics = await (await fetch(second.url('/metrics'))).text();
    for (const platform of ['openai', 'anthropic'])
      expect(metrics).toMatch(new RegExp(`relay_jobs_token_refresh_total\\{platform="${platform}",trigger="\\w+",result="permanent",reason="rotation_lost_in_crash"\\} 1\\n`));

    // No later attempt presents the lost token either (remembered as dead); the grace-saved account refreshes on.
    const refresh = async (name: string) => (await cluster.api(second, `/accounts/${rows.get(name)!.id}/refresh`, { body: {} })).json();
    expect(await refresh('openai')).toMatchObject({ result: 'permanent', reason: 'dead_refresh_token', account: { status: 'expired' } });
    expect(await refresh('anthropic')).toMatchObject({ result: 'permanent', reason: 'dead_refresh_token', account: { status: 'expired' } });
    expect(openai.presentedCount(creds.openai.refresh_token)).toBe(1);
    expect(anthropic.presentedCount(creds.anthropic.refresh_token)).toBe(1);
    expect(await refresh('graceful')).toMatchObject({ result: 'refreshed', account: { status: 'active' } });
    expect(graceful.presented.map((p) => p.outcome)).toEqual(['ok', 'grace', 'ok']);
  }, 180_000);
});
