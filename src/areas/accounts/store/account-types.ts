/** What the accounts repository takes and returns: statuses, credentials, the account as shown, and a refresh's conditions and results. */
export const ACCOUNT_STATUSES = ['active', 'quota_exhausted', 'refreshing', 'expired', 'error', 'disabled', 'banned'] as const;
export type AccountStatus = (typeof ACCOUNT_STATUSES)[number];
/** Statuses automatic refresh works on (`refreshing` is one in progress, or left by a dead process). */
export const REFRESHABLE: readonly AccountStatus[] = ['active', 'quota_exhausted', 'refreshing'];

/** What the providers tell about an account beside its tokens (`accounts.metadata`): the Codex account id, the Gemini project, the e-mail. */
export interface AccountMetadata {
  chatgpt_account_id?: string;
  project_id?: string;
  email?: string;
}

export interface Credentials {
  access_token: string;
  refresh_token?: string | null;
  id_token?: string | null;
}

/** What the API and logs may see of an account: no credential, ever. */
export interface AccountView {
  id: number;
  platform: string;
  name: string;
  status: AccountStatus;
  status_reason: string | null;
  schedulable: boolean;
  expires_at: string | null;
  auto_pause_on_expired: boolean;
  temp_unschedulable_until: string | null;
  temp_unschedulable_reason: string | null;
  proxy_id: number | null;
  proxy_fallback_origin_id: number | null;
  has_refresh_token: boolean;
  token_expires_at: string | null;
  token_version: number;
  /** What the provider told beside the tokens: chatgpt_account_id, project_id, email. */
  metadata: AccountMetadata;
  refresh: { last_attempt_at: string | null; last_success_at: string | null; consecutive_failures: number; last_error: string | null };
  created_at: string;
  updated_at: string;
}

/** The refresh scheduler's view: enough to decide when, nothing secret. */
export interface RefreshCandidate {
  id: number;
  platform: string;
  status: AccountStatus;
  hasRefreshToken: boolean;
  tokenExpiresAt: Date | null;
  tokenVersion: number;
  failures: number;
  lastAttemptAt: Date | null;
  /** When this runtime last stored a refreshed token (its refresher's clock); null when it never has. */
  lastSuccessAt: Date | null;
  updatedAt: Date;
}

/** An account opened for a refresh: decrypted credentials plus the version every write compares. */
export interface AccountSecrets {
  id: number;
  platform: string;
  status: AccountStatus;
  tokenVersion: number;
  tokenExpiresAt: Date | null;
  credentials: Credentials;
  metadata: AccountMetadata;
  proxyUrl: string | null;
  lastAttemptAt: Date | null;
  /** The error class of the last failed refresh attempt (null after a success). */
  lastError: string | null;
}

export interface NewAccount {
  platform: string;
  name: string;
  credentials: Credentials;
  tokenExpiresAt: Date | null;
  proxyId?: number | null;
  expiresAt?: Date | null;
  autoPauseOnExpired?: boolean;
  schedulable?: boolean;
  status?: AccountStatus;
  metadata?: AccountMetadata;
}

export interface AccountPatch {
  name?: string;
  proxyId?: number | null;
  expiresAt?: Date | null;
  autoPauseOnExpired?: boolean;
  schedulable?: boolean;
  status?: AccountStatus;
  metadata?: AccountMetadata;
  credentials?: { value: Credentials; tokenExpiresAt: Date | null };
}

export interface LeaseRelease {
  owner: string;
}

export interface RefreshConditions {
  /** Refresh only if the token is still this version (the caller's view). */
  expectedVersion?: number;
  /** Statuses this trigger may refresh. */
  statuses: readonly AccountStatus[];
  /** Recovery spacing: skip if an attempt was stamped after this instant. */
  attemptedBefore?: Date | null;
  /** When a held lease is free: coordination's test over the lease row (`leaseFreeSql('$7')`) and its liveness window. */
  leaseFree: { sql: string; windowMs: number };
}

/** A refresh request recorded as sent whose answer was never stored (its sender died, or the call threw). */
export interface UnsettledSend {
  at: Date;
  /** Milliseconds since it was sent, by the database clock. */
  ageMs: number;
  fingerprint: string;
  by: string;
}

export interface RefreshBegin {
  acct: AccountSecrets | null;
  skip: 'gone' | 'superseded' | 'not_eligible' | 'no_refresh_token' | 'recently_attempted' | null;
  leased: boolean;
  marked: boolean;
  unsettled: UnsettledSend | null;
}

/**
 * The accounts table. Credentials are sealed with the master key on the way in and opened only
 * for a refresh or the hot path; every credential write compares and bumps `token_version`,
 * so a late or duplicate refresh can never overwrite a newer token.
 */
