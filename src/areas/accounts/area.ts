import { defineArea } from '../../modules/area.js';
import { AccountMetrics } from './metrics.js';
import { accountsConfig } from './config.js';
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
  routes(api, deps) {
    registerAccountRoutes(api, deps);
    registerProxyRoutes(api, deps);
  },
});
