/**
 * The scaling bench's attribution (docs/scaling.md): which feature a PostgreSQL statement or a
 * Redis command belongs to, and the tally of a window. Pure functions, no I/O (the log reading is
 * in scaling-log.ts): test/scaling-model.test.ts.
 *
 * PostgreSQL: a statement is classed by what it touches (tables, a few column names where two
 * features share the `accounts` table); BEGIN/COMMIT/ROLLBACK and session settings take the class
 * of the transaction they belong to (the first classed statement of the same backend between BEGIN
 * and its end). Redis: a command is classed by its key's family below `<prefix>:<env>:`.
 */

export const PG_CLASSES = [
  'heartbeat, liveness, leader',
  'job rounds (claims, records)',
  'token refresh',
  'token read (hot path)',
  'snapshot outbox → Redis',
  'account admin writes',
  'monitors',
  'usage ingest',
  'usage rollups, cleanup',
  'quota flush',
  'ops plane',
  'change stream',
  'other jobs',
  'unclassified',
] as const;
export type PgClass = (typeof PG_CLASSES)[number];

/** First match wins; tested on the statement lower-cased with its whitespace collapsed. */
const PG_RULES: Array<[PgClass, RegExp]> = [
  // The heartbeat: one statement that also writes the skip counts and idle-round records it carries.
  ['heartbeat, liveness, leader', /^with skips as \(|^update instances set|^insert into instances/],
  ['token read (hot path)', /^select id, status, token_version, token_expires_at, credentials_sealed from accounts where id = \$1$|'synchronous_commit', 'off', true\), pg_notify/],
  // Before the refresh rule: the consumer's account read names status_before_refresh inside scheduler_routing_status().
  ['snapshot outbox → Redis', /scheduler_outbox|scheduler_bucket_epochs|scheduler_snapshot_state|scheduler_routing_status|sched_version|sched_group/],
  ['token refresh', /account_refresh_leases|dead_refresh_tokens|refresh_sent_|status_before_refresh|refresh_failures = |select n\.db_now, a\.\*|select token_version from accounts/],
  ['account admin writes', /^update accounts set|account_audit|^insert into accounts|from accounts where id = \$1$/],
  ['monitors', /monitor|probe_watermarks|account_test_/],
  ['usage rollups, cleanup', /usage_hourly|usage_daily|usage_cleanup_tasks|usage_recompute_tasks|idempotency_records|at time zone \$3\)::date::text as d1/],
  ['usage ingest', /usage_logs|usage_request_ids/],
  ['quota flush', /platform_quota_usage/],
  ['ops plane', /\bops_/],
  ['change stream', /change_events|change_stream_state/],
  ['job rounds (claims, records)', /job_runs|job_state|job_cursors|job_schedule_votes|job_skip_counts|job_pause|with claim|with fin\b/],
  [
    'heartbeat, liveness, leader',
    /\binstances\b|pg_advisory|pg_try_advisory|pg_locks|^listen |^unlisten |pg_backend_pid|inet_server|system_identifier|^select 1$|current_setting|schema_migrations|pg_postmaster_start_time/,
  ],
  [
    'other jobs',
    /billing_users|subscriptions|payment_|image_batch|backups|doctor_|notification_|proxies|dead_letters|canary_runs|secret_keys|admin_sessions|plans\b|from accounts|pg_database_size|pg_stat/,
  ],
];

const norm = (sql: string) => sql.replace(/\s+/g, ' ').trim();
/** Statements that belong to whatever transaction they are in. */
const CONTROL = /^(begin|start transaction|commit|rollback|end|savepoint|release|set |show |reset |discard |deallocate)\b/i;
/** Statements that need the primary (a write, a lock, a notification): the rest could go to a read replica. */
const PRIMARY =
  /^(insert|update|delete|merge|create|alter|drop|truncate|lock|listen|unlisten|notify|vacuum|analyze)\b|\bfor (update|no key update|share)\b|pg_(try_)?advisory|pg_notify|nextval|\b(insert into|update \S+ set|delete from)\b/i;

export function classOfStatement(sql: string): PgClass | null {
  const s = norm(sql).toLowerCase();
  if (CONTROL.test(s)) return null;
  for (const [c, re] of PG_RULES) if (re.test(s)) return c;
  return 'unclassified';
}

export const needsPrimary = (sql: string): boolean => PRIMARY.test(norm(sql));

