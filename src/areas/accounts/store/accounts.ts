// Every statement on `accounts` (create, import, update, the views, the refresh reads and writes, the 401
// cooldown) in one repository, so the token-version rule is checked in one file; its types are in account-types.ts.
import type { Db, Queryable } from '../../../store/db.js';
import { num, toDate } from '../../../store/db.js';
import { VIEW_COLUMNS, compact, metadataOf, toView } from './account-rows.js';
import type { SecretBox } from '../../../store/secret-box.js';
import { SetClause } from '../../../store/set-clause.js';
import { beginRefreshSql, CLEAR_SENT, MARK_SENT, REFRESH_CANDIDATES_SQL, withRelease } from './account-refresh-sql.js';

import type {
  AccountStatus,
  Credentials,
  AccountView,
  RefreshCandidate,
  AccountSecrets,
  NewAccount,
  AccountPatch,
  LeaseRelease,
  RefreshConditions,
  RefreshBegin,
  AccountMetadata,
} from './account-types.js';

export * from './account-types.js';

const CREDENTIALS = 'account-credentials';
/** The refresh lease to drop in the same statement as the account write that ends a refresh. */
export class Accounts {
  constructor(
    private readonly db: Db,
    private readonly box: SecretBox,
  ) {}

  seal(c: Credentials): string {
    return this.box.seal(JSON.stringify({ access_token: c.access_token, refresh_token: c.refresh_token ?? null, id_token: c.id_token ?? null }), CREDENTIALS);
  }

  /** An import: every account or none, in one transaction; `progress` every 1,000. Returns the new ids in order. */
  async importAll(items: NewAccount[], progress: (done: number) => void): Promise<number[]> {
    return this.db.tx(async (q) => {
      const ids: number[] = [];
      for (const [i, a] of items.entries()) {
        ids.push((await this.create(a, q)).id);
        if ((i + 1) % 1000 === 0) progress(i + 1);
      }
      return ids;
    });
  }

  async create(a: NewAccount, q: Queryable = this.db): Promise<AccountView> {
    const { rows } = await q.query(
      `INSERT INTO accounts (platform, name, credentials_sealed, has_refresh_token, token_expires_at, proxy_id, expires_at, auto_pause_on_expired, schedulable, status, metadata)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb) RETURNING ${VIEW_COLUMNS}`,
      [
        a.platform,
        a.name,
        this.seal(a.credentials),
        Boolean(a.credentials.refresh_token),
        a.tokenExpiresAt,
        a.proxyId ?? null,
        a.expiresAt ?? null,
        a.autoPauseOnExpired ?? false,
        a.schedulable ?? true,
        a.status ?? 'active',
        compact(a.metadata ?? {}),
      ],
    );
    return toView(rows[0]!);
  }

  async get(id: number): Promise<AccountView | null> {
    const { rows } = await this.db.query(`SELECT ${VIEW_COLUMNS} FROM accounts WHERE id = $1`, [id]);
    return rows[0] ? toView(rows[0]) : null;
  }

  async list(f: { status?: string; platform?: string; limit: number; afterId?: number }): Promise<AccountView[]> {
    const { rows } = await this.db.query(
      `SELECT ${VIEW_COLUMNS} FROM accounts
       WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR platform = $2) AND id > $3
       ORDER BY id LIMIT $4`,
      [f.status ?? null, f.platform ?? null, f.afterId ?? 0, f.limit],
    );
    return rows.map(toView);
  }

