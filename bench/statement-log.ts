/**
 * Attributes a footprint to statements (issue 26): with `BENCH_STATEMENTS=1` a bench turns on
 * `log_statement = 'all'` for its private database only (`ALTER DATABASE … SET`, taken by the
 * sessions that connect after it) and, after the steady window, counts the PostgreSQL server
 * log's lines of that database inside the window, grouped by the statement's first words; and
 * Redis `INFO commandstats` deltas per command. The server log is `BENCH_PG_LOG`
 * (default: Debian's `/var/log/postgresql/postgresql-15-main.log`); the log line prefix must
 * carry `%m` first and `%u@%d` (Debian's default `%m [%p] %q%u@%d `).
 */
import { readFile } from 'node:fs/promises';
import { Redis } from 'ioredis';

export const statementsWanted = (): boolean => process.env.BENCH_STATEMENTS === '1';
const LOG = () => process.env.BENCH_PG_LOG ?? '/var/log/postgresql/postgresql-15-main.log';

/** Turns statement logging on for `dbName` (new sessions only: call before the replicas connect). */
export async function logStatements(query: (sql: string) => Promise<unknown>, dbName: string): Promise<void> {
  await query(`ALTER DATABASE ${dbName} SET log_statement = 'all'`);
}

/** A statement's kind: its first ~110 characters, whitespace collapsed, literals kept (they name the job). */
function kind(sql: string): string {
  return sql.replace(/\s+/g, ' ').trim().slice(0, 110);
}

/** Statements of `dbName` logged between `fromMs` and `toMs` (epoch), by kind, most frequent first. */
export async function statementCounts(dbName: string, fromMs: number, toMs: number): Promise<Array<[string, number]>> {
  const text = await readFile(LOG(), 'utf8');
  const counts = new Map<string, number>();
  const head = /^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) (\w+) \[\d+\] \S*@(\S+) LOG: {2}(?:statement|execute [^:]*): ([\s\S]*)$/;
  // An entry is its first line plus the tab-indented continuation lines of a multi-line statement.
  const entries = text.split(/\n(?=\d{4}-\d\d-\d\d )/);
  for (const e of entries) {
    const m = head.exec(e);
    if (!m || m[3] !== dbName) continue;
    const at = Date.parse(`${m[1]!.replace(' ', 'T')}Z`);
    if (at < fromMs || at > toMs) continue;
    const k = kind(m[4]!);
    counts.set(k, (counts.get(k) ?? 0) + 1);
  }
  return [...counts.entries()].sort((a, b) => b[1] - a[1]);
}

/** Redis `INFO commandstats` calls per command. */
export async function redisCommandStats(url: string): Promise<Map<string, number>> {
  const c = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  c.on('error', () => undefined);
  await c.connect();
  const info = await c.info('commandstats');
  c.disconnect();
  const out = new Map<string, number>();
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) out.set(m[1]!, Number(m[2]));
  return out;
}

/** Autovacuum and autoanalyze runs on the database so far: each is a transaction `xact_commit` counts that no client sent. */
export async function autovacuumRuns(query: (sql: string) => Promise<Array<Record<string, unknown>>>): Promise<number> {
  const [r] = await query(`SELECT pg_stat_clear_snapshot()`).then(() => query(`SELECT COALESCE(sum(autovacuum_count + autoanalyze_count), 0)::int AS n FROM pg_stat_all_tables`));
  return Number(r?.n ?? 0);
}

/** Prints both attributions for a window of `secs` seconds. */
export function printAttribution(title: string, statements: Array<[string, number]>, redisBefore: Map<string, number>, redisAfter: Map<string, number>, secs: number): void {
  const total = statements.reduce((s, [, n]) => s + n, 0);
  console.log(`\n### ${title}: ${total} statements logged in ${secs.toFixed(1)} s (${(total / secs).toFixed(2)}/s)\n`);
  console.log('| count | statement (first 110 characters) |\n|---|---|');
  for (const [k, n] of statements) console.log(`| ${n} | \`${k.replace(/\|/g, '\\|')}\` |`);
  const redis = [...redisAfter.entries()].map(([cmd, n]) => [cmd, n - (redisBefore.get(cmd) ?? 0)] as const).filter(([, n]) => n > 0);
  console.log('\n| Redis command | calls |\n|---|---|');
  for (const [cmd, n] of redis.sort((a, b) => b[1] - a[1])) console.log(`| ${cmd} | ${n} |`);
}
