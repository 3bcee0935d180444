import type { Config } from '../../../config/load.js';
import { openaiAdapter } from './openai.js';
import { anthropicAdapter } from './anthropic.js';
import { geminiAdapter } from './gemini.js';
import type { AdapterSettings } from './settings.js';
import type { BodyEncoding, Dialect, ProviderAdapter } from './types.js';

interface BuiltIn {
  token_url: string;
  client_id: string;
  client_secret?: string;
  body: BodyEncoding;
  api_url: string;
  generative_url?: string;
}

/**
 * The public OAuth clients of the official CLIs and the hosts they talk to today
 * (../shared/reference/upstream-wire-formats.md, docs/providers.md); `oauth.providers.<platform>`
 * overrides any of it.
 */
const BUILT_IN: Record<Dialect, BuiltIn> = {
  openai: { token_url: 'https://auth.openai.com/oauth/token', client_id: 'app_EMoamEEZ73f0CkXaXp7hrann', body: 'form', api_url: 'https://chatgpt.com/backend-api/codex' },
  // console.anthropic.com answers 404 since mid-2026; the gateways moved to platform.claude.com and send JSON.
  anthropic: { token_url: 'https://platform.claude.com/v1/oauth/token', client_id: '9d1c250a-e61b-44d9-88ed-5944d1962f5e', body: 'json', api_url: 'https://api.anthropic.com' },
  gemini: {
    token_url: 'https://oauth2.googleapis.com/token',
    client_id: '681255809395-oo8ft2oprdrnp9e3aqf6av3hmdib135j.apps.googleusercontent.com',
    // The Gemini CLI's installed-app secret: public (it ships in the CLI), and Google refuses a refresh without it.
    client_secret: ['GOCSPX', '4uHgMPm-1o7Sk-geV6Cu5clXFsxl'].join('-'),
    body: 'form',
    api_url: 'https://cloudcode-pa.googleapis.com',
    generative_url: 'https://generativelanguage.googleapis.com',
  },
};
const MAKE: Record<Dialect, (s: AdapterSettings) => ProviderAdapter> = { openai: openaiAdapter, anthropic: anthropicAdapter, gemini: geminiAdapter };

const DEFAULT_MAX_PER_SECOND = 10;

const trim = (u: string) => u.replace(/\/+$/, '');

/** Built-in platforms merged with `oauth.providers`; a platform configured by hand needs both a token URL and a client id. */
export function resolveProviders(config: Config): { providers: Map<string, ProviderAdapter>; problems: string[] } {
  const providers = new Map<string, ProviderAdapter>();
  const problems: string[] = [];
  const names = new Set([...Object.keys(BUILT_IN), ...Object.keys(config.oauth.providers)]);
  for (const platform of names) {
    const own = config.oauth.providers[platform] ?? {};
    const builtIn = (BUILT_IN as Record<string, BuiltIn | undefined>)[platform];
    if (builtIn && own.like && own.like !== platform) problems.push(`oauth.providers.${platform}.like: a built-in platform speaks its own dialect; remove like`);
    const dialect = (builtIn ? platform : (own.like ?? 'openai')) as Dialect;
    const base = builtIn ?? null;
    const tokenUrl = own.token_url ?? base?.token_url;
    const clientId = own.client_id ?? base?.client_id;
    if (!tokenUrl || !clientId) {
      problems.push(`oauth.providers.${platform}: a platform that is not built in needs both token_url and client_id`);
      continue;
    }
    const like = BUILT_IN[dialect];
    const secret = own.client_secret ?? base?.client_secret;
    const settings: AdapterSettings = {
      common: {
        platform,
        tokenUrl,
        clientId,
        body: own.body ?? like.body,
        apiUrl: trim(own.api_url ?? like.api_url),
        maxPerSecond: own.max_per_second ?? DEFAULT_MAX_PER_SECOND,
        reuseGraceMs: own.reuse_grace ?? 0,
      },
      secret: secret !== undefined ? { client_secret: secret } : {},
      generativeUrl: trim(own.generative_url ?? like.generative_url ?? BUILT_IN.gemini.generative_url!),
    };
    providers.set(platform, MAKE[dialect](settings));
  }
  return { providers, problems };
}
