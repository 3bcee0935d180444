import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { UserError } from '../../config/errors.js';

/**
 * The credential files the official CLIs write, read into the body of `POST /api/v1/accounts`
 * (`relay-jobs accounts import --from …`). Pure apart from reading the one file. No message ever
 * carries a token or any of the file's text: only its path and the names of its fields.
 *
 * - codex: `~/.codex/auth.json` (codex-rs `login/src/auth/storage.rs` `AuthDotJson`, `token_data.rs`):
 *   `{OPENAI_API_KEY, tokens: {id_token, access_token, refresh_token, account_id}, last_refresh}`.
 * - claude: `~/.claude/.credentials.json` (Claude Code):
 *   `{claudeAiOauth: {accessToken, refreshToken, expiresAt (epoch ms), scopes, subscriptionType}}`.
 * - gemini: `~/.gemini/oauth_creds.json` (gemini-cli `code_assist/oauth2.ts` `cacheCredentials`, the
 *   google-auth-library `Credentials`): `{access_token, refresh_token, scope, token_type, id_token, expiry_date (epoch ms)}`.
 */
export const CREDENTIAL_SOURCES = ['codex', 'claude', 'gemini'] as const;
export type CredentialSource = (typeof CREDENTIAL_SOURCES)[number];

export interface ImportOptions {
  /** The account's name (default: the email when the file has one, else `<platform>-<8 hex of sha256(refresh token)>`). */
  name?: string;
  proxyId?: number;
  /** Gemini's Code Assist project (the file has none). */
  projectId?: string;
}

export interface AccountMetadata {
  chatgpt_account_id?: string;
  project_id?: string;
  email?: string;
}

/** The body of `POST /api/v1/accounts`. */
export interface NewAccountBody {
  platform: string;
  name: string;
  credentials: { access_token: string; refresh_token?: string; id_token?: string; expires_at?: string };
  proxy_id?: number;
  metadata?: AccountMetadata;
}

const KINDS: Record<CredentialSource, { platform: string; what: string; file: string; login: string }> = {
  codex: { platform: 'openai', what: 'a Codex CLI auth file', file: '~/.codex/auth.json', login: '`codex login` (Sign in with ChatGPT)' },
  claude: { platform: 'anthropic', what: 'a Claude Code credentials file', file: '~/.claude/.credentials.json', login: '`claude` and /login' },
  gemini: { platform: 'gemini', what: 'a Gemini CLI OAuth credentials file', file: '~/.gemini/oauth_creds.json', login: '`gemini` (Login with Google)' },
};

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const nonEmpty = (v: unknown): v is string => typeof v === 'string' && v.trim() !== '';
const optionalString = (v: unknown): string | undefined => (nonEmpty(v) ? v : undefined);

/** Reads `path` as the credential file `from` writes and returns the account to create. Throws `UserError` naming the file and what is wrong. */
export function readCredentialFile(from: CredentialSource, path: string, opts: ImportOptions = {}): NewAccountBody {
  if (!(from in KINDS)) throw new UserError(`unknown credential source ${JSON.stringify(from)}: expected one of ${CREDENTIAL_SOURCES.join(', ')}`);
  if (opts.projectId !== undefined && from !== 'gemini') throw new UserError(`--project-id is for --from gemini (the Code Assist project), not --from ${from}`);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new UserError(`cannot read ${path}: ${readProblem(err)}`);
  }
  return parseCredentialFile(from, path, text, opts);
}