  /** An admin edit. New credentials bump the version and clear the refresh failure state. */
  async update(id: number, p: AccountPatch): Promise<AccountView | null> {
    const c = new SetClause(id);
    if (p.name !== undefined) c.set('name', p.name);
    if (p.proxyId !== undefined) c.set('proxy_id', p.proxyId).raw('proxy_fallback_origin_id = NULL');
    if (p.expiresAt !== undefined) c.set('expires_at', p.expiresAt);
    if (p.autoPauseOnExpired !== undefined) c.set('auto_pause_on_expired', p.autoPauseOnExpired);
    if (p.schedulable !== undefined) c.set('schedulable', p.schedulable);
    if (p.metadata !== undefined) c.set('metadata', compact(p.metadata));
    if (p.status !== undefined) c.set('status', p.status).raw('status_reason = NULL').raw('status_before_refresh = NULL');
    if (p.credentials) {
      c.set('credentials_sealed', this.seal(p.credentials.value)).set('has_refresh_token', Boolean(p.credentials.value.refresh_token)).set('token_expires_at', p.credentials.tokenExpiresAt);
      c.raw('token_version = token_version + 1').raw('refresh_failures = 0').raw('last_refresh_error = NULL');
      if (p.status === undefined) c.raw(`status = CASE WHEN status IN ('expired', 'error', 'refreshing') THEN 'active' ELSE status END`).raw('status_reason = NULL');
    }
    if (c.empty) return this.get(id);
    const { rows } = await this.db.query(`UPDATE accounts SET ${c} WHERE id = $1 RETURNING ${VIEW_COLUMNS}`, c.params);
    return rows[0] ? toView(rows[0]) : null;
  }

  async tokenVersion(id: number): Promise<number | null> {
    const { rows } = await this.db.query(`SELECT token_version FROM accounts WHERE id = $1`, [id]);
    return rows[0] ? num(rows[0].token_version) : null;
  }

  /** Accounts changed since `since` (all when null), for the refresh scheduler's sync. */
  async candidates(since: Date | null): Promise<{ rows: RefreshCandidate[]; dbNow: Date }> {
    const { rows: all } = await this.db.query(REFRESH_CANDIDATES_SQL, [since]);
    const dbNow = toDate(all[0]!.db_now)!;
    const rows = all.filter((r) => r.id !== null && r.id !== undefined);
    return {
      dbNow,
      rows: rows.map((r) => ({
        id: num(r.id),
        platform: String(r.platform),
        status: r.status as AccountStatus,
        hasRefreshToken: Boolean(r.has_refresh_token),
        tokenExpiresAt: toDate(r.token_expires_at),
        tokenVersion: num(r.token_version),
        failures: num(r.refresh_failures),
        lastAttemptAt: toDate(r.last_refresh_attempt_at),
        lastSuccessAt: toDate(r.last_refresh_success_at),
        updatedAt: toDate(r.updated_at)!,
      })),
    };
  }

  /** The account with its credentials opened, and the URL of the proxy its calls go through. */
  async openSecrets(id: number): Promise<AccountSecrets | null> {
    const { rows } = await this.db.query(
      `SELECT a.id, a.platform, a.status, a.token_version, a.token_expires_at, a.credentials_sealed, a.metadata, a.last_refresh_attempt_at, a.last_refresh_error, p.url_sealed
       FROM accounts a LEFT JOIN proxies p ON p.id = a.proxy_id WHERE a.id = $1`,
      [id],
    );
    return rows[0] ? this.toSecrets(rows[0]) : null;
  }

  /**
   * The first of a refresh's two committing statements: reads the account, and if it may be
   * refreshed now (version, status, refresh token, recovery spacing), takes the PostgreSQL
   * refresh lease for `owner` and stamps `refreshing` — the read, the lease and the stamp in one
   * statement. `skip` says why not; `leased` false with no `skip` means another process holds it.
   */
  async beginRefresh(id: number, owner: string, leaseMs: number, c: RefreshConditions): Promise<RefreshBegin> {
    const { rows } = await this.db.query(beginRefreshSql(c.leaseFree.sql), [id, owner, leaseMs, c.expectedVersion ?? null, c.statuses, c.attemptedBefore ?? null, c.leaseFree.windowMs]);
    const r = rows[0];
    if (!r) return { acct: null, skip: 'gone', leased: false, marked: false, unsettled: null };
    const acct = this.toSecrets(r);
    const skip = (r.skip as RefreshBegin['skip']) ?? (acct.credentials.refresh_token ? null : 'no_refresh_token');
    const unsettled = r.refresh_sent_at ? { at: toDate(r.refresh_sent_at)!, ageMs: num(r.sent_age_ms), fingerprint: String(r.refresh_sent_fp), by: String(r.refresh_sent_by) } : null;
    return { acct, skip, leased: r.leased === true, marked: r.marked === true, unsettled };
  }

