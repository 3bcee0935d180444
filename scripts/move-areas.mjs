#!/usr/bin/env node
/**
 * Moves files into src/areas/<area>/ (issue 22) and rewrites every relative import that pointed
 * at an old place. Data-driven and idempotent: the table below is the whole plan, and running the
 * script again moves nothing already moved and rewrites nothing already right. A branch that added
 * a file in an old place (say src/jobs/accounts/new-thing.ts) is brought over by running it again:
 * folder rows move every file under the old folder, and imports of old paths from anywhere in
 * src/, test/, bench/, examples/, scripts/ and web/src/ are rewritten.
 *
 *   node scripts/move-areas.mjs            move (git mv) and rewrite
 *   node scripts/move-areas.mjs --dry-run  print what it would do
 *
 * How an import is resolved: relative to the file's current folder first; when nothing is there,
 * relative to the folder the file came from (its old path, by the table), then through the table.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, posix } from 'node:path';
import ts from 'typescript';

/** old → new. A row ending in `/` is a folder: every file under it moves, keeping its relative path. Exact file rows win over folder rows. */
const MOVES = [
  // accounts: tokens, refresh, expiry, proxies, the OAuth upstream
  ['src/jobs/accounts/', 'src/areas/accounts/'],
  ['src/store/accounts.ts', 'src/areas/accounts/store/accounts.ts'],
  ['src/store/account-expiry.ts', 'src/areas/accounts/store/account-expiry.ts'],
  ['src/store/account-refresh-sql.ts', 'src/areas/accounts/store/account-refresh-sql.ts'],
  ['src/store/proxies.ts', 'src/areas/accounts/store/proxies.ts'],
  ['src/upstream/oauth-client.ts', 'src/areas/accounts/oauth-client.ts'],
  ['src/upstream/oauth-providers.ts', 'src/areas/accounts/oauth-providers.ts'],
  ['src/upstream/jwt.ts', 'src/areas/accounts/jwt.ts'],
  ['src/http/accounts-routes.ts', 'src/areas/accounts/accounts-routes.ts'],
  ['src/http/proxies-routes.ts', 'src/areas/accounts/proxies-routes.ts'],
  ['src/app/accounts-wiring.ts', 'src/areas/accounts/wiring.ts'],
  // usage: ingest, writer, quota, rollups, recomputes, cleanup, idempotency
  ['src/jobs/usage/', 'src/areas/usage/'],
  ['src/store/usage.ts', 'src/areas/usage/store/usage.ts'],
  ['src/store/quota-usage.ts', 'src/areas/usage/store/quota-usage.ts'],
  ['src/store/rollups.ts', 'src/areas/usage/store/rollups.ts'],
  ['src/store/range-tasks.ts', 'src/areas/usage/store/range-tasks.ts'],
  ['src/store/recompute-tasks.ts', 'src/areas/usage/store/recompute-tasks.ts'],
  ['src/store/idempotency.ts', 'src/areas/usage/store/idempotency.ts'],
  ['src/store/cleanup-tasks.ts', 'src/areas/usage/store/cleanup-tasks.ts'],
  ['src/http/usage-routes.ts', 'src/areas/usage/usage-routes.ts'],
  ['src/app/usage-wiring.ts', 'src/areas/usage/wiring.ts'],
  // notifications: the outbox, its sender and channels (billing and ops send through it)
  ['src/jobs/billing/notifier.ts', 'src/areas/notifications/notifier.ts'],
  ['src/store/notifications.ts', 'src/areas/notifications/store/notifications.ts'],
  ['src/store/channel-budget.ts', 'src/areas/notifications/store/channel-budget.ts'],
  ['src/upstream/notifier.ts', 'src/areas/notifications/channels.ts'],
  // billing: subscriptions, payment orders, holds
  ['src/jobs/billing/', 'src/areas/billing/'],
  ['src/store/billing.ts', 'src/areas/billing/store/billing.ts'],
  ['src/store/billing-lists.ts', 'src/areas/billing/store/billing-lists.ts'],
  ['src/upstream/payment-provider.ts', 'src/areas/billing/payment-provider.ts'],
  ['src/http/billing-routes.ts', 'src/areas/billing/billing-routes.ts'],
  ['src/http/billing-list-routes.ts', 'src/areas/billing/billing-list-routes.ts'],
  ['src/app/billing-wiring.ts', 'src/areas/billing/wiring.ts'],
  // ops: series, alerts, silences, reports, retention
  ['src/jobs/ops/', 'src/areas/ops/'],
  ['src/store/ops-alerts.ts', 'src/areas/ops/store/ops-alerts.ts'],
  ['src/store/ops-metrics.ts', 'src/areas/ops/store/ops-metrics.ts'],
  ['src/store/ops-reports.ts', 'src/areas/ops/store/ops-reports.ts'],
  ['src/store/ops-retention.ts', 'src/areas/ops/store/ops-retention.ts'],
  ['src/store/ops-silences.ts', 'src/areas/ops/store/ops-silences.ts'],
  ['src/telemetry/ops-metrics.ts', 'src/areas/ops/metrics.ts'],
  ['src/http/ops-routes.ts', 'src/areas/ops/ops-routes.ts'],
  ['src/http/ops-alert-routes.ts', 'src/areas/ops/ops-alert-routes.ts'],
  ['src/cli/ops-status.ts', 'src/areas/ops/cli-ops-status.ts'],
  ['src/app/ops-wiring.ts', 'src/areas/ops/wiring.ts'],
  // scheduler snapshot: the gateway's routing cache (not the kernel's src/scheduler/)
  ['src/jobs/scheduler/', 'src/areas/scheduler-snapshot/'],
  ['src/store/scheduler-outbox.ts', 'src/areas/scheduler-snapshot/store/scheduler-outbox.ts'],
  ['src/store/routing-accounts.ts', 'src/areas/scheduler-snapshot/store/routing-accounts.ts'],
  ['src/coordination/snapshot-buckets.ts', 'src/areas/scheduler-snapshot/store/snapshot-buckets.ts'],
  ['src/coordination/memory-snapshot-buckets.ts', 'src/areas/scheduler-snapshot/store/memory-snapshot-buckets.ts'],
  ['src/telemetry/scheduler-metrics.ts', 'src/areas/scheduler-snapshot/metrics.ts'],
  ['src/http/scheduler-routes.ts', 'src/areas/scheduler-snapshot/scheduler-routes.ts'],
  ['src/app/scheduler-wiring.ts', 'src/areas/scheduler-snapshot/wiring.ts'],
  // probes: channel monitors and scheduled account tests
  ['src/jobs/probes/', 'src/areas/probes/'],
  ['src/store/monitors.ts', 'src/areas/probes/store/monitors.ts'],
  ['src/store/monitor-history.ts', 'src/areas/probes/store/monitor-history.ts'],
  ['src/store/monitor-windows.ts', 'src/areas/probes/store/monitor-windows.ts'],
  ['src/store/account-tests.ts', 'src/areas/probes/store/account-tests.ts'],
  ['src/upstream/probe-client.ts', 'src/areas/probes/probe-client.ts'],
  ['src/http/monitors-routes.ts', 'src/areas/probes/monitors-routes.ts'],
  ['src/http/probes-routes.ts', 'src/areas/probes/probes-routes.ts'],
  ['src/http/account-tests-routes.ts', 'src/areas/probes/account-tests-routes.ts'],
  ['src/http/monitor-rule-check.ts', 'src/areas/ops/monitor-rule-check.ts'],
  ['src/telemetry/probes-metrics.ts', 'src/areas/probes/metrics.ts'],
  ['src/app/probes-wiring.ts', 'src/areas/probes/wiring.ts'],
  // backup: dumps, storage, verify, restore
  ['src/jobs/backup/', 'src/areas/backup/'],
  ['src/store/backups.ts', 'src/areas/backup/store/backups.ts'],
  ['src/upstream/backup-storage.ts', 'src/areas/backup/backup-storage.ts'],
  ['src/upstream/s3-storage.ts', 'src/areas/backup/s3-storage.ts'],
  ['src/config/backup-schema.ts', 'src/areas/backup/config.ts'],
  ['src/telemetry/backup-metrics.ts', 'src/areas/backup/metrics.ts'],
  ['src/http/backups-routes.ts', 'src/areas/backup/backups-routes.ts'],
  ['src/cli/backup.ts', 'src/areas/backup/cli-backup.ts'],
  ['src/cli/backups.ts', 'src/areas/backup/cli-backups.ts'],
  ['src/cli/restore.ts', 'src/areas/backup/cli-restore.ts'],
  ['src/app/backup-wiring.ts', 'src/areas/backup/wiring.ts'],
  // images: batch image generation
  ['src/jobs/images/', 'src/areas/images/'],
  ['src/store/image-batches.ts', 'src/areas/images/store/image-batches.ts'],
  ['src/store/image-queue.ts', 'src/areas/images/store/image-queue.ts'],
  ['src/store/image-transitions.ts', 'src/areas/images/store/image-transitions.ts'],
  ['src/upstream/image-provider.ts', 'src/areas/images/image-provider.ts'],
  ['src/upstream/object-store.ts', 'src/areas/images/object-store.ts'],
  ['src/config/image-limits.ts', 'src/areas/images/image-limits.ts'],
  ['src/telemetry/images-metrics.ts', 'src/areas/images/metrics.ts'],
  ['src/http/image-batches-routes.ts', 'src/areas/images/image-batches-routes.ts'],
  ['src/app/images-wiring.ts', 'src/areas/images/wiring.ts'],
  // admin: console sessions, the SQL console, dead letters
  ['src/jobs/admin/', 'src/areas/admin/'],
  ['src/store/admin-sessions.ts', 'src/areas/admin/store/admin-sessions.ts'],
  ['src/store/sql-console.ts', 'src/areas/admin/store/sql-console.ts'],
  ['src/store/sql-guard.ts', 'src/areas/admin/store/sql-guard.ts'],
  ['src/store/sql-snapshot.ts', 'src/areas/admin/store/sql-snapshot.ts'],
  ['src/store/sql-snapshot-worker.ts', 'src/areas/admin/store/sql-snapshot-worker.ts'],
  ['src/http/sql-routes.ts', 'src/areas/admin/sql-routes.ts'],
  ['src/http/session-routes.ts', 'src/areas/admin/session-routes.ts'],
  ['src/http/dead-letters-routes.ts', 'src/areas/admin/dead-letters-routes.ts'],
  ['src/cli/sql.ts', 'src/areas/admin/cli-sql.ts'],
  // doctor: deployment checks (the job, the API, the CLI)
  ['src/jobs/doctor/doctor.ts', 'src/areas/doctor/doctor-job.ts'],
  ['src/jobs/doctor/', 'src/areas/doctor/'],
  ['src/doctor/', 'src/areas/doctor/'],
  ['src/store/doctor-facts.ts', 'src/areas/doctor/store/doctor-facts.ts'],
  ['src/http/doctor-routes.ts', 'src/areas/doctor/doctor-routes.ts'],
  ['src/cli/doctor.ts', 'src/areas/doctor/cli-doctor.ts'],
  ['src/app/doctor-wiring.ts', 'src/areas/doctor/wiring.ts'],
  // canary: the end-to-end check of the scheduler itself
  ['src/jobs/canary/', 'src/areas/canary/'],
  ['src/store/canary-runs.ts', 'src/areas/canary/store/canary-runs.ts'],
];

