import { positiveDuration } from '../../config/schema.js';
import { jobsFor } from '../../modules/define-job.js';
import type { AccountsServices } from './wiring.js';
import { enqueueSnapshotEvent } from '../scheduler-snapshot/index.js';
import type { ProxyLink, Proxies } from './store/proxies.js';
import type { Db } from '../../store/db.js';
import type { Logger } from '../../telemetry/logger.js';
import { AccountMetrics } from './metrics.js';

export type FallbackTarget = { kind: 'direct' } | { kind: 'proxy'; id: number } | { kind: 'none'; reason: string };

function live(p: ProxyLink | undefined, nowMs: number): boolean {
  return !!p && p.status === 'active' && (p.expiresAt === null || p.expiresAt.getTime() > nowMs);
}

const defineJob = jobsFor<AccountsServices>();

/**
 * Where the accounts of an expired proxy go: nowhere (`none`), direct, or the first live proxy
 * down the backup chain. The walk keeps a visited set, so a chain that loops ends with a reason
 * instead of spinning.
 */
export function resolveFallback(links: Map<number, ProxyLink>, expiredId: number, nowMs: number): FallbackTarget {
  const start = links.get(expiredId);
  if (!start) return { kind: 'none', reason: `proxy ${expiredId} not found` };
  if (start.fallbackMode === 'none') return { kind: 'none', reason: 'fallback_mode is none' };
  if (start.fallbackMode === 'direct') return { kind: 'direct' };
  const visited = new Set([expiredId]);
  let next = start.backupProxyId;
  if (next === null) return { kind: 'none', reason: 'fallback_mode is proxy but no backup_proxy_id is set' };
  while (next !== null) {
    if (visited.has(next)) return { kind: 'none', reason: `backup chain loops back to proxy ${next} without a live proxy: ${[...visited, next].join(' → ')}` };
    visited.add(next);
    const p = links.get(next);
    if (live(p, nowMs)) return { kind: 'proxy', id: next };
    next = p?.backupProxyId ?? null;
  }
  return { kind: 'none', reason: `no live proxy in the backup chain ${[...visited].join(' → ')}` };
}

/** Moves a renewed proxy's accounts back (also the manual restore). Returns the account ids moved. */
export async function restoreProxy(db: Db, proxies: Proxies, id: number, reason: 'renewed' | 'manual'): Promise<number[]> {
  return db.tx(async (q) => {
    await proxies.markActive(q, id);
    const moved = await proxies.returnAccounts(q, id);
    if (moved.length) await enqueueSnapshotEvent(q, 'account_bulk_changed', { reason: `proxy_restored_${reason}`, proxy_id: id, account_ids: moved });
    return moved;
  });
}

async function expireOne(db: Db, proxies: Proxies, id: number, log: Logger): Promise<{ moved: number[]; target: FallbackTarget } | null> {
  return db.tx(async (q) => {
    if (!(await proxies.markExpired(q, id))) return null;
    const target = resolveFallback(await proxies.links(q), id, (await proxies.dbNow(q)).getTime());
    if (target.kind === 'none') {
      log.warn({ proxy_id: id, reason: target.reason }, 'proxy expired; its accounts stay on it');
      return { moved: [], target };
    }
    const moved = await proxies.moveAccounts(q, id, target.kind === 'direct' ? null : target.id);
    if (moved.length) await enqueueSnapshotEvent(q, 'account_bulk_changed', { reason: 'proxy_expired', proxy_id: id, fallback: target.kind === 'direct' ? 'direct' : target.id, account_ids: moved });
    return { moved, target };
  });
}

/**
 * proxy_expiry: an expired proxy is marked expired and its accounts move to its fallback,
 * remembering their original proxy; when that proxy is renewed (its expiry moved into the
 * future), its accounts return automatically. Proxies expiring soon are a metric.
 */
export const proxyExpiryJob = defineJob({
  name: 'proxy_expiry',
  description: 'Expires proxies past their date, moves their accounts to the fallback, and moves them back when the proxy is renewed',
  scope: 'cluster',
  options: { expiring_soon: positiveDuration.optional() },
  defaults: { enabled: true, every: '1m', timeout: '1m' },
  needs: ['proxies', 'metrics'],
  async run(ctx, { proxies, metrics }, o) {
    const am = metrics.group(AccountMetrics);
    const soonMs = o.expiring_soon ?? 7 * 86_400_000;
    let items = 0;
    const notes: string[] = [];
    for (const id of await proxies.dueForExpiry()) {
      ctx.signal.throwIfAborted();
      const r = await expireOne(ctx.db, proxies, id, ctx.log);
      if (!r) continue;
      items++;
      am.proxyAccountsMoved.inc({ direction: 'to_fallback' }, r.moved.length);
      const where = r.target.kind === 'direct' ? 'direct' : r.target.kind === 'proxy' ? `proxy ${r.target.id}` : `nowhere (${r.target.reason})`;
      notes.push(`proxy ${id} expired, ${r.moved.length} accounts → ${where}`);
      ctx.log.info({ proxy_id: id, accounts_moved: r.moved.length, fallback: where }, 'proxy expired');
    }
    for (const id of await proxies.renewed()) {
      ctx.signal.throwIfAborted();
      const moved = await restoreProxy(ctx.db, proxies, id, 'renewed');
      items++;
      am.proxyAccountsMoved.inc({ direction: 'restored' }, moved.length);
      notes.push(`proxy ${id} renewed, ${moved.length} accounts back`);
      ctx.log.info({ proxy_id: id, accounts_restored: moved.length }, 'proxy renewed; accounts returned to it');
    }
    const { soon, expired } = await proxies.countExpiringWithin(soonMs);
    am.proxiesExpiringSoon.set(soon);
    am.proxiesExpired.set(expired);
    return { items, note: notes.join('; ') || undefined };
  },
});
