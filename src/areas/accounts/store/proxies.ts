import type { Db, Queryable } from '../../../store/db.js';
import { iso, num, toDate } from '../../../store/db.js';
import type { SecretBox } from '../../../store/secret-box.js';
import { SetClause } from '../../../store/set-clause.js';
import { redactUrl } from '../../../config/redact-url.js';

export type FallbackMode = 'none' | 'proxy' | 'direct';
export type ProxyStatus = 'active' | 'expired' | 'disabled';

export interface ProxyView {
  id: number;
  name: string;
  /** The URL with any password masked; the full URL is sealed and never returned. */
  url: string;
  status: ProxyStatus;
  expires_at: string | null;
  fallback_mode: FallbackMode;
  backup_proxy_id: number | null;
  expired_at: string | null;
  accounts: number;
  fallback_accounts: number;
  created_at: string;
  updated_at: string;
}

/** A proxy as the backup-chain walk sees it. */
export interface ProxyLink {
  id: number;
  status: ProxyStatus;
  expiresAt: Date | null;
  fallbackMode: FallbackMode;
  backupProxyId: number | null;
}

export interface ProxyInput {
  name?: string;
  url?: string;
  expiresAt?: Date | null;
  fallbackMode?: FallbackMode;
  backupProxyId?: number | null;
  status?: 'active' | 'disabled';
}

const URL_PURPOSE = 'proxy-url';
const VIEW = `p.id, p.name, p.url_display, p.status, p.expires_at, p.fallback_mode, p.backup_proxy_id, p.expired_at, p.created_at, p.updated_at,
  (SELECT count(*) FROM accounts a WHERE a.proxy_id = p.id) AS accounts,
  (SELECT count(*) FROM accounts a WHERE a.proxy_fallback_origin_id = p.id) AS fallback_accounts`;

function toView(r: Record<string, unknown>): ProxyView {
  return {
    id: num(r.id),
    name: String(r.name),
    url: String(r.url_display),
    status: r.status as ProxyStatus,
    expires_at: iso(r.expires_at),
    fallback_mode: r.fallback_mode as FallbackMode,
    backup_proxy_id: r.backup_proxy_id === null ? null : num(r.backup_proxy_id),
    expired_at: iso(r.expired_at),
    accounts: num(r.accounts),
    fallback_accounts: num(r.fallback_accounts),
    created_at: iso(r.created_at)!,
    updated_at: iso(r.updated_at)!,
  };
}

/** The proxies table and the account moves that proxy expiry and restore make. */
export class Proxies {
  constructor(
    private readonly db: Db,
    private readonly box: SecretBox,
  ) {}

  async create(p: Required<Pick<ProxyInput, 'name' | 'url'>> & ProxyInput): Promise<ProxyView> {
    const { rows } = await this.db.query(`INSERT INTO proxies (name, url_sealed, url_display, expires_at, fallback_mode, backup_proxy_id, status) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`, [
      p.name,
      this.box.seal(p.url, URL_PURPOSE),
      redactUrl(p.url),
      p.expiresAt ?? null,
      p.fallbackMode ?? 'none',
      p.backupProxyId ?? null,
      p.status ?? 'active',
    ]);
    return (await this.get(num(rows[0]!.id)))!;
  }

  async get(id: number): Promise<ProxyView | null> {
    const { rows } = await this.db.query(`SELECT ${VIEW} FROM proxies p WHERE p.id = $1`, [id]);
    return rows[0] ? toView(rows[0]) : null;
  }

  async list(): Promise<ProxyView[]> {
    const { rows } = await this.db.query(`SELECT ${VIEW} FROM proxies p ORDER BY p.id`);
    return rows.map(toView);
  }

  async exists(id: number): Promise<boolean> {
    // rows, not rowCount: PGlite counts a SELECT as 0 affected rows (embedded mode).
    return (await this.db.query(`SELECT 1 FROM proxies WHERE id = $1`, [id])).rows.length === 1;
  }