const ROOTS = ['src', 'test', 'bench', 'examples', 'scripts', 'web/src'];
const CODE = /\.(ts|tsx|mts|mjs|js)$/;
const dryRun = process.argv.includes('--dry-run');

/** The new path of an old one, or undefined when the table does not move it. */
function mapPath(old) {
  const exact = MOVES.find(([from]) => !from.endsWith('/') && from === old);
  if (exact) return exact[1];
  const folder = MOVES.find(([from]) => from.endsWith('/') && old.startsWith(from));
  return folder ? folder[1] + old.slice(folder[0].length) : undefined;
}

/** The paths a file may have had before (the table read backwards; two folders may move into one). */
function oldPaths(now) {
  const exact = MOVES.filter(([from, to]) => !from.endsWith('/') && to === now).map(([from]) => from);
  const folders = MOVES.filter(([from, to]) => from.endsWith('/') && now.startsWith(to))
    .map(([from, to]) => from + now.slice(to.length))
    .filter((old) => mapPath(old) === now);
  return [...exact, ...folders];
}

function walk(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).flatMap((name) => {
    const path = posix.join(dir, name);
    if (name === 'node_modules' || name === 'dist') return [];
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
}

function git(...args) {
  if (dryRun) return console.log(`git ${args.join(' ')}`);
  execFileSync('git', args, { stdio: 'inherit' });
}

// 1. Moves: every existing file the table maps somewhere else.
let moved = 0;
for (const file of walk('src')) {
  const to = mapPath(file);
  if (!to || to === file) continue;
  if (existsSync(to)) throw new Error(`${file} → ${to}: the target exists; fix the table`);
  if (!dryRun) execFileSync('mkdir', ['-p', dirname(to)]);
  git('mv', file, to);
  moved++;
}

// 2. Imports: resolve each relative specifier; rewrite the ones that point at an old place.
/** Files a specifier may name, each with the way back from a file path to a specifier of the same style. */
const CANDIDATES = (p) => [
  [p, (f) => f],
  [p.replace(/\.js$/, '.ts'), (f) => f.replace(/\.ts$/, '.js')],
  [p.replace(/\.js$/, '.tsx'), (f) => f.replace(/\.tsx$/, '.js')],
  [`${p}.ts`, (f) => f.replace(/\.ts$/, '')],
  [`${p}.tsx`, (f) => f.replace(/\.tsx$/, '')],
  [`${p}/index.ts`, (f) => f.replace(/\/index\.ts$/, '')],
];
const isFile = (p) => existsSync(p) && statSync(p).isFile();

function rewriteSpecifier(file, spec) {
  if (!spec.startsWith('./') && !spec.startsWith('../')) return spec;
  const here = posix.normalize(posix.join(posix.dirname(file), spec));
  // A file never imports itself: `./wiring.js` in a moved `app/x-wiring.ts` meant `app/wiring.ts`.
  if (CANDIDATES(here).some(([c]) => c !== file && isFile(c))) return spec;
  for (const oldFile of [...oldPaths(file), file]) {
    const oldTarget = posix.normalize(posix.join(posix.dirname(oldFile), spec));
    for (const [candidate, back] of CANDIDATES(oldTarget)) {
      const mapped = mapPath(candidate) ?? candidate;
      if (mapped === file || !isFile(mapped)) continue;
      let rel = posix.relative(posix.dirname(file), back(mapped));
      if (!rel.startsWith('.')) rel = `./${rel}`;
      return rel;
    }
  }
  console.warn(`unresolved: ${file}: '${spec}'`);
  return spec;
}

let rewritten = 0;
for (const file of ROOTS.flatMap(walk).filter((f) => CODE.test(f))) {
  const text = readFileSync(file, 'utf8');
  const info = ts.preProcessFile(text, true, true);
  const edits = [];
  for (const ref of info.importedFiles) {
    const next = rewriteSpecifier(file, ref.fileName);
    // `pos` may point at the opening quote: find the specifier's own text from there.
    const at = text.indexOf(ref.fileName, ref.pos);
    if (next !== ref.fileName) edits.push({ pos: at, end: at + ref.fileName.length, text: next });
  }
  if (!edits.length) continue;
  let out = text;
  for (const e of edits.sort((a, b) => b.pos - a.pos)) out = out.slice(0, e.pos) + e.text + out.slice(e.end);
  if (dryRun) console.log(`${file}: ${edits.length} import(s)`);
  else writeFileSync(file, out);
  rewritten += edits.length;
}
console.log(`${moved} file(s) moved, ${rewritten} import(s) rewritten${dryRun ? ' (dry run)' : ''}`);
