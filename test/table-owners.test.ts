import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/**
 * Every table has one owner (issue 48): the area whose migration creates it, or the kernel for the
 * kernel's migrations (src/store/migrations). An area's code writes (INSERT, UPDATE, DELETE, MERGE,
 * COPY, TRUNCATE) only its own tables; a write across areas goes through the owner's exported face,
 * which takes the caller's transaction (billing's hold/settle/release, the scheduler snapshot's
 * enqueue, notifications' enqueue, the kernel's instance registry). Reads across areas are allowed
 * for now. Migrations are not scanned (they create and alter; triggers are the database's own).
 * The kernel (src/ outside src/areas/, migrations aside) names no area's table at all, read or
 * write (issue 48, "the kernel has no domain word"): the last describe below.
 */

const ROOT = join(__dirname, '..');
const SRC = join(ROOT, 'src');
const KERNEL = 'kernel';

/**
 * Migrations 1-28 are the database's history from before areas kept their own migrations: they
 * live in src/store/migrations but create most areas' tables. Their owners, table by table (the
 * test below fails when a table they create is missing here, or listed but not created there).
 * account_audit is created by 008_probes but is the account's audit trail: accounts writes it.
 */
const LEGACY_LAST_VERSION = 28;
const LEGACY_OWNERS: Record<string, string> = {
  ...owned(KERNEL, 'instances', 'job_state', 'job_runs', 'job_cursors', 'job_skip_counts', 'dead_letters', 'secret_keys'),
  ...owned('admin', 'admin_sessions'),
  ...owned('canary', 'canary_runs'),
  ...owned('accounts', 'proxies', 'accounts', 'account_refresh_leases', 'account_audit'),
  ...owned('scheduler-snapshot', 'scheduler_outbox', 'scheduler_snapshot_state', 'scheduler_bucket_epochs'),
  ...owned('usage', 'usage_logs', 'usage_request_ids', 'usage_hourly', 'usage_daily', 'usage_cleanup_tasks', 'idempotency_records', 'platform_quota_usage', 'usage_recompute_tasks'),
  ...owned('billing', 'billing_users', 'plans', 'subscriptions', 'payment_orders', 'payment_order_events'),
  ...owned('notifications', 'notification_deliveries', 'notification_settings', 'notification_channel_slots'),
  ...owned(
    'ops',
    'ops_metrics_minute',
    'ops_metrics_hourly',
    'ops_metrics_daily',
    'ops_alert_rules',
    'ops_alert_state',
    'ops_alert_events',
    'ops_silences',
    'ops_reports',
    'ops_report_runs',
    'ops_retention',
  ),
  ...owned('probes', 'monitors', 'monitor_results', 'monitor_rollups', 'probe_watermarks', 'account_test_plans', 'account_test_results'),
  ...owned('backup', 'backups'),
  ...owned('images', 'image_batches', 'image_batch_events', 'image_batch_results', 'image_batch_money', 'image_batch_queue'),
  ...owned('doctor', 'doctor_checks', 'doctor_db_size'),
};

/**
 * Kernel tables that are a shared service meant for areas to write directly, each with its reason.
 * None today: an area reaches the kernel's tables through kernel functions (the claim queue, the
 * instance registry, dead letters).
 */
const SHARED_KERNEL_TABLES: readonly string[] = [];

function owned(owner: string, ...tables: string[]): Record<string, string> {
  return Object.fromEntries(tables.map((t) => [t, owner]));
}

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const p = join(dir, n);
    return statSync(p).isDirectory() ? files(p) : p.endsWith('.ts') ? [p] : [];
  });
}

const rel = (p: string): string => relative(ROOT, p).split(sep).join('/');
/** `src/areas/<area>/...` → the area; anything else in src/ → the kernel. */
const ownerOfFile = (path: string): string => /^src\/areas\/([^/]+)\//.exec(path)?.[1] ?? KERNEL;
const isMigration = (path: string): boolean => /\/store\/migrations\//.test(path);

const CREATE = /\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:public\.)?"?([a-z_][a-z0-9_]*)/gi;

interface Created {
  table: string;
  file: string;
  owner: string;
  legacy: boolean;
}

function createdTables(): Created[] {
  return files(SRC)
    .map(rel)
    .filter((f) => isMigration(f) && /\/\d+_[^/]+\.ts$/.test(f))
    .flatMap((file) => {
      const version = Number(/\/(\d+)_[^/]+\.ts$/.exec(file)![1]);
      const area = ownerOfFile(file);
      const legacy = area === KERNEL && version <= LEGACY_LAST_VERSION;
      const text = readFileSync(join(ROOT, file), 'utf8');
      return [...text.matchAll(CREATE)].map((m) => {
        const table = m[1]!.toLowerCase();
        return { table, file, legacy, owner: legacy ? (LEGACY_OWNERS[table] ?? '(unlisted)') : area };
      });
    });
}