  /**
   * Records the request about to be sent (fingerprint of the refresh token presented). `sent`
   * false: do not send, because the version moved or (`dead` set) a provider already rejected this
   * refresh token as dead (`dead_refresh_tokens`).
   */
  async markSent(id: number, version: number, fingerprint: string, owner: string): Promise<{ sent: boolean; dead: { reason: string; rejectedAt: Date } | null }> {
    const { rows } = await this.db.query(MARK_SENT, [id, version, fingerprint, owner]);
    const r = rows[0];
    return { sent: r?.sent === true, dead: r?.dead_reason ? { reason: String(r.dead_reason), rejectedAt: toDate(r.dead_at)! } : null };
  }

  /**
   * Forgets a refresh token's dead memo (an admin re-enabled its account: the fault may have been
   * ours, such as a token URL answering a bare 401 for every account). Returns whether one was removed.
   */
  async forgetDeadToken(fingerprint: string): Promise<boolean> {
    const { rowCount } = await this.db.query(`DELETE FROM dead_refresh_tokens WHERE fingerprint = $1`, [fingerprint]);
    return rowCount > 0;
  }

  /** A refresh token the provider rejected as dead for good: remembered by fingerprint, so it is never presented again. */
  async rememberDeadToken(fingerprint: string, platform: string, accountId: number, reason: string): Promise<void> {
    await this.db.query(`INSERT INTO dead_refresh_tokens (fingerprint, platform, account_id, reason) VALUES ($1, $2, $3, $4) ON CONFLICT (fingerprint) DO NOTHING`, [
      fingerprint,
      platform,
      accountId,
      reason.slice(0, 500),
    ]);
  }

  private toSecrets(r: Record<string, unknown>): AccountSecrets {
    return {
      id: num(r.id),
      platform: String(r.platform),
      status: r.status as AccountStatus,
      tokenVersion: num(r.token_version),
      tokenExpiresAt: toDate(r.token_expires_at),
      credentials: JSON.parse(this.box.open(String(r.credentials_sealed), CREDENTIALS)) as Credentials,
      metadata: metadataOf(r.metadata),
      proxyUrl: r.url_sealed ? this.box.open(String(r.url_sealed), 'proxy-url') : null,
      lastAttemptAt: toDate(r.last_refresh_attempt_at),
      lastError: (r.last_refresh_error as string | null) ?? null,
    };
  }

  /** Before the provider call: remember the status to return to, and stamp the attempt. False if the version moved. */
  async markRefreshing(id: number, version: number): Promise<boolean> {
    const { rowCount } = await this.db.query(
      `UPDATE accounts SET status_before_refresh = CASE WHEN status = 'refreshing' THEN COALESCE(status_before_refresh, 'active') ELSE status END,
         status = 'refreshing', last_refresh_attempt_at = clock_timestamp(), updated_at = clock_timestamp()
       WHERE id = $1 AND token_version = $2 AND status IN ('active', 'quota_exhausted', 'refreshing', 'expired', 'error')`,
      [id, version],
    );
    return rowCount === 1;
  }

  /**
   * The compare-and-set every refresh ends with: writes the new credentials only if nobody wrote
   * since `version` was read, and returns the new version (null when another writer won). `at`, the
   * refresher's time (its clock computed the expiry), is the last success short-lived tokens are planned from.
   */
  async writeRefreshed(id: number, version: number, creds: Credentials, expiresAt: Date | null, release?: LeaseRelease, metadata: AccountMetadata = {}, at?: Date) {
    const { rows } = await this.db.query(
      withRelease(
        `UPDATE accounts SET credentials_sealed = $3, has_refresh_token = $4, token_expires_at = $5, token_version = token_version + 1, metadata = metadata || $6::jsonb,
         status = CASE WHEN status = 'refreshing' AND status_before_refresh = 'quota_exhausted' THEN 'quota_exhausted'
                       WHEN status IN ('disabled', 'banned') THEN status ELSE 'active' END,
         status_reason = CASE WHEN status IN ('disabled', 'banned') THEN status_reason ELSE NULL END,
         status_before_refresh = NULL, refresh_failures = 0, last_refresh_error = NULL, last_refresh_success_at = coalesce($7::timestamptz, clock_timestamp()), ${CLEAR_SENT},
         temp_unschedulable_until = CASE WHEN temp_unschedulable_reason = 'oauth_401' OR temp_unschedulable_reason LIKE 'refresh_failing:%' THEN NULL ELSE temp_unschedulable_until END,
         temp_unschedulable_reason = CASE WHEN temp_unschedulable_reason = 'oauth_401' OR temp_unschedulable_reason LIKE 'refresh_failing:%' THEN NULL ELSE temp_unschedulable_reason END,
         updated_at = clock_timestamp()
       WHERE id = $1 AND token_version = $2 RETURNING token_version`,
        release,
        8,
      ),
      [id, version, this.seal(creds), Boolean(creds.refresh_token), expiresAt, compact(metadata), at ?? null, ...(release ? [release.owner] : [])],
    );
    return rows[0] && rows[0].token_version !== null ? num(rows[0].token_version) : null;
  }

