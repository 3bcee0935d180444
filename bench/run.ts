/** `npm run bench`: runs every benchmark and prints the results as Markdown for docs/benchmarks.md. */
import { cpus, totalmem } from 'node:os';
import { benchCoordination } from './coordination.js';
import { benchRefreshThroughput, benchScheduler } from './token-refresh.js';

const fmt = (n: number) => n.toFixed(3);

async function main() {
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
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
