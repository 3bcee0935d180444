import type { Accounts } from '../store/accounts.js';
import type { AdminSessions } from '../store/admin-sessions.js';
import type { CanaryRuns } from '../store/canary-runs.js';
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
import type { Recomputes } from './usage/recomputes.js';
import type { Billing } from '../store/billing.js';
import type { Notifications } from '../store/notifications.js';
import type { Notifier } from './billing/notifier.js';
import type { Payments } from './billing/payments.js';
import type { Ops } from './ops/ops-services.js';
import type { SchedulerSnapshot } from './scheduler/scheduler-snapshot-service.js';
import type { OutboxConsumer } from './scheduler/outbox-consumer.js';
import type { SchedulerOutbox } from '../store/scheduler-outbox.js';
import type { ImageBatchService } from './images/image-batch-service.js';
import type { Monitors } from '../store/monitors.js';
import type { MonitorHistory } from '../store/monitor-history.js';
import type { AccountTests } from '../store/account-tests.js';
import type { MonitorRunner } from './probes/monitor-runner.js';
import type { AccountTestRunner } from './probes/account-test-runner.js';
import type { Random } from '../time/clock.js';
import type { DeadLetters } from '../store/dead-letters.js';
import type { BackupService } from './backup/backup-service.js';
import type { Doctor } from '../doctor/index.js';

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
