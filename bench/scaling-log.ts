/**
 * The scaling bench's counters (docs/scaling.md): the PostgreSQL server log of one database cut to
 * a window (log_statement = 'all' for that database only, as bench/statement-log.ts turns it on), a
 * Redis MONITOR tally by key family, and the servers' own totals (pg_stat_database, INFO stats) to
 * check the attribution against.
 */
import { readFile } from 'node:fs/promises';
import { Redis } from 'ioredis';
import { classOfRedis, type LogEntry, type RedisClass } from './scaling-classify.js';

const LOG = () => process.env.BENCH_PG_LOG ?? '/var/log/postgresql/postgresql-15-main.log';
const HEAD = /^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) (\w+) \[(\d+)\] \S*@(\S+) LOG: {2}(?:statement|execute [^:]*): ([\s\S]*)$/;

/** Statements of `dbName` logged in [fromMs, toMs], in log order. The log's time zone must be UTC (Debian's default log_timezone here). */
export async function loggedStatements(dbName: string, fromMs: number, toMs: number): Promise<LogEntry[]> {
  const text = await readFile(LOG(), 'utf8');
  const out: LogEntry[] = [];
  for (const e of text.split(/\n(?=\d{4}-\d\d-\d\d )/)) {
    const m = HEAD.exec(e);
    if (!m || m[4] !== dbName) continue;
    if (m[2] !== 'UTC') throw new Error(`scaling bench: the PostgreSQL log ${LOG()} is in ${m[2]}, expected UTC (set log_timezone = 'UTC')`);
    const at = Date.parse(`${m[1]!.replace(' ', 'T')}Z`);
    if (at >= fromMs && at <= toMs) out.push({ at, pid: m[3]!, sql: m[5]! });
  }
  return out;
}

export interface RedisTally {
  /** Commands the clients sent, by class and command. */
  client: Map<RedisClass, Map<string, number>>;
  /** Commands Lua scripts ran inside one EVALSHA (MONITOR shows them as source `lua`). */
  lua: Map<RedisClass, number>;
}

/** A MONITOR connection counting commands by class while `counting` is on. */
export class RedisMonitor {
  private counting = false;
  private tally: RedisTally = { client: new Map(), lua: new Map() };
  private constructor(private readonly conn: Redis) {}

  static async start(url: string): Promise<RedisMonitor> {
    const c = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    c.on('error', () => undefined);
    const mon = await c.monitor();
    const self = new RedisMonitor(mon);
    mon.on('monitor', (_time: string, args: string[], source: string) => self.seen(args, source));
    return self;
  }

  private seen(args: string[], source: string): void {
    if (!this.counting) return;
    const cls = classOfRedis(args, source === 'lua');
    if (source === 'lua') {
      this.tally.lua.set(cls, (this.tally.lua.get(cls) ?? 0) + 1);
      return;
    }
    const cmd = (args[0] ?? '?').toLowerCase();
    let m = this.tally.client.get(cls);
    if (!m) this.tally.client.set(cls, (m = new Map()));
    m.set(cmd, (m.get(cmd) ?? 0) + 1);
  }

  begin(): void {
    this.tally = { client: new Map(), lua: new Map() };
    this.counting = true;
  }

  end(): RedisTally {
    this.counting = false;
    return this.tally;
  }

  stop(): void {
    this.conn.disconnect();
  }
}

/** INFO stats total_commands_processed: the server's own count of client commands. */
export async function redisTotal(url: string): Promise<number> {
  const c = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
  c.on('error', () => undefined);
  await c.connect();
  const info = await c.info('stats');
  c.disconnect();
  return Number(/^total_commands_processed:(\d+)/m.exec(info)?.[1] ?? 0);
}

/** Commits + rollbacks of the current database (the statistics snapshot cleared first). */
export async function pgTransactions(query: (sql: string) => Promise<Array<Record<string, unknown>>>): Promise<number> {
  await query(`SELECT pg_stat_clear_snapshot()`);
  return Number((await query(`SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = current_database()`))[0]!.n);
}

/** Server backends connected to the current database, this bench's own connection apart. */
export async function pgBackends(query: (sql: string) => Promise<Array<Record<string, unknown>>>): Promise<number> {
  return Number((await query(`SELECT count(*)::int - 1 AS n FROM pg_stat_activity WHERE datname = current_database()`))[0]!.n);
}
