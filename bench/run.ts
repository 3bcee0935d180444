/** `npm run bench`: runs every benchmark and prints the results as Markdown for docs/benchmarks.md. */
import { cpus, totalmem } from 'node:os';
import { benchCoordination } from './coordination.js';
import { benchRefreshThroughput, benchScheduler } from './token-refresh.js';
import { benchAggregation, benchCleanup, benchIngest, benchQuotaFlush } from './usage.js';
import { benchBackup, printBackup } from './backup.js';

const fmt = (n: number) => n.toFixed(3);

async function usage() {
  const ingest = await benchIngest(Number(process.env.BENCH_INGEST ?? 50_000));
  console.log('\n## Usage ingest\n');
  console.log(`| path | rows/s |\n|---|---|\n| one INSERT per event, 8 connections (baseline) | ${ingest.perEvent.toFixed(0)} |\n| UsageWriter, batches of 1,000 | ${ingest.writer.toFixed(0)} |`);
  console.log(`\nratio: ${(ingest.writer / ingest.perEvent).toFixed(1)}x`);

  const rows = Number(process.env.BENCH_CLEANUP_ROWS ?? 1_000_000);
  const cleanup = await benchCleanup(rows);
  console.log(`\n## Cleanup of ${rows} rows over 10 days\n`);
  console.log('| method | rows | seconds | rows/s | longest transaction ms |\n|---|---|---|---|---|');
  for (const c of cleanup) console.log(`| ${c.method} | ${c.rows} | ${c.seconds.toFixed(2)} | ${c.rowsPerSec.toFixed(0)} | ${c.longestTxMs.toFixed(0)} |`);

  const sizes = (process.env.BENCH_AGG_ROWS ?? '1000000').split(',').map(Number);
  const agg = await benchAggregation(sizes);
  console.log('\n## Aggregation and dashboard queries (7 days of usage, hourly by model)\n');
  console.log('| raw rows | aggregate s | dashboard on rollups ms | same query on raw rows ms (baseline) |\n|---|---|---|---|');
  for (const a of agg) console.log(`| ${a.rows} | ${a.aggregateS.toFixed(2)} | ${a.dashRollupMs.toFixed(1)} | ${a.dashRawMs.toFixed(1)} |`);

  const q = await benchQuotaFlush(Number(process.env.BENCH_QUOTA_KEYS ?? 100_000));
  console.log('\n## Quota flush\n');
  console.log(`| path | keys/s |\n|---|---|\n| one upsert per key (baseline) | ${q.perKeyPerSec.toFixed(0)} |\n| flusher, batches of 1,000 | ${q.flushPerSec.toFixed(0)} |`);
  console.log(`\nratio: ${(q.flushPerSec / q.perKeyPerSec).toFixed(1)}x`);
}

async function main() {
  if (process.env.BENCH_ONLY === 'backup') {
    const sizes = (process.env.BENCH_BACKUP_ROWS ?? '1000000').split(',').map(Number);
    const results = [];
    for (const n of sizes) results.push(await benchBackup(n));
    return printBackup(results);
  }
  if (process.env.BENCH_ONLY === 'usage') return usage();
  if (process.env.BENCH_ONLY === 'cleanup') {
    for (const c of await benchCleanup(Number(process.env.BENCH_CLEANUP_ROWS ?? 1_000_000))) console.log(`| ${c.method} | ${c.rows} | ${c.seconds.toFixed(2)} | ${c.rowsPerSec.toFixed(0)} | ${c.longestTxMs.toFixed(0)} |`);
    return;
  }
  const rounds = Number(process.env.BENCH_ROUNDS ?? 2000);
  console.log(`machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${new Date().toISOString()}`);
  const { baseline, full } = await benchCoordination(rounds);
  console.log('\n## Per-round coordination overhead (loopback Redis + PostgreSQL)\n');
  console.log('| round | rounds | median ms | p99 ms | Redis cmds/round | PG statements/round | round trips/round |');
  console.log('|---|---|---|---|---|---|---|');
  for (const [name, s] of [['bare SET NX + DEL (baseline)', baseline], ['relay-jobs no-op cluster round', full]] as const) {
    console.log(`| ${name} | ${s.rounds} | ${fmt(s.medianMs)} | ${fmt(s.p99Ms)} | ${s.redisCommandsPerRound} | ${s.pgStatementsPerRound} | ${s.redisCommandsPerRound + s.pgStatementsPerRound} |`);
  }
  console.log(`\nratio (median, relay-jobs / baseline): ${(full.medianMs / baseline.medianMs).toFixed(2)}x`);

  const accounts = Number(process.env.BENCH_ACCOUNTS ?? 100_000);
  const sched = await benchScheduler(accounts);
  console.log(`\n## Refresh scheduler, ${accounts} accounts due over 20 s${(globalThis as { gc?: unknown }).gc ? '' : ' (run with --expose-gc for exact heap figures)'}\n`);
  console.log('| design | accounts | heap MiB | p50 late ms | p99 late ms | max late ms |');
  console.log('|---|---|---|---|---|---|');
  for (const s of sched) console.log(`| ${s.design} | ${s.accounts} | ${s.heapMiB.toFixed(1)} | ${s.p50LateMs} | ${s.p99LateMs} | ${s.maxLateMs} |`);
  console.log(`\nratio (heap, DueQueue / per-account timers): ${(sched[1]!.heapMiB / sched[0]!.heapMiB).toFixed(2)}x`);

  const { results: tp, lateness } = await benchRefreshThroughput(Number(process.env.BENCH_REFRESHES ?? 3000));
  console.log('\n## Sustained refreshes against the loopback OAuth server (concurrency 8)\n');
  console.log('| path | refreshes | seconds | refreshes/s |');
  console.log('|---|---|---|---|');
  for (const t of tp) console.log(`| ${t.path} | ${t.refreshes} | ${t.seconds.toFixed(2)} | ${t.perSecond.toFixed(0)} |`);
  console.log(`\nratio (refreshes/s, relay-jobs / bare calls): ${(tp[1]!.perSecond / tp[0]!.perSecond).toFixed(2)}x`);
  console.log(`\n## Refresh lateness (stored − due), ${lateness.accounts} accounts due over ${lateness.windowS} s\n`);
  console.log(`p50 ${lateness.p50Ms} ms, p99 ${lateness.p99Ms} ms, max ${lateness.maxMs} ms`);
  await usage();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
