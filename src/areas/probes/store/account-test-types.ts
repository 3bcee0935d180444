/** The shapes the account-test plans repository (account-tests.ts) reads and writes: a plan's view and input, a claim, an outcome and a stored result. */
export interface PlanView {
  id: number;
  account_id: number;
  cron: string;
  timezone: string;
  model: string;
  max_results: number;
  auto_recover: boolean;
  enabled: boolean;
  next_run_at: string;
  last_run_at: string | null;
  last_ok: boolean | null;
  /** Phase slots skipped as more than half an interval late (no replica could take them in time). */
  missed: number;
  created_at: string;
  updated_at: string;
}

export interface PlanInput {
  accountId: number;
  cron: string;
  timezone: string;
  model: string;
  maxResults: number;
  autoRecover: boolean;
  enabled: boolean;
}

export interface ClaimedPlan {
  id: number;
  fence: number;
  accountId: number;
  cron: string;
  timezone: string;
  model: string;
  maxResults: number;
  autoRecover: boolean;
  /** The slot this run is for (the plan's next_run_at when claimed; the runner may move it to the latest slot passed). */
  occurrence: Date;
  /** The immediate test of a create or edit: never skipped as late. */
  dueNow: boolean;
  /** Database time of the claim. */
  claimedAt: Date;
}

export interface TestOutcome {
  startedAt: Date;
  ok: boolean;
  status: number | null;
  latencyMs: number;
  ttfbMs: number | null;
  errorClass: string | null;
  /** The provider's words (what the account's status reason quotes). */
  detail: string | null;
  /** A 429's reset (epoch ms) when the reply gave one. */
  resetAtMs: number | null;
}

export interface TestResultView {
  occurrence: string;
  started_at: string;
  ok: boolean;
  status: number | null;
  latency_ms: number;
  ttfb_ms: number | null;
  error_class: string | null;
  recovered: boolean;
  instance_id: string;
}
