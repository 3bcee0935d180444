import { openaiAdapter } from '../../src/areas/accounts/providers/openai.js';
import type { ProviderAdapter } from '../../src/areas/accounts/providers/types.js';

/** The OpenAI adapter pointed at a loopback token endpoint (what `oauth.providers.openai.token_url` does in a service). */
export function openaiProvider(o: { tokenUrl: string; clientId: string; maxPerSecond?: number; reuseGraceMs?: number }): ProviderAdapter {
  return openaiAdapter({
    common: {
      platform: 'openai',
      tokenUrl: o.tokenUrl,
      clientId: o.clientId,
      body: 'form',
      apiUrl: 'http://127.0.0.1:9',
      maxPerSecond: o.maxPerSecond ?? 10,
      reuseGraceMs: o.reuseGraceMs ?? 0,
    },
    secret: {},
    generativeUrl: 'http://127.0.0.1:9',
  });
}
