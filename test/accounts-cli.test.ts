import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from './helpers/cli.js';
import { startCluster, type Cluster } from './helpers/cluster.js';
import { FakeAnthropic } from './fixtures/providers/anthropic.js';
import { testReport, type AccountTestResult } from '../src/areas/accounts/cli-accounts.js';

/**
 * `relay-jobs accounts import` and `accounts test` against one running replica: the official CLIs'
 * credential files (codex, Claude Code, gemini-cli) written to a temporary directory, imported
 * through the admin API, and read back with GET /api/v1/accounts/{id}; bad files exit 2 naming
 * what is wrong, before the service is asked anything.
 */
const jwt = (claims: Record<string, unknown>) => `${Buffer.from('{"alg":"RS256"}').toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.c2ln`;
// Far-off expiries: no refresh is due while the test runs (and every token URL is a dead port).
const EXP_S = Math.floor(Date.now() / 1000) + 30 * 86_400;
const DEAD_TOKEN_URL = 'http://127.0.0.1:9/oauth/token';

describe('relay-jobs accounts import / test against a running service', () => {
  let cluster: Cluster;
  let cliEnv: Record<string, string>;
  // Claude Code's OAuth and /v1/messages on loopback: the imported claude account is tested against it.
  let anthropic: FakeAnthropic;
  let claudeTokens: { access_token: string; refresh_token: string; expires_at: string };
  let claudeId: number;
  const dir = mkdtempSync(join(tmpdir(), 'rj-accounts-cli-'));
  const write = (name: string, content: unknown) => {
    const path = join(dir, name);
    writeFileSync(path, JSON.stringify(content, null, 2));
    return path;
  };
  const get = async (id: number) => {
    const res = await cluster.api(0, `/accounts/${id}`);
    expect(res.status).toBe(200);
    return (await res.json()) as Record<string, unknown>;
  };

  const codexAccess = jwt({ exp: EXP_S, 'https://api.openai.com/auth': { chatgpt_account_id: 'acct-e2e' } });
  const files = {
    codex: () =>
      write('auth.json', {
        OPENAI_API_KEY: null,
        tokens: { id_token: jwt({ email: 'codex-e2e@example.com' }), access_token: codexAccess, refresh_token: 'rt_codex-e2e-refresh', account_id: 'acct-e2e' },
        last_refresh: new Date().toISOString(),
      }),
    claude: () =>
      write('.credentials.json', {
        claudeAiOauth: {
          accessToken: claudeTokens.access_token,
          refreshToken: claudeTokens.refresh_token,
          expiresAt: Date.parse(claudeTokens.expires_at),
          scopes: ['user:inference', 'user:profile'],
          subscriptionType: 'max',
        },
      }),
    gemini: () =>
      write('oauth_creds.json', {
        access_token: 'ya29.e2e-access',
        refresh_token: '1//e2e-refresh',
        scope: 'https://www.googleapis.com/auth/cloud-platform',
        token_type: 'Bearer',
        id_token: jwt({ email: 'gemini-e2e@example.com' }),
        expiry_date: EXP_S * 1000,
      }),
  };

  beforeAll(async () => {
    anthropic = await FakeAnthropic.start({ lifetimeSec: 30 * 86_400 });
    claudeTokens = anthropic.issue('e2e-claude');
    const env: Record<string, string> = {
      RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__TOKEN_URL: DEAD_TOKEN_URL,
      RELAY_JOBS__OAUTH__PROVIDERS__GEMINI__TOKEN_URL: DEAD_TOKEN_URL,
      RELAY_JOBS__OAUTH__PROVIDERS__ANTHROPIC__TOKEN_URL: anthropic.tokenUrl,
      RELAY_JOBS__OAUTH__PROVIDERS__ANTHROPIC__API_URL: anthropic.apiUrl,
    };
    cluster = await startCluster({ replicas: ['acc-cli-0'], env });
    // The CLI runs with the service's configuration (its http.port is how it reaches the service).
    cliEnv = { ...cluster.replica(0).env, RELAY_JOBS_INSTANCE_ID: 'acc-cli' };
  });
  afterAll(async () => {
    await cluster?.stop();
    await anthropic?.close();
  });
  const secrets = () => [claudeTokens.access_token, claudeTokens.refresh_token, 'e2e-access', 'e2e-refresh', 'eyJ'];

  it('imports a codex, a claude and a gemini credential file; GET /api/v1/accounts/{id} shows them with their metadata', async () => {
    const [codex, claude, gemini] = await Promise.all([
      runCli(['accounts', 'import', '--from', 'codex', files.codex(), '--json'], cliEnv),
      runCli(['accounts', 'import', '--from', 'claude', files.claude(), '--name', 'claude-max-1'], cliEnv),
      runCli(['accounts', 'import', '--from', 'gemini', files.gemini(), '--project-id', 'e2e-project', '--json'], cliEnv),
    ]);
    for (const r of [codex, claude, gemini]) for (const secret of secrets()) expect(r.stdout + r.stderr).not.toContain(secret);

    // The readable form: one row with the id, platform, name, status and token expiry (claude: no metadata).
    expect(claude.code, claude.stderr).toBe(0);
    expect(claude.stdout).toMatch(/^ID\s+PLATFORM\s+NAME\s+STATUS\s+TOKEN_EXPIRES_AT$/m);
    const row = /^(\d+)\s+anthropic\s+claude-max-1\s+active\s+(\S+)$/m.exec(claude.stdout);
    expect(row, claude.stdout).not.toBeNull();
    expect(row![2]).toBe(claudeTokens.expires_at);
    claudeId = Number(row![1]);
    expect(await get(claudeId)).toMatchObject({ platform: 'anthropic', name: 'claude-max-1', has_refresh_token: true, token_expires_at: claudeTokens.expires_at });

    expect(codex.code, codex.stderr).toBe(0);
    const codexId = (JSON.parse(codex.stdout) as { id: number }).id;
    expect(await get(codexId)).toMatchObject({
      platform: 'openai',
      name: 'codex-e2e@example.com',
      status: 'active',
      has_refresh_token: true,
      token_expires_at: new Date(EXP_S * 1000).toISOString(),
      metadata: { chatgpt_account_id: 'acct-e2e', email: 'codex-e2e@example.com' },
    });

    expect(gemini.code, gemini.stderr).toBe(0);
    const geminiId = (JSON.parse(gemini.stdout) as { id: number }).id;
    expect(await get(geminiId)).toMatchObject({
      platform: 'gemini',
      name: 'gemini-e2e@example.com',
      token_expires_at: new Date(EXP_S * 1000).toISOString(),
      metadata: { project_id: 'e2e-project', email: 'gemini-e2e@example.com' },
    });
  });

  it('a file of the wrong kind, a missing file and an unknown --from exit 2 with one line saying so; nothing is created', async () => {
    const before = ((await (await cluster.api(0, '/accounts')).json()) as { accounts: unknown[] }).accounts.length;
    const missing = join(dir, 'no-such-auth.json');
    const [wrong, gone, unknown, noAccount] = await Promise.all([
      runCli(['accounts', 'import', '--from', 'codex', files.claude()], cliEnv),
      runCli(['accounts', 'import', '--from', 'gemini', missing], cliEnv),
      runCli(['accounts', 'import', '--from', 'copilot', files.codex()], cliEnv),
      runCli(['accounts', 'test', '999999'], cliEnv),
    ]);
    for (const r of [wrong, gone, unknown, noAccount]) {
      expect(r.code, r.stderr).toBe(2);
      expect(r.stderr).toMatch(/^relay-jobs: /);
      expect(r.stderr).not.toMatch(/\n\s+at /);
      for (const secret of secrets()) expect(r.stderr).not.toContain(secret);
    }
    expect(wrong.stderr).toBe(
      `relay-jobs: ${join(dir, '.credentials.json')}: this looks like a Claude Code credentials file; use --from claude (--from codex reads a Codex CLI auth file, ~/.codex/auth.json)\n`,
    );
    expect(gone.stderr).toBe(`relay-jobs: cannot read ${missing}: no such file\n`);
    expect(unknown.stderr).toMatch(/argument 'copilot' is invalid\. Allowed choices are codex, claude, gemini/);
    // The API's 404 message, as given.
    expect(noAccount.stderr).toMatch(/^relay-jobs: cannot test account 999999 \(HTTP 404\): no account 999999$/m);
    expect(((await (await cluster.api(0, '/accounts')).json()) as { accounts: unknown[] }).accounts).toHaveLength(before);
  });

  it('accounts test: PASS exits 0; a rate-limited answer is a FAIL, exit 1, showing what was sent, the answer and the effect', async () => {
    expect(claudeId, 'the claude account of the import test').toBeGreaterThan(0);
    const pass = await runCli(['accounts', 'test', String(claudeId)], cliEnv);
    expect(pass.code, pass.stdout + pass.stderr).toBe(0);
    expect(pass.stdout).toMatch(new RegExp(`^PASS  anthropic account ${claudeId}.*: HTTP 200, latency \\d+ ms$`, 'm'));
    expect(pass.stdout).toMatch(/^sent:\n {2}POST http:\/\/127\.0\.0\.1:\d+\/v1\/messages/m);
    expect(pass.stdout).toMatch(/^answer:\n {2}HTTP 200$/m);
    expect(pass.stdout).toMatch(/^effect on the account:\n {2}status: active → active/m);

    anthropic.setBehaviour(claudeTokens.access_token, { mode: 'rate_limited', resetAt: Math.floor(Date.now() / 1000) + 600 });
    const fail = await runCli(['accounts', 'test', String(claudeId)], cliEnv);
    const json = await runCli(['accounts', 'test', String(claudeId), '--json'], cliEnv);
    expect(fail.code, fail.stdout + fail.stderr).toBe(1);
    expect(fail.stdout).toMatch(new RegExp(`^FAIL  anthropic account ${claudeId}.*: HTTP 429`, 'm'));
    expect(fail.stdout).toMatch(/^answer:\n {2}HTTP 429\n/m);
    expect(fail.stdout).toMatch(/^ {2}temporarily unschedulable until \S+/m);
    expect(json.code).toBe(1);
    expect(JSON.parse(json.stdout)).toMatchObject({ account_id: claudeId, platform: 'anthropic', ok: false, status: 429, response: { status: 429 } });
    for (const r of [pass, fail, json]) for (const secret of secrets()) expect(r.stdout + r.stderr).not.toContain(secret);
    expect((await get(claudeId)).temp_unschedulable_until).not.toBeNull();
  });
});

