import { apiKeyJudge, apiKeyRequest } from '../../src/areas/accounts/providers/api-key.js';
import type { ProbeTarget } from '../../src/upstream/probe-client.js';

/** An OpenAI chat-completions probe with an API key, as a channel monitor with provider openai sends it. */
export function chatTarget(t: { baseUrl: string; apiKey: string; model: string; timeoutMs: number; slot?: Date; proxyUrl?: string | null }): ProbeTarget {
  return { request: apiKeyRequest('openai', t.baseUrl, t.apiKey, t.model, 'ping'), judge: apiKeyJudge('openai'), timeoutMs: t.timeoutMs, slot: t.slot, proxyUrl: t.proxyUrl };
}
