import { jwtClaims } from '../jwt.js';
import { classifyRefreshReply } from './refresh-reply.js';
import { sseJson } from './sse.js';
import { badBody, epochMs, failedVerdict, passed } from './verdict.js';
import { jsonObject } from './error-shapes.js';
import { encodeBody, trimBase, type AdapterSettings } from './settings.js';
import type { AccountMetadata, ProviderAdapter, TestAccount, Verdict } from './types.js';

const AUTH_CLAIM = 'https://api.openai.com/auth';
const INSTRUCTIONS = 'You are a coding agent. Answer briefly.';

/** The ChatGPT account a Codex token belongs to: the stored metadata, else the id token's or access token's claim. */
export function chatgptAccountId(idToken: string | null, accessToken?: string): string | undefined {
  for (const t of [idToken, accessToken]) {
    const auth = jwtClaims(t)?.[AUTH_CLAIM] as { chatgpt_account_id?: unknown } | undefined;
    if (typeof auth?.chatgpt_account_id === 'string' && auth.chatgpt_account_id) return auth.chatgpt_account_id;
  }
  return undefined;
}

function emailOf(idToken: string | null): string | undefined {
  const e = jwtClaims(idToken)?.email;
  return typeof e === 'string' && e ? e : undefined;
}

/**
 * OpenAI / Codex (ChatGPT OAuth): refresh at auth.openai.com (form by default; the Codex CLI's
 * JSON is accepted too), rotating refresh tokens, every 401 permanent as the Codex CLI reads it;
 * the account test is a streamed Codex `responses` call with `store:false` and the ChatGPT
 * account id, passed when the stream reaches `response.completed`.
 */
export function openaiAdapter(s: AdapterSettings): ProviderAdapter {
  return {
    ...s.common,
    dialect: 'openai',
    rotates: true,
    defaultModel: 'gpt-5-codex',
    refreshRequest: (refreshToken) => ({
      method: 'POST',
      url: s.common.tokenUrl,
      ...encodeBody(s.common.body, { grant_type: 'refresh_token', refresh_token: refreshToken, client_id: s.common.clientId, ...s.secret, scope: 'openid profile email' }),
    }),
    classifyRefresh: (status, body, headers, nowMs) =>
      classifyRefreshReply(status, body, headers, nowMs, {
        bare401IsPermanent: true,
        metadata: (_json, idToken): AccountMetadata => ({ chatgpt_account_id: chatgptAccountId(idToken), email: emailOf(idToken) }),
      }),
    testRequest: (a: TestAccount, model, prompt, base) => {
      const headers: Record<string, string> = {
        authorization: `Bearer ${a.accessToken}`,
        'content-type': 'application/json',
        accept: 'text/event-stream',
        'openai-beta': 'responses=experimental',
        originator: 'codex_cli_rs',
        'user-agent': 'codex_cli_rs/0.63.0 (relay-jobs account test)',
      };
      const account = a.metadata.chatgpt_account_id ?? chatgptAccountId(a.idToken, a.accessToken);
      if (account) headers['chatgpt-account-id'] = account;
      return {
        method: 'POST',
        url: `${trimBase(base) ?? s.common.apiUrl}/responses`,
        headers,
        body: JSON.stringify({ model, instructions: INSTRUCTIONS, input: [{ role: 'user', content: [{ type: 'input_text', text: prompt }] }], stream: true, store: false }),
      };
    },
    judgeTest: judgeCodex,
  };
}

/** Codex's 429: `x-codex-*-reset-after-seconds` headers, or `resets_at` / `resets_in_seconds` in the body. */
function codexResetMs(headers: Record<string, string>, text: string, nowMs: number): number | null {
  const after = ['x-codex-primary-reset-after-seconds', 'x-codex-secondary-reset-after-seconds'].map((h) => Number(headers[h])).filter((n) => Number.isFinite(n) && n > 0);
  if (after.length) return nowMs + Math.max(...after) * 1000;
  const e = jsonObject(text)?.error as Record<string, unknown> | undefined;
  const at = epochMs(e?.resets_at);
  if (at) return at;
  const inSecs = Number(e?.resets_in_seconds);
  return Number.isFinite(inSecs) && inSecs > 0 ? nowMs + inSecs * 1000 : null;
}

function judgeCodex(status: number, headers: Record<string, string>, text: string, nowMs: number): Verdict {
  if (status < 200 || status >= 300) return failedVerdict(status, headers, text, nowMs, status === 429 ? codexResetMs(headers, text, nowMs) : null);
  const events = sseJson(text);
  const answer = events
    .filter((e) => (e.json.type ?? e.event) === 'response.output_text.delta')
    .map((e) => String(e.json.delta ?? ''))
    .join('');
  const failed = events.find((e) => (e.json.type ?? e.event) === 'response.failed');
  if (failed) return badBody(`response.failed: ${JSON.stringify((failed.json.response as { error?: unknown } | undefined)?.error ?? null).slice(0, 160)}`, answer || null);
  if (events.some((e) => (e.json.type ?? e.event) === 'response.completed')) return passed(answer || null);
  return badBody(events.length ? 'the stream ended before response.completed' : 'the reply is not a Codex event stream', answer || null);
}
