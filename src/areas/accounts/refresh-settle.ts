import type { Logger } from '../../telemetry/logger.js';
import type { AccountMetrics } from './metrics.js';
import type { Clock } from '../../time/clock.js';
import { retry } from '../../time/retry.js';
import type { Accounts, AccountMetadata, AccountSecrets, AccountStatus, UnsettledSend } from './store/accounts.js';
import type { RefreshCallResult } from './providers/types.js';
import { lostRotationReason, mayPresentAgain } from './lost-rotation.js';

/**
 * What one request came to. `lease_held` is a skip (another process is refreshing this
 * account), not a success and not a failure; `superseded` means the token changed since the
 * caller looked, so there is nothing to do but read the new one.
 */
export type RefreshOutcome =
  | { result: 'refreshed'; version: number; tokenExpiresAt: Date | null }
  | { result: 'superseded'; version: number; tokenExpiresAt: Date | null }
  | { result: 'lease_held'; heldIn: 'redis' | 'postgres' }
  | { result: 'skipped'; reason: 'gone' | 'not_eligible' | 'no_refresh_token' | 'recently_attempted' | 'stopped'; status?: AccountStatus }
  | { result: 'transient'; reason: string; detail: string; retryAfterMs: number | null; failures: number; tokenExpiresAt?: Date | null }
  | { result: 'permanent'; reason: string; detail: string; status: AccountStatus }
  | { result: 'config'; reason: string; detail: string };

/**
 * What a provider's reply to a refresh becomes, under the refresher's lease (refresher.ts): new
 * credentials stored (retried until they land: with rotation the old refresh token is already
 * dead), a permanent refusal final on its second hit (or at once when a dead sender's rotation was
 * lost), a config error, or a transient failure counted for the retry schedule; and, without a
 * call, a dead sender's unanswered send whose refresh token must not be presented again
 * (`settleUnanswered`). Every write compares the token version and drops this process's
 * PostgreSQL lease in the same statement.
 */
export interface SettleContext {
  accounts: Accounts;
  log: Logger;
  metrics: AccountMetrics;
  clock: Clock;
  /** The ending write drops this owner's PostgreSQL refresh lease. */
  release: { owner: string };
  /** True once shutdown's deadline passed with refreshes in flight: stop retrying the persist. */
  gaveUp: () => boolean;
}

/** Stores what the provider said. Credentials from a successful call are written whatever else happens. */
export async function settleReply(
  c: SettleContext,
  acct: AccountSecrets,
  reply: RefreshCallResult,
  repeated: (UnsettledSend & { graceMs: number; retryAgeMs: number }) | null,
  /** The fingerprint of the refresh token presented: remembered as dead when the refusal is final. */
  fingerprint: string,
): Promise<RefreshOutcome> {
  const { log } = c;
  const id = acct.id;
  switch (reply.kind) {
    case 'ok': {
      const creds = { access_token: reply.accessToken, refresh_token: reply.refreshToken ?? acct.credentials.refresh_token, id_token: reply.idToken ?? acct.credentials.id_token ?? null };
      const version = await persist(c, acct, creds, reply.expiresAt, reply.refreshToken !== null, reply.metadata);
      if (version === null) {
        const now = await c.accounts.currentToken(id);
        log.warn({ account_id: id }, 'credentials were changed by someone else during the refresh; kept theirs');
        return { result: 'superseded', version: now?.version ?? acct.tokenVersion, tokenExpiresAt: now?.tokenExpiresAt ?? null };
      }
      if (!reply.expiresAt) log.warn({ account_id: id }, 'Failed to parse JWT exp: the reply had no expires_in and the access token no exp; refreshed only on 401 or on request');
      log.info({ account_id: id, token_expires_at: reply.expiresAt?.toISOString() ?? null, rotated: reply.refreshToken !== null }, 'Token refreshed successfully');
      return { result: 'refreshed', version, tokenExpiresAt: reply.expiresAt };
    }
    case 'permanent': {
      // A rejected refresh token that another writer already replaced is not a failure: the peer won.
      // codex-proxy-rs: a permanent-looking reply is final on the second consecutive hit, not the first, so one
      // flaky reply cannot kill an account; the first is recorded as a failure and retried after the first backoff.
      // A token a dead sender presented and the provider now refuses: its rotation died with the sender, final at once.
      const lost =
        repeated && reply.accountStatus === 'expired'
          ? lostRotationReason({ platform: acct.platform, sent: repeated, retryAgeMs: repeated.retryAgeMs, graceMs: repeated.graceMs, providerReason: reply.reason })
          : null;
      const final = lost !== null || acct.lastError === reply.reason;
      const detail = lost ?? reply.detail;
      const failures = await c.accounts.recordFailure(id, acct.tokenVersion, lost ? 'rotation_lost_in_crash' : reply.reason, final ? { status: reply.accountStatus, reason: detail } : null, c.release);
      // The failure write compares the version, so "matched nothing" is exactly that case.
      if (!failures) {
        const now = await c.accounts.currentToken(id);
        return { result: 'superseded', version: now?.version ?? acct.tokenVersion, tokenExpiresAt: now?.tokenExpiresAt ?? null };
      }
      if (!final) {
        log.warn({ account_id: id, reason: reply.reason, error: reply.detail }, 'permanent-looking refresh reply: retried once; the account is marked only if the next attempt gets it again');
        return { result: 'transient', reason: reply.reason, detail: `${reply.detail} (first hit; final on the second)`, retryAfterMs: null, failures, tokenExpiresAt: acct.tokenExpiresAt };
      }
      // Remembered by fingerprint (issue 47): no replica presents this refresh token again, whichever account carries it.
      if (reply.accountStatus === 'expired')
        await c.accounts
          .rememberDeadToken(fingerprint, acct.platform, id, `${reply.status} ${detail}`)
          .catch((err: Error) => log.warn({ account_id: id, err: err.message }, 'could not remember the dead refresh token; the account is expired all the same'));
      log.error({ account_id: id, reason: reply.reason, status: reply.accountStatus, error: detail }, 'Permanent failure detected: automatic refresh stopped for this account');
      return { result: 'permanent', reason: lost ? 'rotation_lost_in_crash' : reply.reason, detail, status: reply.accountStatus };
    }
    case 'config': {
      await c.accounts.recordFailure(id, acct.tokenVersion, `config:${reply.reason}`, null, c.release);
      log.error({ account_id: id, platform: acct.platform, error: reply.detail }, `the OAuth provider rejected our client (${reply.reason}): check oauth.providers.${acct.platform}.client_id`);
      return { result: 'config', reason: reply.reason, detail: reply.detail };
    }
    case 'transient': {
      const failures = await c.accounts.recordFailure(id, acct.tokenVersion, reply.reason, null, c.release);
      return { result: 'transient', reason: reply.reason, detail: reply.detail, retryAfterMs: reply.retryAfterMs, failures, tokenExpiresAt: acct.tokenExpiresAt };
    }
  }
}

