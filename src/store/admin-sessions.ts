import { createHash, randomBytes } from 'node:crypto';
import type { Db } from './db.js';
import { toDate } from './db.js';

const hash = (token: string) => createHash('sha256').update(token).digest('hex');

/** Admin sessions (codex-proxy-rs `admin_sessions`): only a hash of each token is stored. */
// Small batches keep each transaction short however many sessions expired at once.
const DELETE_EXPIRED = `DELETE FROM admin_sessions WHERE id IN (SELECT id FROM admin_sessions WHERE expires_at <= clock_timestamp() LIMIT $1)`;

export class AdminSessions {
  constructor(private readonly db: Db) {}

  /** Deletes up to `batch` expired sessions; returns how many. */
  async deleteExpired(batch: number): Promise<number> {
    return (await this.db.query(DELETE_EXPIRED, [batch])).rowCount;
  }

  async create(ttlMinutes: number): Promise<{ id: string; token: string; expiresAt: Date }> {
    const token = randomBytes(32).toString('base64url');
    const id = randomBytes(8).toString('hex');
    const { rows } = await this.db.query<{ expires_at: unknown }>(
      `INSERT INTO admin_sessions (id, token_hash, expires_at) VALUES ($1, $2, clock_timestamp() + make_interval(mins => $3::int)) RETURNING expires_at`,
      [id, hash(token), ttlMinutes],
    );
    return { id, token, expiresAt: toDate(rows[0]!.expires_at)! };
  }

  async verify(token: string): Promise<boolean> {
    const { rows } = await this.db.query('SELECT 1 FROM admin_sessions WHERE token_hash = $1 AND expires_at > clock_timestamp()', [hash(token)]);
    return rows.length === 1;
  }

  async revoke(token: string): Promise<boolean> {
    const { rowCount } = await this.db.query('DELETE FROM admin_sessions WHERE token_hash = $1', [hash(token)]);
    return rowCount === 1;
  }
}
