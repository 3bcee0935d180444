import type { Accounts } from '../store/accounts.js';
import type { Proxies } from '../store/proxies.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { TokenRefreshService } from './accounts/token-refresh-service.js';
import type { TokenApi } from './accounts/token-api.js';
import type { OAuthProvider } from '../upstream/oauth-providers.js';
import type { UsageStore } from '../store/usage.js';
import type { Rollups } from '../store/rollups.js';
import type { CleanupTasks } from '../store/cleanup-tasks.js';
import type { Idempotency } from '../store/idempotency.js';
import type { UsageWriter } from './usage/usage-writer.js';
import type { UsageIngest } from './usage/usage-ingest.js';
import type { PlatformQuota } from './usage/platform-quota.js';
import type { Billing } from '../store/billing.js';
import type { Notifications } from '../store/notifications.js';
import type { Notifier } from './billing/notifier.js';
import type { Payments } from './billing/payments.js';
import type { BackupService } from './backup/backup-service.js';

/** What jobs use beyond their JobContext: repositories and long-lived services the runtime builds. */
export interface Services {
  accounts: Accounts;
  proxies: Proxies;
  tokenRefresh: TokenRefreshService;
  tokens: TokenApi;
  metrics: Metrics;
  /** OAuth providers by platform (built-in merged with `oauth.providers`). */
  providers: Map<string, OAuthProvider>;
  usageStore: UsageStore;
  usageWriter: UsageWriter;
  usage: UsageIngest;
  rollups: Rollups;
  cleanupTasks: CleanupTasks;
  idempotency: Idempotency;
  quota: PlatformQuota;
  billing: Billing;
  notifications: Notifications;
  notifier: Notifier;
  payments: Payments;
  backup: BackupService;
}
