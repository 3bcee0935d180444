import type { BodyEncoding, ProviderAdapter } from './types.js';

/** What an adapter is built from: the merged `oauth.providers.<platform>` settings (registry.ts). */
export interface AdapterSettings {
  common: Pick<ProviderAdapter, 'platform' | 'tokenUrl' | 'clientId' | 'body' | 'apiUrl' | 'maxPerSecond' | 'reuseGraceMs'>;
  /** `{ client_secret }` when one is configured or built in, else empty: spread into the refresh body. */
  secret: { client_secret?: string };
  /** Gemini only: the Generative Language base URL, for accounts without a Cloud project. */
  generativeUrl: string;
}

/** A refresh body in the platform's encoding, with the matching content type. */
export function encodeBody(encoding: BodyEncoding, fields: Record<string, string>): { headers: Record<string, string>; body: string } {
  if (encoding === 'json') return { headers: { 'content-type': 'application/json', accept: 'application/json' }, body: JSON.stringify(fields) };
  return { headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' }, body: new URLSearchParams(fields).toString() };
}

/** A base URL override without its trailing slashes, or null when none is given. */
export const trimBase = (base: string | null | undefined): string | null => (base ? base.replace(/\/+$/, '') : null);
