import type { Judge, UpstreamRequest, Verdict } from './types.js';
import { jsonObject } from './error-shapes.js';
import { badBody, failedVerdict, passed, epochMs } from './verdict.js';
import { geminiCandidates } from './gemini.js';

/** The API-key dialects a channel monitor speaks (a monitor's `provider`). */
export const MONITOR_PROVIDERS = ['openai', 'anthropic', 'gemini'] as const;
export type MonitorProvider = (typeof MONITOR_PROVIDERS)[number];

/**
 * A channel monitor's call with an API key, as Sub2API's checker sends it: OpenAI chat
 * completions with a Bearer key, Anthropic messages with `x-api-key`, Gemini generateContent
 * with `x-goog-api-key`. A few output tokens: enough for the challenge's number.
 */
export function apiKeyRequest(provider: MonitorProvider, baseUrl: string, key: string, model: string, prompt: string): UpstreamRequest {
  const base = baseUrl.replace(/\/+$/, '');
  const json = { 'content-type': 'application/json', 'user-agent': 'relay-jobs-probe' };
  switch (provider) {
    case 'openai':
      return {
        method: 'POST',
        url: `${base}/v1/chat/completions`,
        headers: { ...json, authorization: `Bearer ${key}` },
        body: JSON.stringify({ model, messages: [{ role: 'user', content: prompt }], max_tokens: 16 }),
      };
    case 'anthropic':
      return {
        method: 'POST',
        url: `${base}/v1/messages`,
        headers: { ...json, 'x-api-key': key, 'anthropic-version': '2023-06-01' },
        body: JSON.stringify({ model, max_tokens: 16, messages: [{ role: 'user', content: prompt }] }),
      };
    case 'gemini':
      return {
        method: 'POST',
        url: `${base}/v1beta/models/${encodeURIComponent(model)}:generateContent`,
        headers: { ...json, 'x-goog-api-key': key },
        body: JSON.stringify({ contents: [{ role: 'user', parts: [{ text: prompt }] }], generationConfig: { maxOutputTokens: 16 } }),
      };
  }
}

/** Reads the reply in the provider's shape: OpenAI `choices[].message.content`, Anthropic `content[].text`, Gemini `candidates[].content.parts[].text`. */
export function apiKeyJudge(provider: MonitorProvider): Judge {
  return (status, headers, text, nowMs): Verdict => {
    if (status < 200 || status >= 300) return failedVerdict(status, headers, text, nowMs, status === 429 && provider === 'anthropic' ? epochMs(headers['anthropic-ratelimit-unified-reset']) : null);
    const json = jsonObject(text);
    if (!json) return badBody(`HTTP ${status} but the body is not JSON`);
    switch (provider) {
      case 'openai': {
        const choices = json.choices;
        if (!Array.isArray(choices)) return badBody('no choices[] in the reply');
        const content = (choices[0] as { message?: { content?: unknown } } | undefined)?.message?.content;
        return passed(typeof content === 'string' ? content : null);
      }
      case 'anthropic': {
        if (json.type !== 'message' || !Array.isArray(json.content)) return badBody('not a Messages reply (type message, content[])');
        const t = (json.content as Array<{ type?: unknown; text?: unknown }>).filter((b) => b.type === 'text' && typeof b.text === 'string').map((b) => b.text as string);
        return passed(t.join('') || null);
      }
      case 'gemini': {
        if (!Array.isArray(json.candidates)) return badBody('no candidates[] in the reply');
        return passed(geminiCandidates([json]).text || null);
      }
    }
  };
}

/**
 * Sub2API's challenge: a small sum whose answer is checked, so a relay that answers 200 with
 * garbage (or a cached reply) fails. `random` is injectable so tests can pin the question.
 */
export function makeChallenge(random: () => number = Math.random): { prompt: string; expected: string } {
  const a = 10 + Math.floor(random() * 80);
  const b = 10 + Math.floor(random() * 80);
  return { prompt: `What is ${a} + ${b}? Reply with the number only.`, expected: String(a + b) };
}

/** The verdict with the challenge checked: a passing reply whose first number is not the expected one becomes `wrong_answer`. */
export function checkChallenge(v: Verdict, expected: string): Verdict {
  if (!v.ok) return v;
  // The first number of the answer must be the sum: a reply listing numbers ("10 11 … 180") does not pass by containing it.
  const first = /-?\d+/.exec(v.answer ?? '')?.[0];
  if (first === expected) return v;
  return { ...v, ok: false, errorClass: 'wrong_answer', detail: `challenge answered ${JSON.stringify((v.answer ?? '').slice(0, 40))}, expected ${expected}` };
}