export interface LogEntry {
  /** Epoch ms of the log line. */
  at: number;
  pid: string;
  sql: string;
}

export interface PgTally {
  statements: number;
  transactions: number;
  /** Transactions with at least one statement that needs the primary. */
  primaryTransactions: number;
  /** Statement kind (first 110 characters) → count, for the audit of the rules. */
  kinds: Map<string, number>;
}

export type PgTallies = Map<PgClass, PgTally>;

function add(t: PgTallies, items: LogEntry[]): void {
  const classes = items.map((e) => classOfStatement(e.sql));
  // The first statement that names a feature; a transaction of control statements only (SET, SHOW) is the session's.
  const cls = classes.find((c): c is PgClass => c !== null && c !== 'unclassified') ?? (classes.includes('unclassified') ? 'unclassified' : 'heartbeat, liveness, leader');
  let x = t.get(cls);
  if (!x) t.set(cls, (x = { statements: 0, transactions: 0, primaryTransactions: 0, kinds: new Map() }));
  x.statements += items.length;
  x.transactions += 1;
  if (items.some((e) => needsPrimary(e.sql))) x.primaryTransactions += 1;
  for (const [i, e] of items.entries()) {
    if (classes[i] === null) continue;
    const k = norm(e.sql).slice(0, 110);
    x.kinds.set(k, (x.kinds.get(k) ?? 0) + 1);
  }
}

/**
 * The window's statements (entries in log order, already cut to the window) grouped into
 * transactions per backend and tallied by class.
 */
export function tallyStatements(entries: readonly LogEntry[]): PgTallies {
  const t: PgTallies = new Map();
  const open = new Map<string, LogEntry[]>();
  for (const e of entries) {
    const s = norm(e.sql).toLowerCase();
    if (/^(begin|start transaction)\b/.test(s)) {
      const prev = open.get(e.pid);
      if (prev) add(t, prev);
      open.set(e.pid, [e]);
      continue;
    }
    const tx = open.get(e.pid);
    if (tx) {
      tx.push(e);
      if (/^(commit|rollback|end)\b/.test(s)) {
        open.delete(e.pid);
        add(t, tx);
      }
      continue;
    }
    add(t, [e]);
  }
  for (const tx of open.values()) add(t, tx);
  return t;
}

export const REDIS_CLASSES = [
  'leader locks',
  'token refresh locks',
  'snapshot store reads',
  'snapshot store writes',
  'quota counters',
  'change stream',
  'database marker',
  'wake-ups (pub/sub)',
  'keyless (PING, INFO, SCRIPT, CLIENT…)',
  'other keys',
] as const;
export type RedisClass = (typeof REDIS_CLASSES)[number];

/** The key a command names: EVAL/EVALSHA/FCALL take it after the script and the key count. */
export function keyOf(args: readonly string[]): string | null {
  const cmd = (args[0] ?? '').toLowerCase();
  if (/^(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro)$/.test(cmd)) return Number(args[2] ?? 0) > 0 ? (args[3] ?? null) : null;
  if (/^(ping|info|script|client|select|hello|auth|multi|exec|discard|config|command|time|dbsize|monitor|quit|subscribe|psubscribe|unsubscribe|punsubscribe|readonly|cluster)$/.test(cmd)) return null;
  return args[1] ?? null;
}

/** `fromLua`: a command a script ran (MONITOR's source `lua`): the snapshot's scripts are its writes. */
export function classOfRedis(args: readonly string[], fromLua = false): RedisClass {
  const cmd = (args[0] ?? '').toLowerCase();
  if (cmd === 'publish' || cmd === 'spublish') return 'wake-ups (pub/sub)';
  const key = keyOf(args);
  if (key === null) return 'keyless (PING, INFO, SCRIPT, CLIENT…)';
  if (/:\{job:[^}]*\}:leader$|:job:/.test(key)) return 'leader locks';
  if (/:oauth:refresh_lock:/.test(key)) return 'token refresh locks';
  if (/:\{sched\}/.test(key)) return !fromLua && /^(hmget|hgetall|hkeys|hget|hlen|smembers|get|exists|ttl|pttl)$/.test(cmd) ? 'snapshot store reads' : 'snapshot store writes';
  if (/:quota:/.test(key)) return 'quota counters';
  if (/:changes\b/.test(key)) return 'change stream';
  if (/:database$/.test(key)) return 'database marker';
  return 'other keys';
}
