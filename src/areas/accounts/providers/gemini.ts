import { jwtClaims } from '../jwt.js';
import { classifyRefreshReply } from './refresh-reply.js';
import { sseJson } from './sse.js';
import { badBody, failedVerdict, passed } from './verdict.js';
import { jsonObject } from './error-shapes.js';
import { encodeBody, trimBase, type AdapterSettings } from './settings.js';
import type { AccountMetadata, ProviderAdapter, Verdict } from './types.js';

/**
 * Google / Gemini CLI: refresh at oauth2.googleapis.com as a form with the CLI's public client
 * secret; Google does not rotate (the reply has no refresh token: the one presented is kept).
 * The account test is Code Assist's `streamGenerateContent` with the account's Cloud project
 * (`metadata.project_id`), else the Generative Language endpoint; passed when a candidate
 * carries a `finishReason`.
 */
export function geminiAdapter(s: AdapterSettings): ProviderAdapter {
  return {
    ...s.common,
    dialect: 'gemini',
    rotates: false,
    defaultModel: 'gemini-2.5-flash',
    refreshRequest: (refreshToken) => ({
      method: 'POST',
      url: s.common.tokenUrl,
      ...encodeBody(s.common.body, { grant_type: 'refresh_token', refresh_token: refreshToken, client_id: s.common.clientId, ...s.secret }),
    }),
    classifyRefresh: (status, body, headers, nowMs) =>
      classifyRefreshReply(status, body, headers, nowMs, {
        bare401IsPermanent: false,
        metadata: (_json, idToken): AccountMetadata => {
          const email = jwtClaims(idToken)?.email;
          return typeof email === 'string' && email ? { email } : {};
        },
      }),
    testRequest: (a, model, prompt, base) => {
      const headers = { authorization: `Bearer ${a.accessToken}`, 'content-type': 'application/json', accept: 'text/event-stream', 'user-agent': 'GeminiCLI/0.9.0 (linux; x64)' };
      const contents = [{ role: 'user', parts: [{ text: prompt }] }];
      if (a.metadata.project_id)
        return {
          method: 'POST',
          url: `${trimBase(base) ?? s.common.apiUrl}/v1internal:streamGenerateContent?alt=sse`,
          headers,
          body: JSON.stringify({ model, project: a.metadata.project_id, request: { contents } }),
        };
      return { method: 'POST', url: `${trimBase(base) ?? s.generativeUrl}/v1beta/models/${encodeURIComponent(model)}:streamGenerateContent?alt=sse`, headers, body: JSON.stringify({ contents }) };
    },
    judgeTest: judgeGeminiStream,
  };
}

/** Candidates' text and whether one finished; Code Assist wraps each chunk in `response`. */
export function geminiCandidates(chunks: Array<Record<string, unknown>>): { text: string; finished: boolean } {
  let text = '';
  let finished = false;
  for (const c of chunks) {
    const body = (c.response && typeof c.response === 'object' ? c.response : c) as { candidates?: unknown };
    if (!Array.isArray(body.candidates)) continue;
    for (const cand of body.candidates as Array<{ content?: { parts?: Array<{ text?: unknown }> }; finishReason?: unknown }>) {
      for (const p of cand.content?.parts ?? []) if (typeof p.text === 'string') text += p.text;
      if (typeof cand.finishReason === 'string' && cand.finishReason) finished = true;
    }
  }
  return { text, finished };
}

/** Google's 429 may say when in `error.details[].retryDelay` ("30s"). */
function retryDelayMs(text: string, nowMs: number): number | null {
  const details = (jsonObject(text)?.error as { details?: unknown } | undefined)?.details;
  if (!Array.isArray(details)) return null;
  for (const d of details as Array<{ retryDelay?: unknown }>) {
    const m = typeof d.retryDelay === 'string' ? /^(\d+(?:\.\d+)?)s$/.exec(d.retryDelay) : null;
    if (m) return nowMs + Math.min(3600, Number(m[1])) * 1000;
  }
  return null;
}

function judgeGeminiStream(status: number, headers: Record<string, string>, text: string, nowMs: number): Verdict {
  if (status < 200 || status >= 300) return failedVerdict(status, headers, text, nowMs, status === 429 ? retryDelayMs(text, nowMs) : null);
  const { text: answer, finished } = geminiCandidates(sseJson(text).map((e) => e.json));
  if (finished) return passed(answer || null);
  return badBody('no candidate with a finishReason in the stream', answer || null);
}