/** The text of every string literal and template in a file (a substitution becomes `${}`). */
function sqlStrings(path: string, source: string): string[] {
  const sf = ts.createSourceFile(path, source, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
  const out: string[] = [];
  const visit = (n: ts.Node): void => {
    if (ts.isStringLiteral(n) || ts.isNoSubstitutionTemplateLiteral(n)) out.push(n.text);
    else if (ts.isTemplateExpression(n)) out.push(n.head.text + n.templateSpans.map((s) => '${}' + s.literal.text).join(''));
    if (!ts.isTemplateExpression(n)) ts.forEachChild(n, visit);
    else n.templateSpans.forEach((s) => visit(s.expression));
  };
  visit(sf);
  return out;
}

const WRITE = /\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM|MERGE\s+INTO|COPY|TRUNCATE(?:\s+TABLE)?)\s+(?:ONLY\s+)?((?:(?:public\.)?"?[a-z_][a-z0-9_]*"?\s*,\s*)*(?:public\.)?"?[a-z_][a-z0-9_]*"?)/gi;

interface Write {
  file: string;
  table: string;
  verb: string;
}

/** The writes to known tables in one file's SQL strings (TRUNCATE may name several). */
function writesIn(file: string, source: string, known: ReadonlySet<string>): Write[] {
  const found: Write[] = [];
  for (const s of sqlStrings(file, source)) {
    for (const m of s.matchAll(WRITE)) {
      const verb = m[1]!.replace(/\s+/g, ' ').toUpperCase();
      const names = verb.startsWith('TRUNCATE') ? m[2]!.split(',') : [m[2]!.split(',')[0]!];
      for (const n of names) {
        const table = n
          .trim()
          .replace(/^public\./i, '')
          .replace(/"/g, '')
          .toLowerCase();
        if (known.has(table)) found.push({ file, table, verb });
      }
    }
  }
  return found;
}

/** A write by an area to a table it does not own, as a line naming file, table, owner and writer. */
function violations(writes: Write[], owners: ReadonlyMap<string, string>): string[] {
  const out = new Set<string>();
  for (const w of writes) {
    const writer = ownerOfFile(w.file);
    const owner = owners.get(w.table)!;
    if (writer === KERNEL || writer === owner) continue;
    if (owner === KERNEL && SHARED_KERNEL_TABLES.includes(w.table)) continue;
    out.add(`${w.file}: ${w.verb} ${w.table}: the table is owned by ${owner === KERNEL ? 'the kernel' : `the ${owner} area`}, written by the ${writer} area (go through the owner's exported face)`);
  }
  return [...out].sort();
}

/**
 * Where SQL names a table: after FROM, JOIN, INTO, UPDATE, TABLE (also ALTER/TRUNCATE TABLE),
 * USING, COPY, REFERENCES, or a comma in a FROM list. A string is SQL when it has one of these
 * keywords followed by a name; a word in prose ("taken from accounts") is read the same way, so a
 * kernel string that names an area's table even in words fails too (say it another way).
 */
const NAMED =
  /\b(?:FROM|JOIN|INTO|UPDATE|TABLE|USING|COPY|REFERENCES|TRUNCATE)\s+(?:ONLY\s+)?(?:IF\s+(?:NOT\s+)?EXISTS\s+)?((?:(?:public\.)?"?[a-z_][a-z0-9_]*"?(?:\s+(?:AS\s+)?[a-z_][a-z0-9_]*)?\s*,\s*)*(?:public\.)?"?[a-z_][a-z0-9_]*"?)/gi;

interface Named {
  file: string;
  table: string;
}

/** The known tables a file's SQL strings name, anywhere a table stands (reads and writes). */
function tablesNamedIn(file: string, source: string, known: ReadonlySet<string>): Named[] {
  const found = new Map<string, Named>();
  for (const s of sqlStrings(file, source)) {
    for (const m of s.matchAll(NAMED)) {
      for (const part of m[1]!.split(',')) {
        const table = part
          .trim()
          .split(/\s+/)[0]!
          .replace(/^public\./i, '')
          .replace(/"/g, '')
          .toLowerCase();
        if (known.has(table)) found.set(table, { file, table });
      }
    }
  }
  return [...found.values()];
}

/** A kernel file (src/ outside src/areas/, migrations aside) naming an area's table, as a line naming file, table and owner. */
function kernelViolations(named: Named[], owners: ReadonlyMap<string, string>): string[] {
  return named
    .filter((n) => ownerOfFile(n.file) === KERNEL && owners.get(n.table) !== KERNEL)
    .map((n) => `${n.file}: names ${n.table}, a table of the ${owners.get(n.table)} area (the kernel knows no area's table: move the SQL into the area's store/)`)
    .sort();
}

const created = createdTables();
const owners = new Map(created.map((c) => [c.table, c.owner]));
const known = new Set(owners.keys());
const scanned = files(SRC)
  .map(rel)
  .filter((f) => !isMigration(f));
const allWrites = scanned.flatMap((f) => writesIn(f, readFileSync(join(ROOT, f), 'utf8'), known));

describe('every table has one owner', () => {
  it('finds the tables and their owners: every table created once, every legacy table listed', () => {
    expect(created.length).toBeGreaterThan(50);
    const twice = created.filter((c, i) => created.findIndex((d) => d.table === c.table) !== i);
    expect(twice.map((c) => `${c.table} (${c.file})`)).toEqual([]);
    expect(created.filter((c) => c.owner === '(unlisted)').map((c) => `${c.file}: ${c.table} has no owner in LEGACY_OWNERS`)).toEqual([]);
    const legacyCreated = new Set(created.filter((c) => c.legacy).map((c) => c.table));
    expect(Object.keys(LEGACY_OWNERS).filter((t) => !legacyCreated.has(t))).toEqual([]);
    expect(SHARED_KERNEL_TABLES.filter((t) => owners.get(t) !== KERNEL)).toEqual([]);
    // Spot checks that the map and the area migrations are read as the docs say.
    expect(owners.get('billing_users')).toBe('billing');
    expect(owners.get('scheduler_outbox')).toBe('scheduler-snapshot');
    expect(owners.get('change_events')).toBe('change-stream');
    expect(owners.get('job_pause_audit')).toBe(KERNEL);
  });

  it("sees an area's writes in its SQL strings (the scanner itself)", () => {
    // Real writes it must find: a checker that finds nothing passes whatever the code does.
    const seen = new Set(allWrites.map((w) => `${ownerOfFile(w.file)}:${w.table}`));
    for (const w of ['accounts:accounts', 'billing:billing_users', 'images:image_batches', 'scheduler-snapshot:scheduler_outbox', 'probes:monitors']) expect(seen).toContain(w);
    const sample = [
      'const a = `WITH x AS (UPDATE public.billing_users SET balance = 0 RETURNING id) SELECT 1`;',
      'const b = \'insert into "accounts" (id) values (1)\';',
      'const c = `TRUNCATE image_batches, scheduler_outbox`;',
      'const d = `DELETE FROM ${t} WHERE true`; // a dynamic name is not resolved',
      '// UPDATE accounts in a comment is not SQL',
    ].join('\n');
    const found = writesIn('src/areas/images/store/x.ts', sample, known);
    expect(found.map((w) => `${w.verb} ${w.table}`)).toEqual(['UPDATE billing_users', 'INSERT INTO accounts', 'TRUNCATE image_batches', 'TRUNCATE scheduler_outbox']);
    expect(violations(found, owners)).toEqual([
      "src/areas/images/store/x.ts: INSERT INTO accounts: the table is owned by the accounts area, written by the images area (go through the owner's exported face)",
      "src/areas/images/store/x.ts: TRUNCATE scheduler_outbox: the table is owned by the scheduler-snapshot area, written by the images area (go through the owner's exported face)",
      "src/areas/images/store/x.ts: UPDATE billing_users: the table is owned by the billing area, written by the images area (go through the owner's exported face)",
    ]);
  });

  it('no area writes a table it does not own', () => {
    expect(violations(allWrites, owners)).toEqual([]);
  });
});

describe('the kernel names no area table (issue 48: "the kernel has no domain word")', () => {
  const named = scanned.flatMap((f) => tablesNamedIn(f, readFileSync(join(ROOT, f), 'utf8'), known));

  it("sees a table named in the kernel's SQL strings (the scanner itself)", () => {
    // Real names it must find: the kernel's own tables, read and written.
    const seen = new Set(named.filter((n) => ownerOfFile(n.file) === KERNEL).map((n) => n.table));
    for (const t of ['instances', 'job_runs', 'job_state', 'dead_letters']) expect(seen).toContain(t);
    const sample = [
      'const a = `SELECT a.id FROM public.accounts a JOIN job_runs r ON true`;',
      "const b = 'WITH x AS (SELECT 1) SELECT * FROM instances i, monitors m';",
      'const c = `DELETE FROM ${t} WHERE true`; // a dynamic name is not resolved',
      '// SELECT * FROM image_batches in a comment is not SQL',
    ].join('\n');
    const found = tablesNamedIn('src/coordination/x.ts', sample, known);
    expect(found.map((n) => n.table).sort()).toEqual(['accounts', 'instances', 'job_runs', 'monitors']);
    expect(kernelViolations(found, owners)).toEqual([
      "src/coordination/x.ts: names accounts, a table of the accounts area (the kernel knows no area's table: move the SQL into the area's store/)",
      "src/coordination/x.ts: names monitors, a table of the probes area (the kernel knows no area's table: move the SQL into the area's store/)",
    ]);
    expect(kernelViolations(tablesNamedIn('src/areas/probes/store/x.ts', sample, known), owners)).toEqual([]);
  });

  it("no kernel file's SQL names a table an area owns", () => {
    expect(kernelViolations(named, owners)).toEqual([]);
  });
});
