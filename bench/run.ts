/** `npm run bench`: runs every benchmark and prints the results as Markdown for docs/benchmarks.md. */
import { cpus, totalmem } from 'node:os';
import { benchCoordination } from './coordination.js';

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
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
