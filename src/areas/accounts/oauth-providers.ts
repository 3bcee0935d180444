import type { Config } from '../../config/load.js';
import { AppError } from '../../errors/app-error.js';

export interface OAuthProvider {
  platform: string;
  tokenUrl: string;
  clientId: string;
  clientSecret?: string;
  /** Refresh calls per second this process sends to the endpoint. */
  maxPerSecond: number;
  /** How long the provider still accepts a just-rotated refresh token (`reuse_grace`; 0: never). */
  reuseGraceMs: number;
}

/** The public OAuth clients of the official CLIs; `oauth.providers.<platform>` overrides any field. */
const BUILT_IN: Record<string, { token_url: string; client_id: string }> = {
  openai: { token_url: 'https://auth.openai.com/oauth/token', client_id: 'app_EMoamEEZ73f0CkXaXp7hrann' },
  anthropic: { token_url: 'https://console.anthropic.com/v1/oauth/token', client_id: '9d1c250a-e61b-44d9-88ed-5944d1962f5e' },
  gemini: { token_url: 'https://oauth2.googleapis.com/token', client_id: '681255809395-oo8ft2oprdrnp9e3aqf6av3hmdib135j.apps.googleusercontent.com' },
};

const DEFAULT_MAX_PER_SECOND = 10;

export class UnknownPlatform extends AppError {
  constructor(
    readonly platform: string,
    known: string[],
  ) {
    super('invalid', 'unknown_platform', `unknown platform ${JSON.stringify(platform)}: expected one of ${known.join(', ')}, or configure oauth.providers.${platform}.token_url and .client_id`);
  }
}

/** Built-in providers merged with `oauth.providers`; a configured platform needs both a token URL and a client id. */
export function resolveProviders(config: Config): { providers: Map<string, OAuthProvider>; problems: string[] } {
  const providers = new Map<string, OAuthProvider>();
  const problems: string[] = [];
  const names = new Set([...Object.keys(BUILT_IN), ...Object.keys(config.oauth.providers)]);
  for (const platform of names) {
    const own = config.oauth.providers[platform] ?? {};
    const base = BUILT_IN[platform];
    const tokenUrl = own.token_url ?? base?.token_url;
    const clientId = own.client_id ?? base?.client_id;
    if (!tokenUrl || !clientId) {
      problems.push(`oauth.providers.${platform}: a platform that is not built in needs both token_url and client_id`);
      continue;
    }
    providers.set(platform, { platform, tokenUrl, clientId, clientSecret: own.client_secret, maxPerSecond: own.max_per_second ?? DEFAULT_MAX_PER_SECOND, reuseGraceMs: own.reuse_grace ?? 0 });
  }
  return { providers, problems };
}
