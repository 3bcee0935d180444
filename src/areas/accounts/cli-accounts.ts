import type { Config } from '../../config/load.js';
import { UserError } from '../../config/errors.js';
import { adminRequest } from '../../cli/admin-client.js';
import { table } from '../../cli/table.js';
import { readCredentialFile, type CredentialSource } from './credential-files.js';
import type { AccountView } from './store/account-types.js';

type ApiError = { error?: { message?: string } };

/** `relay-jobs accounts import --from codex|claude|gemini FILE`: the file read here, the account created by the running service. */
export async function importCommand(config: Config, file: string, opts: { from: CredentialSource; name?: string; proxyId?: number; projectId?: string; url?: string; json?: boolean }): Promise<void> {
  // The file first: a wrong file is refused before the service is asked anything.
  const body = readCredentialFile(opts.from, file, { name: opts.name, proxyId: opts.proxyId, projectId: opts.projectId });
  const r = await adminRequest<AccountView & { warnings?: string[] } & ApiError>(config, opts.url, 'POST', '/accounts', body);
  if (r.status !== 201) throw new UserError(`cannot import ${file}: the service refused the account (HTTP ${r.status}): ${r.body.error?.message ?? ''}`);
  if (opts.json) return void process.stdout.write(JSON.stringify(r.body, null, 2) + '\n');
  const a = r.body;
  process.stdout.write(
    table([
      ['ID', 'PLATFORM', 'NAME', 'STATUS', 'TOKEN_EXPIRES_AT'],
      [String(a.id), a.platform, a.name, a.status, a.token_expires_at ?? '-'],
    ]),
  );
  for (const w of a.warnings ?? []) process.stderr.write(`relay-jobs: warning: ${w}\n`);
}

/** The reply of `POST /api/v1/accounts/{id}/test` (any field may be null). */
export interface AccountTestResult {
  account_id: number | null;
  platform: string | null;
  /** The model asked (the route adds it; absent in older replies). */
  model?: string | null;
  ok: boolean | null;
  status: number | null;
  latency_ms: number | null;
  error_class: string | null;
  detail: string | null;
  /** The model's answer text, when it gave one. */
  answer?: string | null;
  request: { method: string | null; url: string | null; headers: Record<string, string> | null; body: unknown; via_proxy?: boolean } | null;
  response: { status: number | null; headers: Record<string, string> | null; body_excerpt: string | null } | null;
  effect: {
    status_before: string | null;
    status_after: string | null;
    temp_unschedulable_until: string | null;
    temp_unschedulable_reason: string | null;
    note: string | null;
  } | null;
}

/** `relay-jobs accounts test <id>`: one test request through the running service. Exit 0 passed, 1 failed (2, a user error, is thrown). */
export async function testCommand(config: Config, id: string, opts: { model?: string; url?: string; json?: boolean }): Promise<number> {
  if (!/^[1-9]\d*$/.test(id)) throw new UserError(`account id ${JSON.stringify(id)}: expected a positive integer`);
  const r = await adminRequest<AccountTestResult & ApiError>(config, opts.url, 'POST', `/accounts/${id}/test`, opts.model ? { model: opts.model } : {});
  if (r.status !== 200 || typeof r.body.ok !== 'boolean') throw new UserError(`cannot test account ${id} (HTTP ${r.status}): ${r.body.error?.message ?? 'unexpected reply'}`);
  process.stdout.write(opts.json ? JSON.stringify(r.body, null, 2) + '\n' : testReport(r.body));
  return r.body.ok ? 0 : 1;
}

const text = (v: unknown): string => (typeof v === 'string' ? v : v === undefined ? '' : JSON.stringify(v));
const indent = (s: string) =>
  s
    .split('\n')
    .map((l) => (l.trim() ? `  ${l.trimEnd()}` : ''))
    .join('\n');

/** The test's result as the operator reads it: the verdict, what was sent (redacted by the server), the answer, the effect on the account. */
export function testReport(t: AccountTestResult): string {
  const lines: string[] = [];
  const verdict = t.ok ? 'PASS' : 'FAIL';
  const http = t.status !== null && t.status !== undefined ? `HTTP ${t.status}` : 'no HTTP answer';
  const latency = t.latency_ms !== null && t.latency_ms !== undefined ? `${t.latency_ms} ms` : '-';
  const model = t.model ? ` (model ${t.model})` : '';
  lines.push(`${verdict}  ${t.platform ?? '?'} account ${t.account_id ?? '?'}${model}: ${http}, latency ${latency}`);
  if (t.error_class || t.detail) lines.push(`  ${[t.error_class, t.detail].filter(Boolean).join(': ')}`);

  lines.push('sent:');
  if (t.request) {
    lines.push(`  ${t.request.method ?? '?'} ${t.request.url ?? '?'}${t.request.via_proxy ? " (through the account's proxy)" : ''}`);
    for (const [k, v] of Object.entries(t.request.headers ?? {})) lines.push(`  ${k}: ${v}`);
    if (t.request.body !== undefined && t.request.body !== null) lines.push(`  body: ${text(t.request.body)}`);
  } else lines.push('  nothing (no request was sent)');

  lines.push('answer:');
  if (t.response) {
    lines.push(`  HTTP ${t.response.status ?? '?'}`);
    if (t.response.body_excerpt?.trim()) lines.push(indent(t.response.body_excerpt.trimEnd()));
  } else lines.push('  none');
  if (t.answer) lines.push(`  the model answered: ${t.answer}`);

  lines.push('effect on the account:');
  const e = t.effect;
  if (e) {
    lines.push(`  status: ${e.status_before ?? '?'} → ${e.status_after ?? '?'}${e.status_after === e.status_before ? ' (unchanged)' : ''}`);
    if (e.temp_unschedulable_until) lines.push(`  temporarily unschedulable until ${e.temp_unschedulable_until}${e.temp_unschedulable_reason ? `: ${e.temp_unschedulable_reason}` : ''}`);
    if (e.note) lines.push(`  ${e.note}`);
  } else lines.push('  none');
  return lines.join('\n') + '\n';
}
