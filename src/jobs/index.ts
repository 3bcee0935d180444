import { ConfigError } from '../config/errors.js';
import type { Config } from '../config/load.js';
import type { JobDefinition } from '../scheduler/job.js';
import { sessionCleanupJob } from './admin/session-cleanup.js';
import { canaryJob } from './canary/canary.js';
import { tokenRefreshJob } from './accounts/token-refresh.js';
import { accountExpiryJob } from './accounts/account-expiry.js';
import { proxyExpiryJob } from './accounts/proxy-expiry.js';
import { JobServices } from './services.js';
import { dashboardAggregationJob } from './usage/dashboard-aggregation.js';
import { usageCleanupJob } from './usage/usage-cleanup.js';
import { idempotencyCleanupJob } from './usage/idempotency-cleanup.js';
import { platformQuotaFlusherJob } from './usage/platform-quota.js';
import { subscriptionExpiryJob } from './billing/subscription-expiry.js';
import { paymentOrderExpiryJob } from './billing/payment-order-expiry.js';
import { resolveProviders } from '../upstream/oauth-providers.js';

const FACTORIES: Array<(config: Config, services: JobServices) => JobDefinition> = [
  tokenRefreshJob,
  accountExpiryJob,
  proxyExpiryJob,
  subscriptionExpiryJob,
  paymentOrderExpiryJob,
  dashboardAggregationJob,
  usageCleanupJob,
  idempotencyCleanupJob,
  platformQuotaFlusherJob,
  sessionCleanupJob,
  canaryJob,
];

/** Every job this build knows, enabled or not, in the order `relay-jobs jobs` lists them. Reports every job's config errors at once. */
export function buildJobs(config: Config, services: JobServices = new JobServices()): JobDefinition[] {
  const jobs: JobDefinition[] = [];
  const problems: string[] = [];
  for (const factory of FACTORIES) {
    try {
      jobs.push(factory(config, services));
    } catch (err) {
      if (err instanceof ConfigError) problems.push(...err.problems);
      else throw err;
    }
  }
  problems.push(...resolveProviders(config).problems);
  if (problems.length) throw new ConfigError(problems);
  return jobs;
}
