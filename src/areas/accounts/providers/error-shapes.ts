/**
 * The error shapes the providers answer with, read into one code and one message:
 * - OAuth's flat `{"error":"invalid_grant","error_description":"…"}` (RFC 6749; Anthropic's and Google's token endpoints),
 * - OpenAI's nested `{"error":{"code":"refresh_token_reused","message":"…","type":"invalid_request_error"}}`,
 * - Anthropic's nested `{"type":"error","error":{"type":"not_found_error","message":"…"}}`,
 * - Google's API `{"error":{"code":401,"message":"…","status":"UNAUTHENTICATED"}}`,
 * - the ChatGPT backend's `{"detail":"Store must be set to false"}`.
 * The code is lower-cased.
 */
export function readError(json: Record<string, unknown> | null): { code: string; message: string } {
  if (!json) return { code: '', message: '' };
  const e = json.error;
  let code = '';
  let message = '';
  if (typeof e === 'string') code = e;
  else if (e && typeof e === 'object') {
    const n = e as Record<string, unknown>;
    const str = (v: unknown) => (typeof v === 'string' && v.length > 0 ? v : '');
    // OpenAI names the error in `code` (null when it has none: its `type` is a category such as
    // invalid_request_error, not a reason); Anthropic in `type` under a top-level `type: "error"`;
    // Google's API in `status` (its `code` is the HTTP number).
    code = str(n.code) || (json.type === 'error' ? str(n.type) : '') || str(n.status) || ('code' in n ? '' : str(n.type));
    if (typeof n.message === 'string') message = n.message;
  }
  if (typeof json.error_description === 'string') message = json.error_description;
  else if (!message && typeof json.detail === 'string') message = json.detail;
  else if (!message && typeof json.message === 'string') message = json.message;
  return { code: code.toLowerCase(), message };
}

/** The body as a JSON object, or null (HTML from a CDN, empty, an array). */
export function jsonObject(text: string): Record<string, unknown> | null {
  try {
    const v = JSON.parse(text) as unknown;
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** `code: message`, or the status alone, cut short: what a log line, an account's reason and an API answer show. */
export function errorDetail(status: number, code: string, message: string): string {
  return [code, message].filter(Boolean).join(': ').slice(0, 200) || `HTTP ${status}`;
}

/** Retry-After as seconds or an HTTP date; capped at an hour so a hostile value cannot park an account forever. */
export function parseRetryAfter(value: string | null | undefined, nowMs: number): number | null {
  if (!value) return null;
  const secs = Number(value);
  const ms = Number.isFinite(secs) ? secs * 1000 : Date.parse(value) - nowMs;
  if (!Number.isFinite(ms) || ms < 0) return null;
  return Math.min(ms, 3_600_000);
}
