import type { Accounts } from '../areas/accounts/store/accounts.js';
import type { AdminSessions } from '../areas/admin/store/admin-sessions.js';
import type { CanaryRuns } from '../areas/canary/store/canary-runs.js';
import type { Proxies } from '../areas/accounts/store/proxies.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { TokenRefreshService } from '../areas/accounts/token-refresh-service.js';
import type { TokenApi } from '../areas/accounts/token-api.js';
import type { OAuthProvider } from '../areas/accounts/oauth-providers.js';
import type { UsageStore } from '../areas/usage/store/usage.js';
import type { Rollups } from '../areas/usage/store/rollups.js';
import type { CleanupTasks } from '../areas/usage/store/cleanup-tasks.js';
import type { Idempotency } from '../areas/usage/store/idempotency.js';
import type { UsageWriter } from '../areas/usage/usage-writer.js';
import type { UsageIngest } from '../areas/usage/usage-ingest.js';
import type { PlatformQuota } from '../areas/usage/platform-quota.js';
import type { QuotaFlushLoop } from '../areas/usage/quota-flush-loop.js';
import type { Recomputes } from '../areas/usage/recomputes.js';
import type { Billing } from '../areas/billing/store/billing.js';
import type { Notifications } from '../areas/notifications/store/notifications.js';
import type { Notifier } from '../areas/notifications/notifier.js';
import type { Payments } from '../areas/billing/payments.js';
import type { Ops } from '../areas/ops/ops-services.js';
import type { SchedulerSnapshot } from '../areas/scheduler-snapshot/scheduler-snapshot-service.js';
import type { OutboxConsumer } from '../areas/scheduler-snapshot/outbox-consumer.js';
import type { SchedulerOutbox } from '../areas/scheduler-snapshot/store/scheduler-outbox.js';
import type { ImageBatchService } from '../areas/images/image-batch-service.js';
import type { Monitors } from '../areas/probes/store/monitors.js';
import type { MonitorHistory } from '../areas/probes/store/monitor-history.js';
import type { AccountTests } from '../areas/probes/store/account-tests.js';
import type { MonitorRunner } from '../areas/probes/monitor-runner.js';
import type { AccountTestRunner } from '../areas/probes/account-test-runner.js';
import type { Random } from '../time/clock.js';
import type { DeadLetters } from '../store/dead-letters.js';
import type { BackupService } from '../areas/backup/backup-service.js';
import type { Doctor } from '../areas/doctor/index.js';

/** What jobs use beyond their JobContext: repositories and long-lived services the runtime builds. */
export interface Services {
  sessions: AdminSessions;
  canaryRuns: CanaryRuns;
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
  recomputes: Recomputes;
  idempotency: Idempotency;
  quota: PlatformQuota;
  /** The quota flush on the loop block, started by the platform_quota_flusher job. */
  quotaFlush: QuotaFlushLoop;
  billing: Billing;
  notifications: Notifications;
  notifier: Notifier;
  payments: Payments;
  /** The ops plane: series, alert rules and events, reports, retention, collector. */
  ops: Ops;
  /** The scheduler snapshot's read side (the gateway's routing cache), its outbox consumer and the outbox. */
  schedulerSnapshot: SchedulerSnapshot;
  snapshotConsumer: OutboxConsumer;
  schedulerOutbox: SchedulerOutbox;
  imageBatches: ImageBatchService;
  monitors: Monitors;
  monitorHistory: MonitorHistory;
  monitorRunner: MonitorRunner;
  accountTests: AccountTests;
  accountTestRunner: AccountTestRunner;
  /** Jitter for monitor phases (injectable). */
  probeRandom: Random;
  /** Rows the database refused for their content, set aside by the batch writers. */
  deadLetters: DeadLetters;
  backup: BackupService;
  /** `relay-jobs doctor`'s checks against the live deployment (the doctor job, the API, the CLI). */
  doctor: Doctor;
}
