import type { Report } from './store/ops-reports.js';
import type { Ops } from './ops-services.js';
import { fold } from './catalogue.js';
import { chooseGranularity } from './granularity.js';
import { previousOccurrence } from './report-schedule.js';

export interface Rendered {
  empty: boolean;
  subject: string;
  text: string;
  html: string;
  note: string;
}

const HOUR = 3_600_000;
const esc = (s: string) => s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);

function page(title: string, rows: Array<[string, string]>): { text: string; html: string } {
  const text = `${title}\n\n${rows.map(([k, v]) => `${k}: ${v}`).join('\n')}\n`;
  const html = `<html><body><h2>${esc(title)}</h2><table>${rows.map(([k, v]) => `<tr><th align="left">${esc(k)}</th><td>${esc(v)}</td></tr>`).join('')}</table></body></html>`;
  return { text, html };
}

/** One report occurrence's content; `empty` reports are recorded and not sent. */
export async function renderReport(ops: Ops, r: Report, occurrence: Date, bucketMs: number): Promise<Rendered> {
  const to = occurrence;
  const period = (ms: number) => new Date(to.getTime() - ms);
  if (r.kind === 'daily_summary' || r.kind === 'weekly_summary') {
    const from = period(r.kind === 'daily_summary' ? 24 * HOUR : 7 * 24 * HOUR);
    const g = chooseGranularity(from, to);
    const points = await ops.series.range(g.granularity, from, to);
    const seconds = g.granularity === 'minute' ? bucketMs / 1000 : g.granularity === 'hour' ? 3600 : 86400;
    const v = (s: string) => fold(s, points, seconds);
    const fmt = (x: number | null, pct = false) => (x === null ? 'unknown' : pct ? `${(x * 100).toFixed(2)}%` : String(Math.round(x * 100) / 100));
    const title = `${r.kind === 'daily_summary' ? 'Daily' : 'Weekly'} summary ${from.toISOString()} – ${to.toISOString()}`;
    const body = page(title, [
      ['requests', fmt(v('request_count'))],
      ['errors (5xx)', fmt(v('error_count'))],
      ['error rate', fmt(v('error_rate'), true)],
      ['rate limited (429)', fmt(v('rate_limit_count'))],
      ['input tokens', fmt(v('input_tokens'))],
      ['output tokens', fmt(v('output_tokens'))],
      ['p95 latency ms (worst bucket)', fmt(v('p95_latency_ms'))],
      ['accounts in error (now)', fmt(v('accounts_error'))],
      ['buckets collected', `${points.length} (${g.granularity})`],
    ]);
    return { empty: points.length === 0, subject: `[relay-jobs] ${r.name}: ${title}`, ...body, note: `${points.length} ${g.granularity} buckets` };
  }
  if (r.kind === 'error_digest') {
    const from = previousOccurrence(r.cron, r.timezone, to) ?? period(24 * HOUR);
    const byStatus = await ops.reports.errorsByStatus(from, to);
    const total = byStatus.reduce((a, b) => a + b.count, 0);
    const min = r.params.min_count ?? 1;
    const title = `Error digest ${from.toISOString()} – ${to.toISOString()}: ${total} errors`;
    const body = page(
      title,
      byStatus.map((s) => [`HTTP ${s.status}`, String(s.count)]),
    );
    return { empty: total < min, subject: `[relay-jobs] ${r.name}: ${total} errors`, ...body, note: `${total} errors (minimum ${min})` };
  }
  const from = period(24 * HOUR);
  const threshold = r.params.error_rate_threshold ?? 0.1;
  const bad = await ops.reports.unhealthyAccounts(from, to, threshold);
  const title = `Account health ${from.toISOString()} – ${to.toISOString()}: ${bad.length} account(s) above ${(threshold * 100).toFixed(1)}% errors`;
  const body = page(
    title,
    bad.map((a) => [`account ${a.account_id}`, `${(a.error_rate * 100).toFixed(2)}% of ${a.requests} requests`]),
  );
  return { empty: bad.length === 0, subject: `[relay-jobs] ${r.name}: ${bad.length} unhealthy account(s)`, ...body, note: `${bad.length} accounts above ${threshold}` };
}
