// The hot path's two statements: the lean read of what a token answer is made of (no proxy join,
// no metadata), and the token cache's freshness ping. accounts.ts keeps every write.
import type { Db } from '../../../store/db.js';
import { num, toDate } from '../../../store/db.js';
import type { SecretBox } from '../../../store/secret-box.js';
import { WAKE_DETAIL_CHANNEL } from '../../../coordination/wake-listener.js';
import type { AccountStatus } from './account-types.js';

/** What the token answer is made of, credentials opened. */
export interface TokenRow {
  id: number;
  status: AccountStatus;
  tokenVersion: number;
  tokenExpiresAt: Date | null;
  accessToken: string;
  hasRefreshToken: boolean;
}

export class TokenReads {
  constructor(
    private readonly db: Db,
    private readonly box: SecretBox,
  ) {}

  async load(id: number): Promise<TokenRow | null> {
    const { rows } = await this.db.query(`SELECT id, status, token_version, token_expires_at, credentials_sealed FROM accounts WHERE id = $1`, [id]);
    const r = rows[0];
    if (!r) return null;
    const c = JSON.parse(this.box.open(String(r.credentials_sealed), 'account-credentials')) as { access_token: string; refresh_token?: string | null };
    return {
      id: num(r.id),
      status: r.status as AccountStatus,
      tokenVersion: num(r.token_version),
      tokenExpiresAt: toDate(r.token_expires_at),
      accessToken: c.access_token,
      hasRefreshToken: Boolean(c.refresh_token),
    };
  }

  /**
   * A notification to the replicas' own wake-up detail channel, `tokens:ping:<payload>`, committed without
   * waiting for the WAL flush (it carries nothing to keep): its echo on this replica's listener
   * proves that every notification committed before it was delivered (commit order).
   */
  async ping(payload: string): Promise<void> {
    await this.db.query(`SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)`, [WAKE_DETAIL_CHANNEL, `tokens:ping:${payload}`]);
  }
}
