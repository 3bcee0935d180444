/**
 * relay-jobs as a library: embed the runtime in a gateway process, or build on its parts.
 *
 *   const config = loadConfig();
 *   const rt = await Runtime.create(config);
 *   rt.start();
 *   const { access_token } = await rt.services.tokens.getAccessToken(accountId); // hot path
 *   await rt.services.tokens.reportUnauthorized(accountId, tokenVersion);        // upstream 401
 *   rt.services.usage.record({ request_id, user_id, platform, model, input_tokens, output_tokens, cost });
 *   await rt.services.quota.increment(userId, platform, amount);
 *   ...
 *   await rt.shutdown();
 */
export { type Config, type Mode } from './config/load.js';
export { loadConfig } from './app/config-schema.js';
export { UserError, ConfigError } from './config/errors.js';
export { Runtime, type RuntimeOptions, type JobView } from './app/runtime.js';
export { buildHttpServer } from './http/server.js';
export { WorkerPool, type OverflowPolicy, type SubmitOutcome, type PoolStats } from './workers/worker-pool.js';
export type { JobDefinition, JobContext, JobResult, JobScope } from './scheduler/job.js';
export type { Health, HealthVerdict } from './scheduler/health.js';
export { systemClock, ManualClock, type Clock } from './time/clock.js';
export { Deadline } from './time/deadline.js';
export {
  AccountUnavailable,
  type AccessToken,
  type UnauthorizedReport,
  type RefreshOutcome,
  type RefreshTrigger,
  type AccountView,
  type AccountStatus,
  type ProxyView,
} from './areas/accounts/index.js';
export { AppError, InvalidInput, NotFound, Conflict, type ErrorKind, type FieldError } from './errors/app-error.js';
export { UsageQueueFull, IdempotencyConflict, requestHash, type RecordOutcome, type UsageEventInput, type BeginResult } from './areas/usage/index.js';
export { signWebhook, GenericJsonProvider, ProviderError, type PaymentProvider } from './areas/billing/index.js';
export { jobsFor, type JobModule, type JobDefaultsSpec } from './modules/define-job.js';
export { defineJob, type Services } from './app/registry.js';
export { createLogger, silentLogger, type Logger } from './telemetry/logger.js';
// The runtime's metrics: the kernel's on `rt.metrics`, each area's group through
// `rt.metrics.group(AccountMetrics)` (e.g. `.refreshTotal`), the same objects /metrics reads.
export { Metrics, type MetricGroup } from './telemetry/metrics.js';
export { AccountMetrics } from './areas/accounts/metrics.js';
export { UsageMetrics } from './areas/usage/metrics.js';
export { BillingMetrics } from './areas/billing/metrics.js';
export { NotificationMetrics } from './areas/notifications/metrics.js';
export { OpsMetrics } from './areas/ops/metrics.js';
export { ProbesMetrics } from './areas/probes/metrics.js';
export { ImagesMetrics } from './areas/images/metrics.js';
export { SchedulerMetrics } from './areas/scheduler-snapshot/metrics.js';
export { BackupMetrics } from './areas/backup/metrics.js';
// The areas' config sections reach `Config` by declaration merging (`declare module` in each area's
// config.ts); named here, as types only, so a library user's compiler sees them too (`config.usage`).
export type {} from './areas/accounts/config.js';
export type {} from './areas/admin/config.js';
export type {} from './areas/backup/config.js';
export type {} from './areas/billing/config.js';
export type {} from './areas/change-stream/config.js';
export type {} from './areas/images/config.js';
export type {} from './areas/notifications/config.js';
export type {} from './areas/ops/config.js';
export type {} from './areas/probes/config.js';
export type {} from './areas/scheduler-snapshot/config.js';
export type {} from './areas/usage/config.js';
