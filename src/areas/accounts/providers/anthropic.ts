import { classifyRefreshReply } from './refresh-reply.js';
import { sseJson } from './sse.js';
import { badBody, epochMs, failedVerdict, passed } from './verdict.js';
import { encodeBody, trimBase, type AdapterSettings } from './settings.js';
import type { AccountMetadata, ProviderAdapter, Verdict } from './types.js';

/** The first system block a Claude Code OAuth token must carry, exactly; anything else is refused with 400. */
export const CLAUDE_CODE_SYSTEM = "You are Claude Code, Anthropic's official CLI for Claude.";
const BETA = 'claude-code-20250219,oauth-2025-04-20,interleaved-thinking-2025-05-14';

/**
 * Anthropic / Claude Code: refresh at platform.claude.com as JSON (all three public gateways; the
 * old console.anthropic.com host answers 404 since mid-2026, read as a configuration fault),
 * rotating refresh tokens; the account test is a streamed `/v1/messages` call with the OAuth
 * beta header and the Claude Code system prompt, passed at `message_stop`.
 */
export function anthropicAdapter(s: AdapterSettings): ProviderAdapter {
  return {
    ...s.common,
    dialect: 'anthropic',
    rotates: true,
    defaultModel: 'claude-sonnet-4-5',
    refreshRequest: (refreshToken) => {
      const enc = encodeBody(s.common.body, { grant_type: 'refresh_token', refresh_token: refreshToken, client_id: s.common.clientId, ...s.secret });
      return { method: 'POST', url: s.common.tokenUrl, headers: { ...enc.headers, accept: 'application/json, text/plain, */*', 'user-agent': 'axios/1.8.4' }, body: enc.body };
    },
    classifyRefresh: (status, body, headers, nowMs) =>
      classifyRefreshReply(status, body, headers, nowMs, {
        bare401IsPermanent: false,
        metadata: (json): AccountMetadata => {
          const email = (json.account as { email_address?: unknown } | undefined)?.email_address;
          return typeof email === 'string' && email ? { email } : {};
        },
      }),
    testRequest: (a, model, prompt, base) => ({
      method: 'POST',
      url: `${trimBase(base) ?? s.common.apiUrl}/v1/messages?beta=true`,
      headers: {
        authorization: `Bearer ${a.accessToken}`,
        'content-type': 'application/json',
        accept: 'text/event-stream',
        'anthropic-version': '2023-06-01',
        'anthropic-beta': BETA,
        'user-agent': 'claude-cli/2.0.14 (external, cli)',
        'x-app': 'cli',
      },
      body: JSON.stringify({ model, max_tokens: 32, system: [{ type: 'text', text: CLAUDE_CODE_SYSTEM }], messages: [{ role: 'user', content: prompt }], stream: true }),
    }),
    judgeTest: judgeMessagesStream,
  };
}

/** A streamed Messages reply: passed at `message_stop`; a mid-stream `error` event fails it. 429's reset from `anthropic-ratelimit-unified-reset`. */
export function judgeMessagesStream(status: number, headers: Record<string, string>, text: string, nowMs: number): Verdict {
  if (status < 200 || status >= 300) return failedVerdict(status, headers, text, nowMs, status === 429 ? epochMs(headers['anthropic-ratelimit-unified-reset']) : null);
  const events = sseJson(text);
  const answer = events
    .filter((e) => e.json.type === 'content_block_delta')
    .map((e) => String((e.json.delta as { text?: unknown } | undefined)?.text ?? ''))
    .join('');
  const error = events.find((e) => e.json.type === 'error');
  if (error) return badBody(`stream error: ${String((error.json.error as { type?: unknown } | undefined)?.type ?? 'unknown')}`, answer || null);
  if (events.some((e) => e.json.type === 'message_stop')) return passed(answer || null);
  return badBody(events.length ? 'the stream ended before message_stop' : 'the reply is not a Messages event stream', answer || null);
}