describe('accounts test: the report', () => {
  const result: AccountTestResult = {
    account_id: 12,
    platform: 'anthropic',
    ok: false,
    status: 429,
    latency_ms: 231,
    error_class: 'rate_limited',
    detail: 'upstream rate limit',
    request: {
      method: 'POST',
      url: 'https://api.anthropic.com/v1/messages',
      headers: { authorization: 'Bearer sk-ant-oat01-abc…[redacted]', 'anthropic-version': '2023-06-01' },
      body: { model: 'claude-sonnet-4', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] },
    },
    response: { status: 429, headers: { 'retry-after': '60' }, body_excerpt: '{"type":"error","error":{"type":"rate_limit_error"}}' },
    effect: { status_before: 'active', status_after: 'active', temp_unschedulable_until: '2030-01-01T00:01:00.000Z', temp_unschedulable_reason: 'rate limited (429)', note: null },
  };

  it('verdict, what was sent (as the server redacted it), the answer and the effect on the account', () => {
    expect(testReport(result)).toBe(
      [
        'FAIL  anthropic account 12: HTTP 429, latency 231 ms',
        '  rate_limited: upstream rate limit',
        'sent:',
        '  POST https://api.anthropic.com/v1/messages',
        '  authorization: Bearer sk-ant-oat01-abc…[redacted]',
        '  anthropic-version: 2023-06-01',
        '  body: {"model":"claude-sonnet-4","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}',
        'answer:',
        '  HTTP 429',
        '  {"type":"error","error":{"type":"rate_limit_error"}}',
        'effect on the account:',
        '  status: active → active (unchanged)',
        '  temporarily unschedulable until 2030-01-01T00:01:00.000Z: rate limited (429)',
        '',
      ].join('\n'),
    );
  });

  it('a pass, and a failure before any answer (nulls everywhere)', () => {
    expect(testReport({ ...result, ok: true, status: 200, error_class: null, detail: null }).split('\n')[0]).toBe('PASS  anthropic account 12: HTTP 200, latency 231 ms');
    const none = testReport({
      ...result,
      status: null,
      latency_ms: null,
      error_class: 'network',
      detail: 'connect ECONNREFUSED',
      response: null,
      effect: { ...result.effect!, status_after: 'error', temp_unschedulable_until: null, note: 'marked error' },
    });
    expect(none).toContain('FAIL  anthropic account 12: no HTTP answer, latency -\n  network: connect ECONNREFUSED\n');
    expect(none).toContain('answer:\n  none\n');
    expect(none).toContain('effect on the account:\n  status: active → error\n  marked error\n');
  });
});
