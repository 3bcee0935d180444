import type { TokenRefreshSettings } from '../../src/areas/accounts/token-refresh-service.js';

/**
 * A refresh scheduler's settings for tests that build a TokenRefreshService of their own: the
 * defaults of `auth.*` (5 attempts, 5 s backoff base tripling to 5 min, a 1 s retry floor, a
 * 10-minute recovery delay, a 2-minute shard backstop, a 5-minute lease), with what the test
 * states on top (its margin, how long the first sync waits for a member list).
 */
export function refreshSettings(over: Pick<TokenRefreshSettings, 'marginMs' | 'shardsWaitMs'> & Partial<TokenRefreshSettings>): TokenRefreshSettings {
  return {
    enabled: true,
    maxAttempts: 5,
    backoffBaseMs: 5000,
    backoffMaxMs: 300_000,
    retryFloorMs: 1000,
    recoveryDelayMs: 600_000,
    backstopMs: 120_000,
    leaseTtlMs: 300_000,
    ...over,
  };
}