/**
 * A send a dead sender left unanswered, found by the next attempt (lost-rotation.ts). Null when
 * its refresh token may be presented again (the caller sends it). Otherwise (a rotating platform
 * outside its reuse grace) no call: the account is expired with the lost-rotation reason in the
 * one write that ends the refresh, and the token is remembered as dead, so no later attempt
 * (recovery, admin, another replica) presents it either. Should the sender be alive after all
 * and its reply still land, that reply's write (same version) restores the account.
 */
export async function settleUnanswered(
  c: SettleContext,
  acct: AccountSecrets,
  sent: UnsettledSend,
  platform: { rotates: boolean; reuseGraceMs: number },
  fingerprint: string,
  trigger: string,
): Promise<RefreshOutcome | null> {
  const id = acct.id;
  const again = mayPresentAgain(platform, sent);
  const then = again ? 'retrying with the same refresh token now' : 'its refresh token is single-use: not presented again, the account is expired';
  c.log.warn({ account_id: id, sent_at: sent.at.toISOString(), sent_by: sent.by, trigger }, `a refresh sent earlier was never answered in the store (its sender died?): ${then}`);
  if (again) return null;
  const detail = lostRotationReason({ platform: acct.platform, sent, retryAgeMs: sent.ageMs, graceMs: platform.reuseGraceMs, providerReason: null });
  const failures = await c.accounts.recordFailure(id, acct.tokenVersion, 'rotation_lost_in_crash', { status: 'expired', reason: detail }, c.release);
  if (!failures) {
    const now = await c.accounts.currentToken(id);
    return { result: 'superseded', version: now?.version ?? acct.tokenVersion, tokenExpiresAt: now?.tokenExpiresAt ?? null };
  }
  await c.accounts
    .rememberDeadToken(fingerprint, acct.platform, id, `never answered in the store: ${detail}`)
    .catch((err: Error) => c.log.warn({ account_id: id, err: err.message }, 'could not remember the refresh token as dead; the account is expired all the same'));
  c.log.error({ account_id: id, reason: 'rotation_lost_in_crash', status: 'expired', error: detail }, 'Permanent failure detected: automatic refresh stopped for this account');
  return { result: 'permanent', reason: 'rotation_lost_in_crash', detail, status: 'expired' };
}

/**
 * The provider has issued new tokens and, with rotation, already killed the old refresh
 * token: losing this write loses the account. So keep trying (the lease keeper keeps the lease)
 * until it lands or the version check says someone else wrote.
 */
async function persist(c: SettleContext, acct: AccountSecrets, creds: AccountSecrets['credentials'], expiresAt: Date | null, rotated: boolean, metadata: AccountMetadata): Promise<number | null> {
  return retry(() => c.accounts.writeRefreshed(acct.id, acct.tokenVersion, creds, expiresAt, c.release, metadata, new Date(c.clock.now())), {
    baseMs: 200,
    maxMs: 5000,
    clock: c.clock,
    retryIf: (err) => {
      c.metrics.rotationPersistFailures.inc();
      if (!c.gaveUp()) return true;
      c.log.error(
        { account_id: acct.id, rotated, err: (err as Error).message },
        'shutdown deadline passed before refreshed credentials could be stored; if the refresh token rotated, re-authorize this account',
      );
      return false;
    },
    onRetry: (err, attempt) =>
      c.log.error({ account_id: acct.id, attempt, rotated, err: (err as Error).message }, 'could not store refreshed credentials; retrying (the old refresh token may already be dead)'),
  });
}
