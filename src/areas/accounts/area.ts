import type { AreaModule } from '../../jobs/area.js';
import { tokenRefreshJob } from './token-refresh.js';
import { accountExpiryJob } from './account-expiry.js';
import { proxyExpiryJob } from './proxy-expiry.js';
import { registerAccountRoutes } from './accounts-routes.js';
import { registerProxyRoutes } from './proxies-routes.js';

/** The accounts area as the area list sees it (README.md: its invariants). */
export const accountsArea: AreaModule = {
  name: 'accounts',
  jobs: [tokenRefreshJob, accountExpiryJob, proxyExpiryJob],
  routes(api, deps) {
    registerAccountRoutes(api, deps);
    registerProxyRoutes(api, deps);
  },
};
