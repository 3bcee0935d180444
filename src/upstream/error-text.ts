import { redactUrl, scrubUrlSecrets } from '../config/redact-url.js';

/**
 * The one scrubber every outgoing client passes its failure text through before it can reach a
 * log line, a stored row (`notification_deliveries.last_error`, `job_runs.note`) or an API
 * reply. fetch/undici errors quote the URL they were given (and with it any `user:pass@` or
 * `?token=`), and their `cause` may quote it again: every URL the call used is masked in the
 * message and in the cause, and the text is cut to `max` characters.
 */
export function scrubbedText(text: string, urls: ReadonlyArray<string | null | undefined>, max = 500): string {
  let t = text;
  for (const u of urls) if (u) t = scrubUrlSecrets(t, u);
  return t.slice(0, max);
}

/** What went wrong with a call to `url` (message, and the cause's code or message), with every secret of the URLs masked. */
export function failureText(err: unknown, urls: ReadonlyArray<string | null | undefined>, max = 500): string {
  const e = err as Error & { code?: string; cause?: { code?: string; message?: string } };
  const cause = e?.cause ? (e.cause.code ?? e.cause.message ?? '') : (e?.code ?? '');
  const base = e instanceof Error ? e.message : String(err);
  return scrubbedText(cause && !base.includes(cause) ? `${base} (${cause})` : base, urls, max);
}

/** A URL fit to name in a message: credentials and secret query values masked. */
export const shownUrl = redactUrl;