  /** An edit. A renewed expiry on an expired proxy does not reactivate it here: proxy_expiry does, and moves its accounts back. */
  async update(id: number, p: ProxyInput): Promise<ProxyView | null> {
    const c = new SetClause(id);
    if (p.name !== undefined) c.set('name', p.name);
    if (p.url !== undefined) c.set('url_sealed', this.box.seal(p.url, URL_PURPOSE)).set('url_display', redactUrl(p.url));
    if (p.expiresAt !== undefined) c.set('expires_at', p.expiresAt);
    if (p.fallbackMode !== undefined) c.set('fallback_mode', p.fallbackMode);
    if (p.backupProxyId !== undefined) c.set('backup_proxy_id', p.backupProxyId);
    if (p.status !== undefined) c.set('status', p.status);
    if (!c.empty && (await this.db.query(`UPDATE proxies SET ${c} WHERE id = $1`, c.params)).rowCount === 0) return null;
    return this.get(id);
  }

  /** Every proxy's chain fields, for the backup-chain walk (a few thousand rows at most). */
  async links(q: Queryable = this.db): Promise<Map<number, ProxyLink>> {
    const { rows } = await q.query(`SELECT id, status, expires_at, fallback_mode, backup_proxy_id FROM proxies`);
    return new Map(
      rows.map((r) => [
        num(r.id),
        {
          id: num(r.id),
          status: r.status as ProxyStatus,
          expiresAt: toDate(r.expires_at),
          fallbackMode: r.fallback_mode as FallbackMode,
          backupProxyId: r.backup_proxy_id === null ? null : num(r.backup_proxy_id),
        },
      ]),
    );
  }

  async dbNow(q: Queryable = this.db): Promise<Date> {
    return toDate((await q.query(`SELECT clock_timestamp() AS t`)).rows[0]!.t)!;
  }

  /** Active proxies past their expiry. */
  async dueForExpiry(): Promise<number[]> {
    const { rows } = await this.db.query(`SELECT id FROM proxies WHERE status = 'active' AND expires_at <= clock_timestamp() ORDER BY id`);
    return rows.map((r) => num(r.id));
  }

  /** Expired proxies whose expiry has been moved into the future (renewed). */
  async renewed(): Promise<number[]> {
    const { rows } = await this.db.query(`SELECT id FROM proxies WHERE status = 'expired' AND (expires_at IS NULL OR expires_at > clock_timestamp()) ORDER BY id`);
    return rows.map((r) => num(r.id));
  }

  /** Locks the row and marks it expired; false when another writer got there first (or it was renewed). */
  async markExpired(q: Queryable, id: number): Promise<boolean> {
    const { rowCount } = await q.query(
      `UPDATE proxies SET status = 'expired', expired_at = clock_timestamp(), updated_at = clock_timestamp() WHERE id = $1 AND status = 'active' AND expires_at <= clock_timestamp()`,
      [id],
    );
    return rowCount === 1;
  }

  async markActive(q: Queryable, id: number): Promise<void> {
    await q.query(`UPDATE proxies SET status = 'active', expired_at = NULL, updated_at = clock_timestamp() WHERE id = $1`, [id]);
  }

  /** Moves the accounts on `from` to `to` (null = direct), keeping the first origin so a second hop can still be undone. */
  async moveAccounts(q: Queryable, from: number, to: number | null): Promise<number[]> {
    const { rows } = await q.query(
      `UPDATE accounts SET proxy_fallback_origin_id = COALESCE(proxy_fallback_origin_id, proxy_id), proxy_id = $2, updated_at = clock_timestamp()
       WHERE proxy_id = $1 RETURNING id`,
      [from, to],
    );
    return rows.map((r) => num(r.id));
  }

  /** Returns every account whose original proxy is `id` back to it. */
  async returnAccounts(q: Queryable, id: number): Promise<number[]> {
    const { rows } = await q.query(`UPDATE accounts SET proxy_id = $1, proxy_fallback_origin_id = NULL, updated_at = clock_timestamp() WHERE proxy_fallback_origin_id = $1 RETURNING id`, [id]);
    return rows.map((r) => num(r.id));
  }

  async countExpiringWithin(ms: number): Promise<{ soon: number; expired: number }> {
    const { rows } = await this.db.query(
      `SELECT count(*) FILTER (WHERE status = 'active' AND expires_at > clock_timestamp() AND expires_at <= clock_timestamp() + $1 * interval '1 millisecond') AS soon,
              count(*) FILTER (WHERE status = 'expired') AS expired FROM proxies`,
      [ms],
    );
    return { soon: num(rows[0]!.soon), expired: num(rows[0]!.expired) };
  }
}
