import { AppError, InvalidInput, type ErrorKind } from '../../errors/app-error.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Metrics } from '../../telemetry/metrics.js';
import { sleep, type Clock } from '../../time/clock.js';
import type { Accounts, AccountStatus } from './store/accounts.js';
import type { TokenRefreshService } from './token-refresh-service.js';
import type { RefreshOutcome } from './refresher.js';
import { AccountMetrics } from './metrics.js';
import type { TokenCache } from './token-cache.js';
import type { TokenRow } from './store/token-reads.js';
import { delay, monotonic } from '../../time/wall.js';

export type UnavailableCode = 'not_found' | 'unavailable' | 'no_refresh_token' | 'refresh_failed' | 'timeout';

/** Why the hot path cannot have a token for an account; `code` is stable, `message` names the account and the cause. */
const KIND: Record<UnavailableCode, ErrorKind> = { not_found: 'not_found', unavailable: 'conflict', no_refresh_token: 'conflict', refresh_failed: 'upstream_failed', timeout: 'timeout' };

export class AccountUnavailable extends AppError {
  constructor(
    readonly accountId: number,
    override readonly code: UnavailableCode,
    message: string,
    readonly status?: AccountStatus,
  ) {
    super(KIND[code], code, message, undefined, status ? { status } : undefined);
  }
}

export interface AccessToken {
  account_id: number;
  access_token: string;
  token_expires_at: string | null;
  token_version: number;
  status: AccountStatus;
}

export interface UnauthorizedReport {
  account_id: number;
  /** True when the report was about an older token than the stored one: no cooldown, fetch the new token. */
  stale: boolean;
  cooldown_until: string | null;
  refresh: RefreshOutcome['result'] | 'pending' | null;
  token_version: number;
}

export interface TokenApiSettings {
  marginMs: number;
  waitMs: number;
  cooldownMs: number;
}

const SERVING: ReadonlySet<AccountStatus> = new Set(['active', 'quota_exhausted', 'refreshing']);
/** A token with less life left than this is not handed out without a refresh first. */
const MIN_VALID_MS = 30_000;
const POLL_MS = 100;

/** A library caller's account id (the HTTP routes parse their own): a positive integer, else a 400-kind error naming it, not PostgreSQL's. */
function accountId(id: unknown): number {
  if (typeof id === 'number' && Number.isSafeInteger(id) && id > 0) return id;
  const got = typeof id === 'string' ? JSON.stringify(id.slice(0, 40)) : typeof id === 'number' ? String(id) : typeof id;
  throw new InvalidInput([{ field: 'id', message: `an account id is a positive integer (got ${got})` }]);
}

/**
 * The hot path's side of token refresh, for the gateway (library call or HTTP). Every refresh
 * it causes goes through the same guard as the scheduler's (TokenRefreshService → Refresher):
 * in-flight join, concurrency limit, rate limit, cluster-wide lease, version check.
 */
export class TokenApi {
  private readonly am: AccountMetrics;

  constructor(
    private readonly accounts: Accounts,
    private readonly service: TokenRefreshService,
    private readonly clock: Clock,
    private readonly s: TokenApiSettings,
    metrics: Metrics,
    private readonly log: Logger,
    /** The replica's token cache (token-cache.ts): a fresh token without a PostgreSQL round trip. */
    private readonly cache: TokenCache,
  ) {
    this.am = metrics.group(AccountMetrics);
  }