/** `readCredentialFile` on text already read (`path` only names it in messages). */
export function parseCredentialFile(from: CredentialSource, path: string, text: string, opts: ImportOptions = {}): NewAccountBody {
  const kind = KINDS[from];
  const fail = (problem: string): never => {
    throw new UserError(`${path}: ${problem}`);
  };
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    // The parser's own message quotes the text around the fault, which may be a token: never shown.
    return fail(`not valid JSON (expected ${kind.what}, ${kind.file})`);
  }
  if (!isObject(parsed)) return fail(`expected a JSON object (${kind.what}, ${kind.file})`);
  const seen = detectKind(parsed);
  if (seen && seen !== from) return fail(`this looks like ${KINDS[seen].what}; use --from ${seen} (--from ${from} reads ${kind.what}, ${kind.file})`);

  const noRefresh = (field: string) =>
    fail(`no refresh token (${field}): the account could not be refreshed once its access token expires, so it is not imported; sign in again with ${kind.login} and import the new file`);

  let body: Omit<NewAccountBody, 'name'> & { name?: string };
  let refreshToken: string;
  if (from === 'codex') {
    const tokens = parsed.tokens;
    if (!isObject(tokens)) {
      if (nonEmpty(parsed.OPENAI_API_KEY))
        return fail(
          'holds an OpenAI API key (OPENAI_API_KEY) and no ChatGPT login tokens: an API key is not an OAuth account and is not imported; sign in with `codex login` (Sign in with ChatGPT) first',
        );
      return fail(`no ChatGPT login tokens ("tokens" is missing): not ${kind.what} of a ChatGPT login; sign in with ${kind.login} first`);
    }
    if (!nonEmpty(tokens.access_token)) return fail('tokens.access_token is missing or empty');
    if (!nonEmpty(tokens.refresh_token)) return noRefresh('tokens.refresh_token');
    refreshToken = tokens.refresh_token;
    const idToken = optionalString(tokens.id_token);
    const idClaims = idToken ? jwtClaims(idToken) : null;
    const accessClaims = jwtClaims(tokens.access_token);
    const chatgptAccountId = optionalString(tokens.account_id) ?? openaiAuthClaim(idClaims) ?? openaiAuthClaim(accessClaims);
    body = {
      platform: kind.platform,
      credentials: { access_token: tokens.access_token, refresh_token: refreshToken, ...(idToken ? { id_token: idToken } : {}) },
      metadata: { ...(chatgptAccountId ? { chatgpt_account_id: chatgptAccountId } : {}), ...emailOf(idClaims) },
    };
  } else if (from === 'claude') {
    const oauth = parsed.claudeAiOauth;
    if (!isObject(oauth)) return fail(`no "claudeAiOauth" object: not ${kind.what} (${kind.file}) of a Claude login`);
    if (!nonEmpty(oauth.accessToken)) return fail('claudeAiOauth.accessToken is missing or empty');
    if (!nonEmpty(oauth.refreshToken)) return noRefresh('claudeAiOauth.refreshToken');
    refreshToken = oauth.refreshToken;
    const expiresAt = epochMs(oauth.expiresAt, 'claudeAiOauth.expiresAt', fail);
    body = {
      platform: kind.platform,
      credentials: { access_token: oauth.accessToken, refresh_token: refreshToken, ...(expiresAt ? { expires_at: expiresAt } : {}) },
      metadata: {},
    };
  } else {
    if (nonEmpty(parsed.type))
      return fail(`a Google "${parsed.type}" credentials file (gcloud or a service account), not the Gemini CLI's own login (${kind.file}); sign in with ${kind.login} and import that file`);
    if (!nonEmpty(parsed.access_token)) return fail('access_token is missing or empty');
    if (!nonEmpty(parsed.refresh_token)) return noRefresh('refresh_token');
    refreshToken = parsed.refresh_token;
    const expiresAt = epochMs(parsed.expiry_date, 'expiry_date', fail);
    const idToken = optionalString(parsed.id_token);
    body = {
      platform: kind.platform,
      credentials: { access_token: parsed.access_token, refresh_token: refreshToken, ...(expiresAt ? { expires_at: expiresAt } : {}) },
      metadata: { ...(opts.projectId ? { project_id: opts.projectId } : {}), ...emailOf(idToken ? jwtClaims(idToken) : null) },
    };
  }

  const metadata = body.metadata && Object.keys(body.metadata).length ? body.metadata : undefined;
  const name = opts.name ?? metadata?.email ?? `${body.platform}-${createHash('sha256').update(refreshToken).digest('hex').slice(0, 8)}`;
  return {
    platform: body.platform,
    name,
    credentials: body.credentials,
    ...(opts.proxyId !== undefined ? { proxy_id: opts.proxyId } : {}),
    ...(metadata ? { metadata } : {}),
  };
}

/** Which CLI wrote this object, by the keys only that CLI's file has (undefined: none of them). */
function detectKind(o: Json): CredentialSource | undefined {
  if ('claudeAiOauth' in o) return 'claude';
  if ('tokens' in o || 'OPENAI_API_KEY' in o) return 'codex';
  if ('access_token' in o || 'refresh_token' in o || 'expiry_date' in o) return 'gemini';
  return undefined;
}

function readProblem(err: unknown): string {
  switch ((err as NodeJS.ErrnoException).code) {
    case 'ENOENT':
      return 'no such file';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    case 'EISDIR':
      return 'is a directory, not a file';
    default:
      return (err as NodeJS.ErrnoException).code ?? 'unreadable';
  }
}

/** An epoch-milliseconds expiry as ISO 8601; absent is undefined, anything else not a time is refused. */
function epochMs(v: unknown, field: string, fail: (problem: string) => never): string | undefined {
  if (v === undefined || v === null) return undefined;
  const ms = typeof v === 'number' ? v : typeof v === 'string' && /^\d+(\.\d+)?$/.test(v.trim()) ? Number(v) : NaN;
  // Between 2001 and 2286 in milliseconds: a number in seconds would land in 1970.
  if (!Number.isFinite(ms) || ms < 1e12 || ms > 1e13) return fail(`${field} is not a time in epoch milliseconds`);
  return new Date(Math.round(ms)).toISOString();
}

/** The payload of a JWT, decoded without verifying it (only to read who it names); null when it is not one. */
export function jwtClaims(token: string): Json | null {
  const parts = token.split('.');
  if (parts.length !== 3 || !parts[1]) return null;
  try {
    const payload = JSON.parse(Buffer.from(parts[1], 'base64url').toString('utf8')) as unknown;
    return isObject(payload) ? payload : null;
  } catch {
    return null;
  }
}

function openaiAuthClaim(claims: Json | null): string | undefined {
  const auth = claims?.['https://api.openai.com/auth'];
  return isObject(auth) ? optionalString(auth.chatgpt_account_id) : undefined;
}

/** `email`, or (OpenAI's id tokens) `https://api.openai.com/profile`.email. */
function emailOf(claims: Json | null): { email?: string } {
  if (!claims) return {};
  const profile = claims['https://api.openai.com/profile'];
  const email = optionalString(claims.email) ?? (isObject(profile) ? optionalString(profile.email) : undefined);
  return email ? { email } : {};
}
