import { createHash, randomBytes } from 'node:crypto';
import type { Db } from '../../../store/db.js';
import { toDate } from '../../../store/db.js';

const hash = (token: string) => createHash('sha256').update(token).digest('hex');
/** Which admin token minted a session (domain-separated from the session hash; the admin token is high-entropy). */
export const adminFingerprint = (adminToken: string) => createHash('sha256').update(`relay-jobs admin session\0${adminToken}`).digest('hex').slice(0, 32);

/** Admin sessions (codex-proxy-rs `admin_sessions`): only a hash of each token is stored. */
// Small batches keep each transaction short however many sessions expired at once.
const DELETE_EXPIRED = `DELETE FROM admin_sessions WHERE id IN (SELECT id FROM admin_sessions WHERE expires_at <= clock_timestamp() LIMIT $1)`;

export class AdminSessions {
  constructor(private readonly db: Db) {}

  /** Deletes up to `batch` expired sessions; returns how many. */
  async deleteExpired(batch: number): Promise<number> {
    return (await this.db.query(DELETE_EXPIRED, [batch])).rowCount;
  }

  /** A session bound to `adminToken` (the one that minted it): it verifies only while that is the admin token. */
  async create(ttlMinutes: number, adminToken: string): Promise<{ id: string; token: string; expiresAt: Date }> {
    const token = randomBytes(32).toString('base64url');
    const id = randomBytes(8).toString('hex');
    const { rows } = await this.db.query<{ expires_at: unknown }>(
      `INSERT INTO admin_sessions (id, token_hash, expires_at, admin_fingerprint) VALUES ($1, $2, clock_timestamp() + make_interval(mins => $3::int), $4) RETURNING expires_at`,
      [id, hash(token), ttlMinutes, adminFingerprint(adminToken)],
    );
    return { id, token, expiresAt: toDate(rows[0]!.expires_at)! };
  }

  /** Live, and minted by the current admin token: a rotated admin token ends every session of the old one. */
  async verify(token: string, adminToken: string | undefined): Promise<boolean> {
    if (!adminToken) return false;
    const { rows } = await this.db.query('SELECT 1 FROM admin_sessions WHERE token_hash = $1 AND expires_at > clock_timestamp() AND admin_fingerprint = $2', [
      hash(token),
      adminFingerprint(adminToken),
    ]);
    return rows.length === 1;
  }

  /**
   * Which of `tokens` are live sessions of the current admin token, in one query: the console's
   * event streams re-check their sessions with it every 250 ms (a revoke on another replica ends them within a second).
   */
  async liveTokens(tokens: string[], adminToken: string | undefined): Promise<Set<string>> {
    if (!adminToken || !tokens.length) return new Set();
    const byHash = new Map(tokens.map((t) => [hash(t), t]));
    const { rows } = await this.db.query<{ token_hash: string }>(
      'SELECT token_hash FROM admin_sessions WHERE token_hash IN (SELECT jsonb_array_elements_text($1::jsonb)) AND expires_at > clock_timestamp() AND admin_fingerprint = $2',
      [JSON.stringify([...byHash.keys()]), adminFingerprint(adminToken)],
    );
    return new Set(rows.map((r) => byHash.get(r.token_hash)!));
  }

  /** Ends every admin session (all replicas: they read the same table). Returns how many. */
  async revokeAll(): Promise<number> {
    return (await this.db.query('DELETE FROM admin_sessions')).rowCount;
  }

  async revoke(token: string): Promise<boolean> {
    const { rowCount } = await this.db.query('DELETE FROM admin_sessions WHERE token_hash = $1', [hash(token)]);
    return rowCount === 1;
  }
}
