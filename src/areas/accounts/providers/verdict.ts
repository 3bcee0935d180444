import { errorDetail, jsonObject, parseRetryAfter, readError } from './error-shapes.js';
import type { ErrorClass, Verdict } from './types.js';

/** Sub2API's reading of a test's status: 401/403 the credential, 429 a rate limit, 529 overloaded. */
export function statusClass(status: number): ErrorClass | null {
  if (status === 401 || status === 403) return 'auth';
  if (status === 429) return 'rate_limited';
  if (status === 529) return 'overloaded';
  if (status >= 500) return '5xx';
  if (status >= 400) return 'http_4xx';
  if (status < 200 || status >= 300) return 'bad_body';
  return null;
}

/** A non-2xx answer in any provider's error shape: its class, the provider's words, and a reset when a header says one. */
export function failedVerdict(status: number, headers: Record<string, string>, text: string, nowMs: number, resetAtMs: number | null = null): Verdict {
  const { code, message } = readError(jsonObject(text));
  const retry = parseRetryAfter(headers['retry-after'], nowMs);
  return {
    ok: false,
    errorClass: statusClass(status) ?? 'bad_body',
    detail: `HTTP ${status}${code || message ? ` ${errorDetail(status, code, message)}` : ''}`.slice(0, 240),
    answer: null,
    resetAtMs: resetAtMs ?? (status === 429 && retry !== null ? nowMs + retry : null),
  };
}

export const passed = (answer: string | null): Verdict => ({ ok: true, errorClass: null, detail: null, answer, resetAtMs: null });
export const badBody = (detail: string, answer: string | null = null): Verdict => ({ ok: false, errorClass: 'bad_body', detail, answer, resetAtMs: null });

/** An epoch value in seconds (or ms, when it is that large) as epoch ms; null when it is not a sane future-ish time. */
export function epochMs(v: unknown): number | null {
  const n = typeof v === 'string' ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isFinite(n) || n <= 0) return null;
  return n > 1e11 ? n : n * 1000;
}
