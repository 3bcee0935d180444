import { describe, expect, it } from 'vitest';
import { createHash } from 'node:crypto';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readCredentialFile, type CredentialSource } from '../src/areas/accounts/credential-files.js';
import { UserError } from '../src/config/errors.js';

// Every secret a fixture holds: no error message may contain any of them.
const SECRETS = {
  codexAccess: 'codex-access-SECRET-1',
  codexRefresh: 'rt_codex-refresh-SECRET-2',
  apiKey: 'sk-proj-api-key-SECRET-3',
  claudeAccess: 'sk-ant-oat01-claude-access-SECRET-4',
  claudeRefresh: 'sk-ant-ort01-claude-refresh-SECRET-5',
  geminiAccess: 'ya29.gemini-access-SECRET-6',
  geminiRefresh: '1//gemini-refresh-SECRET-7',
};

/** An unsigned JWT with these claims (the import only decodes, never verifies). */
function jwt(claims: Record<string, unknown>): string {
  const part = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  return `${part({ alg: 'RS256', typ: 'JWT' })}.${part(claims)}.c2lnbmF0dXJl`;
}
const codexAccess = jwt({ exp: 2_000_000_000, sub: SECRETS.codexAccess });
const codexIdToken = jwt({
  email: 'dev@example.com',
  'https://api.openai.com/auth': { chatgpt_account_id: 'acct-from-id-token', chatgpt_plan_type: 'pro' },
});

const codexFile = (tokens: Record<string, unknown> | null = {}, extra: Record<string, unknown> = {}) => ({
  OPENAI_API_KEY: null,
  tokens: tokens && { id_token: codexIdToken, access_token: codexAccess, refresh_token: SECRETS.codexRefresh, account_id: 'acct-1234', ...tokens },
  last_refresh: '2025-06-01T10:00:00.000Z',
  ...extra,
});
const claudeFile = (oauth: Record<string, unknown> = {}) => ({
  claudeAiOauth: {
    accessToken: SECRETS.claudeAccess,
    refreshToken: SECRETS.claudeRefresh,
    expiresAt: 1_900_000_000_000,
    scopes: ['user:inference', 'user:profile'],
    subscriptionType: 'max',
    ...oauth,
  },
});
const geminiFile = (extra: Record<string, unknown> = {}) => ({
  access_token: SECRETS.geminiAccess,
  refresh_token: SECRETS.geminiRefresh,
  scope: 'https://www.googleapis.com/auth/cloud-platform https://www.googleapis.com/auth/userinfo.email openid',
  token_type: 'Bearer',
  id_token: jwt({ email: 'g@example.com', sub: '1234' }),
  expiry_date: 1_900_000_000_123.5,
  ...extra,
});

const dir = mkdtempSync(join(tmpdir(), 'rj-credfiles-'));
let n = 0;
function file(content: unknown): string {
  const path = join(dir, `f${n++}.json`);
  writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content, null, 2));
  return path;
}
const hash8 = (s: string) => createHash('sha256').update(s).digest('hex').slice(0, 8);

/**
 * Runs `fn` with the effective user `nobody` when the tests run as root (CI does), so a file's mode
 * refuses as it would refuse a gateway's service user; root reads any file. Synchronous: nothing else
 * in this worker runs before the user is switched back.
 */
function asUnprivileged<T>(fn: () => T): T {
  if (process.getuid?.() !== 0) return fn();
  process.seteuid!('nobody');
  try {
    return fn();
  } finally {
    process.seteuid!(0);
  }
}

