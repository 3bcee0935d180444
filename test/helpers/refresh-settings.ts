import type { TokenRefreshSettings } from '../../src/areas/accounts/token-refresh-service.js';
import { tokenRefreshSettings } from '../../src/areas/accounts/wiring.js';
import { loadConfig } from '../../src/app/config-schema.js';

/** The settings a replica gets from the default configuration (`auth.*`, no file, no environment). */
const DEFAULTS = tokenRefreshSettings(loadConfig({ env: {} }));

/**
 * A refresh scheduler's settings for tests that build a TokenRefreshService of their own: what a
 * replica with the default `auth.*` gets (the same function as the accounts area's wiring), with
 * what the test states on top (its margin, how long the first sync waits for a member list).
 */
export function refreshSettings(over: Pick<TokenRefreshSettings, 'marginMs' | 'shardsWaitMs'> & Partial<TokenRefreshSettings>): TokenRefreshSettings {
  return { ...DEFAULTS, ...over };
}
