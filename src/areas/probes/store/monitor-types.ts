import type { MonitorProvider } from '../../accounts/index.js';

/** The shapes the monitors repository (monitors.ts) reads and writes: the API's view, the input, a claim and a probe's record. */
/** What the API may see of a monitor: never the key, only whether one is set. */
export interface MonitorView {
  id: number;
  name: string;
  base_url: string | null;
  model: string;
  account_id: number | null;
  has_api_key: boolean;
  /** The API-key dialect; null when account_id is set (the account's platform decides). */
  provider: MonitorProvider | null;
  /** An arithmetic question whose answer is checked (a relay answering 200 with garbage fails). */
  challenge: boolean;
  /** A passing probe slower than this is degraded; null: `channel_monitor.degraded_after`. */
  degraded_after_ms: number | null;
  interval_ms: number;
  timeout_ms: number;
  jitter_ms: number;
  enabled: boolean;
  labels: Record<string, string>;
  next_due_at: string;
  last_probe: { at: string | null; status: number | null; error_class: string | null; latency_ms: number | null };
  created_at: string;
  updated_at: string;
}

export interface MonitorInput {
  name: string;
  baseUrl: string | null;
  model: string;
  apiKey: string | null;
  accountId: number | null;
  intervalMs: number;
  timeoutMs: number;
  jitterMs: number;
  provider?: MonitorProvider;
  challenge?: boolean;
  degradedAfterMs?: number | null;
  enabled: boolean;
  labels: Record<string, string>;
}

/** A monitor claimed for one probe: its fence, the slot it is for, and the key opened. */
export interface ClaimedMonitor {
  id: number;
  fence: number;
  scheduledFor: Date;
  claimedAt: Date;
  leaseUntil: Date;
  /** Whole intervals that passed unprobed before this claim (the replica pool was full, or replicas were down). */
  missed: number;
  baseUrl: string | null;
  model: string;
  apiKey: string | null;
  accountId: number | null;
  intervalMs: number;
  timeoutMs: number;
  provider: MonitorProvider;
  challenge: boolean;
  degradedAfterMs: number | null;
  /** The immediate probe of a create or edit (never skipped as late; the next waits half an interval after it). */
  dueNow: boolean;
}

/** One claim pass: the monitors to probe now, and the slots skipped as more than half an interval late (counted as missed). */
export interface MonitorClaim {
  claimed: ClaimedMonitor[];
  skipped: number;
}

export interface ProbeRecord {
  monitorId: number;
  fence: number;
  scheduledFor: Date;
  startedAt: Date;
  ok: boolean;
  status: number | null;
  latencyMs: number;
  ttfbMs: number | null;
  errorClass: string | null;
  missed: number;
  /** The immediate probe of a create or edit: the next probe is at the first phase slot at or after this (its end + half an interval). */
  notBefore?: Date | null;
}