  /**
   * A token valid now. Inside the refresh margin but still good for a while: returned at once
   * and refreshed in the background. About to die or dead: refreshed first (or, when another
   * replica holds the lease, waited for up to `auth.hot_path_wait`).
   */
  async getAccessToken(id: number): Promise<AccessToken> {
    const acct = await this.open(id);
    const now = this.clock.now();
    const exp = acct.tokenExpiresAt?.getTime();
    if (exp === undefined || exp - now > this.s.marginMs) return this.view(acct);
    const minValid = Math.min(MIN_VALID_MS, this.s.marginMs / 2);
    if (exp - now > minValid) {
      if (acct.hasRefreshToken) void this.service.refreshNow(id, 'hot_path', acct.tokenVersion).catch(() => undefined);
      return this.view(acct);
    }
    if (!acct.hasRefreshToken)
      throw new AccountUnavailable(id, 'no_refresh_token', `account ${id}: access token expired at ${acct.tokenExpiresAt!.toISOString()} and there is no refresh token; re-authorize it`);
    const started = this.clock.now();
    const outcome = await this.service.refreshNow(id, 'hot_path', acct.tokenVersion);
    if (outcome.result === 'lease_held') {
      await this.waitForNewVersion(id, acct.tokenVersion);
      this.am.refreshWait.observe({ trigger: 'hot_path_wait' }, (this.clock.now() - started) / 1000);
    } else if (outcome.result !== 'refreshed' && outcome.result !== 'superseded') {
      const why = outcome.result === 'skipped' ? outcome.reason : `${outcome.result}: ${outcome.reason}`;
      throw new AccountUnavailable(id, 'refresh_failed', `account ${id}: access token expired and the refresh failed (${why})`, 'status' in outcome ? outcome.status : undefined);
    }
    // Read again, past this replica's cache: the refresh (ours or another replica's) has committed.
    this.cache.invalidate(id);
    const fresh = await this.open(id);
    if (fresh.tokenExpiresAt && fresh.tokenExpiresAt.getTime() <= this.clock.now()) {
      throw new AccountUnavailable(id, 'timeout', `account ${id}: access token expired and no refreshed token arrived within ${this.s.waitMs}ms (auth.hot_path_wait)`);
    }
    return this.view(fresh);
  }

  /**
   * The gateway got a 401 from upstream with this account's token: cool the account down
   * (`auth.oauth_401_cooldown`) and refresh it through the guard. Credentials are never
   * rewritten from here, so a rotated token cannot be rolled back.
   */
  async reportUnauthorized(id: number, tokenVersion?: number): Promise<UnauthorizedReport> {
    const acct = await this.accounts.get(accountId(id));
    if (!acct) throw new AccountUnavailable(id, 'not_found', `account ${id} does not exist`);
    if (tokenVersion !== undefined && tokenVersion !== acct.token_version) {
      return { account_id: id, stale: true, cooldown_until: null, refresh: null, token_version: acct.token_version };
    }
    const until = this.clock.now() + this.s.cooldownMs;
    await this.accounts.coolDown(id, until, 'oauth_401');
    this.am.unauthorizedCooldowns.inc({ platform: acct.platform });
    this.log.warn({ account_id: id, platform: acct.platform, cooldown_until: new Date(until).toISOString() }, 'upstream 401: account cooled down, refresh requested');
    if (!acct.has_refresh_token || !SERVING.has(acct.status)) {
      return { account_id: id, stale: false, cooldown_until: new Date(until).toISOString(), refresh: null, token_version: acct.token_version };
    }
    const refresh = this.service.refreshNow(id, 'unauthorized', acct.token_version);
    const result = await Promise.race([refresh.then((o) => o.result), sleep(this.clock, this.s.waitMs).then(() => 'pending' as const)]);
    const after = await this.accounts.get(id);
    return { account_id: id, stale: false, cooldown_until: after?.temp_unschedulable_until ?? null, refresh: result, token_version: after?.token_version ?? acct.token_version };
  }

  /**
   * Acknowledges a change that must stop tokens being served (disable, new credentials): returns
   * once no replica's cache can serve what it read before the change committed (`auth.token_cache_max_age`).
   */
  async settle(id: number): Promise<void> {
    this.cache.invalidate(id);
    // Looked at again after each wait: a peer's ping (with its larger age) delivered meanwhile extends it.
    // Real time, not the injected clock: the caches it waits out (every replica's) age in real time.
    const began = monotonic();
    for (let waited = 0, want = this.cache.settleMs; want > waited; waited = monotonic() - began, want = this.cache.settleMs) {
      await delay(want - waited);
    }
  }

  private async open(id: number): Promise<TokenRow> {
    const acct = await this.cache.get(accountId(id));
    if (!acct) throw new AccountUnavailable(id, 'not_found', `account ${id} does not exist`);
    if (!SERVING.has(acct.status)) throw new AccountUnavailable(id, 'unavailable', `account ${id} is ${acct.status}; it serves no tokens until an admin fixes it`, acct.status);
    return acct;
  }

  private async waitForNewVersion(id: number, version: number): Promise<void> {
    const end = this.clock.now() + this.s.waitMs;
    while (this.clock.now() < end) {
      if ((await this.accounts.tokenVersion(id)) !== version) return;
      await sleep(this.clock, POLL_MS);
    }
  }

  private view(a: TokenRow): AccessToken {
    return { account_id: a.id, access_token: a.accessToken, token_expires_at: a.tokenExpiresAt?.toISOString() ?? null, token_version: a.tokenVersion, status: a.status };
  }
}
