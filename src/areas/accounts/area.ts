import { defineArea } from '../../modules/area.js';
import { AccountMetrics } from './metrics.js';
import { accountsConfig, refreshMarginWarnings } from './config.js';
import { REFRESH_MEMBERSHIP } from './refresh-shards.js';
import { tokenRefreshJob } from './token-refresh.js';
import { accountExpiryJob } from './account-expiry.js';
import { proxyExpiryJob } from './proxy-expiry.js';
import { registerAccountRoutes } from './accounts-routes.js';
import { registerProxyRoutes } from './proxies-routes.js';
import { resolveProviders } from './providers/registry.js';
import { accountsCommands } from './cli-register.js';
import { accountsMigrations } from './store/migrations/index.js';

/** The accounts area as the area list sees it (README.md: its invariants). */
export const accountsArea = defineArea({
  name: 'accounts',
  config: accountsConfig,
  wiring: async () => (await import('./wiring.js')).buildAccounts,
  jobs: [tokenRefreshJob, accountExpiryJob, proxyExpiryJob],
  metrics: [AccountMetrics],
  migrations: accountsMigrations,
  cli: accountsCommands,
  // `oauth.providers`: each provider's keys, merged with the built-in ones.
  checkConfig: (config) => resolveProviders(config).problems,
  // A refresh margin shorter than the retry schedule (config.ts).
  configWarnings: (config) => refreshMarginWarnings(config),
  // The replicas that run token_refresh share the scheduled refreshes (refresh-shards.ts).
  memberships: [{ name: REFRESH_MEMBERSHIP, job: 'token_refresh' }],
  routes(api, deps) {
    registerAccountRoutes(api, deps);
    registerProxyRoutes(api, deps);
  },
});