/** The UserError `readCredentialFile` throws; its message names the file and holds no secret. */
function refusal(from: CredentialSource, path: string): string {
  let err: unknown;
  try {
    readCredentialFile(from, path);
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(UserError);
  const message = (err as UserError).message;
  expect(message).toContain(path);
  expect(message).not.toContain('\n');
  for (const secret of Object.values(SECRETS)) expect(message).not.toContain(secret);
  expect(message).not.toMatch(/eyJ|SECRET/);
  return message;
}

describe('credential files: the formats', () => {
  it('codex auth.json: openai, the three tokens, the account id and email as metadata, named by the email', () => {
    expect(readCredentialFile('codex', file(codexFile()))).toEqual({
      platform: 'openai',
      name: 'dev@example.com',
      credentials: { access_token: codexAccess, refresh_token: SECRETS.codexRefresh, id_token: codexIdToken },
      metadata: { chatgpt_account_id: 'acct-1234', email: 'dev@example.com' },
    });
  });

  it("codex: without tokens.account_id the id token's chatgpt_account_id claim; email from the profile claim; options win", () => {
    const idToken = jwt({ 'https://api.openai.com/profile': { email: 'p@example.com' }, 'https://api.openai.com/auth': { chatgpt_account_id: 'acct-claim' } });
    const body = readCredentialFile('codex', file(codexFile({ account_id: null, id_token: idToken })), { name: 'team-a', proxyId: 7 });
    expect(body).toMatchObject({ name: 'team-a', proxy_id: 7, metadata: { chatgpt_account_id: 'acct-claim', email: 'p@example.com' } });
  });

  it('codex: an id token that is not a JWT gives no metadata from it, and the default name is openai-<hash>', () => {
    const body = readCredentialFile('codex', file(codexFile({ account_id: undefined, id_token: 'opaque' })));
    expect(body.name).toBe(`openai-${hash8(SECRETS.codexRefresh)}`);
    expect(body.metadata).toBeUndefined();
  });

  it('claude .credentials.json: anthropic, expires_at from expiresAt, named anthropic-<hash of the refresh token>', () => {
    expect(readCredentialFile('claude', file(claudeFile()))).toEqual({
      platform: 'anthropic',
      name: `anthropic-${hash8(SECRETS.claudeRefresh)}`,
      credentials: { access_token: SECRETS.claudeAccess, refresh_token: SECRETS.claudeRefresh, expires_at: new Date(1_900_000_000_000).toISOString() },
    });
  });

  it('gemini oauth_creds.json: gemini, expires_at from expiry_date, project id from the option, email from the id token', () => {
    expect(readCredentialFile('gemini', file(geminiFile()), { projectId: 'my-proj-123' })).toEqual({
      platform: 'gemini',
      name: 'g@example.com',
      credentials: { access_token: SECRETS.geminiAccess, refresh_token: SECRETS.geminiRefresh, expires_at: new Date(1_900_000_000_124).toISOString() },
      metadata: { project_id: 'my-proj-123', email: 'g@example.com' },
    });
    const bare = readCredentialFile('gemini', file(geminiFile({ id_token: undefined, expiry_date: undefined })));
    expect(bare).toEqual({ platform: 'gemini', name: `gemini-${hash8(SECRETS.geminiRefresh)}`, credentials: { access_token: SECRETS.geminiAccess, refresh_token: SECRETS.geminiRefresh } });
  });
});

describe('credential files: bad input is one line naming the file, never a token', () => {
  it('a missing file, a directory', () => {
    expect(refusal('codex', join(dir, 'nope.json'))).toMatch(/^cannot read .*nope\.json: no such file$/);
    expect(refusal('claude', dir)).toMatch(/is a directory/);
  });

  it('an unreadable file (read as `nobody` when the tests run as root, who reads any file)', () => {
    chmodSync(dir, 0o755); // `nobody` may look in the folder: the file's own mode is what refuses
    const path = file(claudeFile());
    expect(asUnprivileged(() => readCredentialFile('claude', path)).platform).toBe('anthropic'); // readable while its mode allows
    chmodSync(path, 0o000);
    expect(asUnprivileged(() => refusal('claude', path))).toMatch(/permission denied/);
  });

  it('not JSON (the parser would quote the text around the fault: a secret), and JSON that is not an object', () => {
    expect(refusal('claude', file(`{"claudeAiOauth": {"accessToken": "${SECRETS.claudeAccess}" "refreshToken": 1}}`))).toMatch(/not valid JSON \(expected a Claude Code credentials file/);
    expect(refusal('gemini', file(`${SECRETS.geminiAccess}`))).toMatch(/not valid JSON/);
    expect(refusal('codex', file([SECRETS.codexAccess]))).toMatch(/expected a JSON object/);
  });

  it('the wrong kind of file for --from names the right one', () => {
    expect(refusal('codex', file(claudeFile()))).toMatch(/this looks like a Claude Code credentials file; use --from claude/);
    expect(refusal('gemini', file(claudeFile()))).toMatch(/this looks like a Claude Code credentials file; use --from claude/);
    expect(refusal('claude', file(codexFile()))).toMatch(/this looks like a Codex CLI auth file; use --from codex/);
    expect(refusal('codex', file(geminiFile()))).toMatch(/this looks like a Gemini CLI OAuth credentials file; use --from gemini/);
    expect(refusal('claude', file(geminiFile()))).toMatch(/use --from gemini/);
    expect(refusal('gemini', file(codexFile()))).toMatch(/use --from codex/);
  });

  it('codex: an API key alone is not an OAuth account; no tokens at all; no access token', () => {
    expect(refusal('codex', file({ OPENAI_API_KEY: SECRETS.apiKey }))).toMatch(/OpenAI API key \(OPENAI_API_KEY\).*not an OAuth account/);
    expect(refusal('codex', file(codexFile(null, { OPENAI_API_KEY: SECRETS.apiKey })))).toMatch(/not an OAuth account/);
    expect(refusal('codex', file({ OPENAI_API_KEY: null, tokens: null }))).toMatch(/no ChatGPT login tokens/);
    expect(refusal('codex', file(codexFile({ access_token: '' })))).toMatch(/tokens\.access_token is missing/);
  });

  it('no refresh token: the account could not be refreshed, so it is refused', () => {
    expect(refusal('codex', file(codexFile({ refresh_token: undefined })))).toMatch(/no refresh token \(tokens\.refresh_token\): the account could not be refreshed/);
    expect(refusal('claude', file(claudeFile({ refreshToken: null })))).toMatch(/no refresh token \(claudeAiOauth\.refreshToken\): the account could not be refreshed/);
    expect(refusal('gemini', file(geminiFile({ refresh_token: '' })))).toMatch(/no refresh token \(refresh_token\): the account could not be refreshed/);
  });

  it('claude and gemini: a missing access token, an expiry that is not epoch milliseconds, a gcloud file', () => {
    expect(refusal('claude', file({ claudeAiOauth: null }))).toMatch(/no "claudeAiOauth" object/);
    expect(refusal('claude', file(claudeFile({ accessToken: 42 })))).toMatch(/claudeAiOauth\.accessToken is missing/);
    expect(refusal('claude', file(claudeFile({ expiresAt: 1_900_000_000 })))).toMatch(/claudeAiOauth\.expiresAt is not a time in epoch milliseconds/);
    expect(refusal('gemini', file(geminiFile({ expiry_date: 'tomorrow' })))).toMatch(/expiry_date is not a time in epoch milliseconds/);
    expect(refusal('gemini', file(geminiFile({ access_token: undefined })))).toMatch(/access_token is missing/);
    expect(refusal('gemini', file({ type: 'authorized_user', client_id: 'x', client_secret: 'y', refresh_token: SECRETS.geminiRefresh }))).toMatch(
      /a Google "authorized_user" credentials file .*not the Gemini CLI's own login/,
    );
  });

  it('--project-id with another --from than gemini', () => {
    expect(() => readCredentialFile('codex', file(codexFile()), { projectId: 'p' })).toThrow(/--project-id is for --from gemini/);
  });

  it('an unknown --from', () => {
    expect(() => readCredentialFile('copilot' as CredentialSource, file(geminiFile()))).toThrow(/unknown credential source "copilot": expected one of codex, claude, gemini/);
  });
});