  /** A failed attempt: back to the status before it (transient) or to the permanent status, with the reason. */
  async recordFailure(id: number, version: number, errorClass: string, permanent: { status: AccountStatus; reason: string } | null, release?: LeaseRelease): Promise<number> {
    const { rows } = await this.db.query(
      withRelease(
        `UPDATE accounts SET refresh_failures = refresh_failures + 1, last_refresh_error = $3,
         status = CASE WHEN $4::text IS NOT NULL AND status NOT IN ('disabled', 'banned') THEN $4
                       WHEN status = 'refreshing' THEN COALESCE(status_before_refresh, 'active') ELSE status END,
         status_reason = CASE WHEN $4::text IS NOT NULL AND status NOT IN ('disabled', 'banned') THEN $5 ELSE status_reason END,
         status_before_refresh = NULL, ${CLEAR_SENT}, updated_at = clock_timestamp()
       WHERE id = $1 AND token_version = $2 RETURNING refresh_failures`,
        release,
        6,
      ),
      [id, version, errorClass, permanent?.status ?? null, permanent?.reason ?? null, ...(release ? [release.owner] : [])],
    );
    return rows[0] && rows[0].refresh_failures !== null ? num(rows[0].refresh_failures) : 0;
  }

  /** The account's current token version and expiry (after a write found the version moved). */
  async currentToken(id: number): Promise<{ version: number; tokenExpiresAt: Date | null } | null> {
    const { rows } = await this.db.query(`SELECT token_version, token_expires_at FROM accounts WHERE id = $1`, [id]);
    return rows[0] ? { version: num(rows[0].token_version), tokenExpiresAt: toDate(rows[0].token_expires_at) } : null;
  }

  /** A skipped attempt that had stamped `refreshing` (lease lost, shutdown): undo the stamp only. */
  async clearRefreshing(id: number, version: number, release?: LeaseRelease): Promise<void> {
    await this.db.query(
      withRelease(
        `UPDATE accounts SET status = COALESCE(status_before_refresh, 'active'), status_before_refresh = NULL, updated_at = clock_timestamp()
       WHERE id = $1 AND token_version = $2 AND status = 'refreshing' RETURNING token_version`,
        release,
        3,
      ),
      [id, version, ...(release ? [release.owner] : [])],
    );
  }

  /** The OAuth 401 cooldown: unschedulable until `until`, never shortening a longer cooldown. */
  async coolDown(id: number, untilMs: number, reason: string): Promise<boolean> {
    const { rowCount } = await this.db.query(
      `UPDATE accounts SET temp_unschedulable_until = GREATEST(COALESCE(temp_unschedulable_until, '-infinity'), $2::timestamptz),
         temp_unschedulable_reason = $3, updated_at = clock_timestamp() WHERE id = $1`,
      [id, new Date(untilMs), reason],
    );
    return rowCount === 1;
  }

  async countByStatus(): Promise<{ byStatus: Map<string, number>; failing: number }> {
    const { rows } = await this.db.query<{ status: string; n: string; failing: string }>(
      `SELECT status, count(*) AS n, count(*) FILTER (WHERE refresh_failures > 0) AS failing FROM accounts GROUP BY status`,
    );
    return { byStatus: new Map(rows.map((r) => [r.status, num(r.n)])), failing: rows.reduce((s, r) => s + num(r.failing), 0) };
  }
}
