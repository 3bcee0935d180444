/** `npm run bench`: runs every benchmark and prints the results as Markdown for docs/benchmarks.md. */
import { idleTable, runIdle, runIdleEmbedded } from './idle.js';
import { cpus, totalmem } from 'node:os';
import { benchCoordination } from './coordination.js';
import { runScenario, scenarioTable } from './cluster-scenario.js';
import { benchRefreshThroughput, benchScheduler } from './token-refresh.js';
import { benchAggregation, benchCleanup, benchIngest, benchQuotaFlush } from './usage.js';
import { benchAlertEvaluation, benchCollector } from './ops.js';
import { benchOutbox, benchReads, benchRebuild, benchVisibility } from './scheduler-snapshot.js';
import { benchImageBatches } from './image-batches.js';
import { benchProbes, printProbes } from './probes.js';
import { benchBackup, printBackup } from './backup.js';
import buildCli from '../test/helpers/build-cli.js';
import { benchRefreshShards, shardTable } from './refresh-shards.js';
import { benchRedisSizing, benchTopology } from './topology.js';
import { benchPgliteOpen, benchStartup, pgliteOpenTable, startupTable } from './startup.js';

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

async function ops() {
  const sizes = (process.env.BENCH_OPS_ROWS ?? '1000000,10000000').split(',').map(Number);
  const col = await benchCollector(sizes);
  console.log('\n## Ops collector: one bucket of 1,000 rows in a table of N usage rows\n');
  console.log('| usage rows | bucket aggregate, index (ms) | same, index scans off (ms, baseline) | whole collector round (ms) |\n|---|---|---|---|');
  for (const c of col) console.log(`| ${c.rows} | ${c.indexMs.toFixed(2)} | ${c.seqScanMs.toFixed(1)} | ${c.roundMs.toFixed(2)} |`);
  if (col.length > 1) console.log(`\nratio (index, largest / smallest table): ${(col.at(-1)!.indexMs / col[0]!.indexMs).toFixed(2)}x`);
  const ev = await benchAlertEvaluation((process.env.BENCH_OPS_RULES ?? '1,1000').split(',').map(Number));
  console.log('\n## Alert evaluation round\n');
  console.log('| rules | every state changing (ms) | steady, nothing to write (ms) |\n|---|---|---|');
  for (const e of ev) console.log(`| ${e.rules} | ${e.changingMs.toFixed(1)} | ${e.steadyMs.toFixed(1)} |`);
}

async function snapshot() {
  const accounts = Number(process.env.BENCH_SNAPSHOT_ACCOUNTS ?? 6000);
  const n = Number(process.env.BENCH_SNAPSHOT_READS ?? 1000);
  console.log(`\n## Scheduler snapshot reads (one bucket of ${accounts / 3} accounts, ${n} reads per path)\n`);
  console.log('| path | p50 ms | p99 ms |\n|---|---|---|');
  const reads = await benchReads(accounts, n);
  for (const r of reads) console.log(`| ${r.path} | ${r.p50Ms.toFixed(3)} | ${r.p99Ms.toFixed(3)} |`);
  console.log(`\nratio (p50, PostgreSQL / snapshot): ${(reads[0]!.p50Ms / reads[1]!.p50Ms).toFixed(1)}x`);

  const rate = Number(process.env.BENCH_SNAPSHOT_RATE ?? 1000);
  const vis = await benchVisibility(10_000, rate, Number(process.env.BENCH_SNAPSHOT_SECONDS ?? 10), Number(process.env.BENCH_SNAPSHOT_POLL ?? 1000));
  console.log(`\n## Change-to-visible latency (${rate} changes/s for 10 s over 10,000 accounts, three consumers)\n`);
  console.log(
    `| changes | achieved changes/s | p50 ms | p99 ms |\n|---|---|---|---|\n| ${vis.changes} | ${(vis.changes / Number(process.env.BENCH_SNAPSHOT_SECONDS ?? 10)).toFixed(0)} | ${vis.p50Ms.toFixed(0)} | ${vis.p99Ms.toFixed(0)} |`,
  );

  console.log('\n## Full rebuild from PostgreSQL into an empty Redis (chunks of 2,000)\n');
  console.log('| accounts | seconds | longest chunk ms |\n|---|---|---|');
  for (const n of (process.env.BENCH_REBUILD ?? '10000,100000').split(',').map(Number)) {
    const r = await benchRebuild(n);
    console.log(`| ${r.accounts} | ${r.seconds.toFixed(2)} | ${r.longestChunkMs.toFixed(0)} |`);
  }

  const events = Number(process.env.BENCH_OUTBOX_EVENTS ?? 20_000);
  console.log(`\n## Outbox throughput (${events} events, three consumers)\n`);
  console.log('| design | events/s | events applied |\n|---|---|---|');
  const ob = await benchOutbox(events);
  for (const o of ob) console.log(`| ${o.design} | ${o.eventsPerSec.toFixed(0)} | ${o.applications} |`);
  console.log(`\nratio (events/s, relay-jobs / Sub2API): ${(ob[0]!.eventsPerSec / ob[1]!.eventsPerSec).toFixed(2)}x`);
}

async function images() {
  const r = await benchImageBatches(Number(process.env.BENCH_IMAGE_BATCHES ?? 500), Number(process.env.BENCH_IMAGE_CLAIMS ?? 5000));
  console.log('\n## Image batches (one BatchWorker, concurrency 8, loopback Batch API at 0 latency)\n');
  console.log(
    `| measure | value |\n|---|---|\n| batches driven to completed | ${r.batches} in ${r.seconds.toFixed(2)} s |\n| batches/s per replica | ${r.batchesPerSec.toFixed(1)} |\n| PostgreSQL statements per batch | ${r.statementsPerBatch.toFixed(1)} |`,
  );
  console.log(
    `\n| claim (4 claimers, ${r.claims} rows, one per claim) | claims/s |\n|---|---|\n| bare SKIP LOCKED claim (baseline) | ${r.bareClaimPerSec.toFixed(0)} |\n| ImageQueue.claim (SKIP LOCKED + lease + fence) | ${r.claimPerSec.toFixed(0)} |`,
  );
  console.log(`\nratio (ImageQueue / bare): ${(r.claimPerSec / r.bareClaimPerSec).toFixed(2)}x`);
}

async function probes() {
  const monitors = Number(process.env.BENCH_MONITORS ?? 10_000);
  const intervalS = Number(process.env.BENCH_MONITOR_INTERVAL_S ?? 60);
  const windowS = Number(process.env.BENCH_MONITOR_WINDOW_S ?? 60);
  printProbes(await benchProbes(monitors, intervalS, windowS), monitors, intervalS, windowS);
}

async function shards() {
  const accounts = Number(process.env.BENCH_SHARD_ACCOUNTS ?? 1000);
  const rows = [];
  for (const n of (process.env.BENCH_REPLICAS ?? '3,9').split(',').map(Number)) {
    if (process.env.BENCH_BASE_CLI) rows.push(await benchRefreshShards(n, accounts, process.env.BENCH_BASE_CLI, 'before (base)'));
    rows.push(await benchRefreshShards(n, accounts));
  }
  console.log(`\n## Refresh work shared among replicas (${accounts} accounts, 30 s tokens, one replica SIGKILLed)\n`);
  console.log(shardTable(rows));
}

async function startup() {
  console.log(`machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${new Date().toISOString()}`);
  console.log('\n## Replica start-up (spawn → /readyz 200; cluster and embedded mode, migrated databases)\n');
  console.log(startupTable(await benchStartup()));
  console.log('\n## One PGlite open (an existing data directory, in-process), by buffer pool\n');
  console.log(pgliteOpenTable(await benchPgliteOpen()));
}

async function coordinationAndRefresh() {
  const rounds = Number(process.env.BENCH_ROUNDS ?? 2000);
  console.log(`machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${new Date().toISOString()}`);
  const { baseline, full } = await benchCoordination(rounds);
  console.log('\n## Per-round coordination overhead (loopback Redis + PostgreSQL)\n');
  console.log('| round | rounds | median ms | p99 ms | Redis cmds/round | PG statements/round | round trips/round |');
  console.log('|---|---|---|---|---|---|---|');
  for (const [name, s] of [
    ['bare SET NX + DEL (baseline)', baseline],
    ['relay-jobs no-op cluster round', full],
  ] as const) {
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
  // One lane: the time a refresh spends in coordination, without the bench's own CPU contention.
  const one = (await benchRefreshThroughput(Number(process.env.BENCH_REFRESHES_ONE_LANE ?? 1500), 1)).results;
  const perRefresh = (r: { perSecond: number }) => 1000 / r.perSecond;
  console.log('\n## One refresh at a time (concurrency 1)\n');
  console.log('| path | ms per refresh |\n|---|---|');
  for (const t of one) console.log(`| ${t.path} | ${perRefresh(t).toFixed(2)} |`);
  console.log(`\ncoordination per refresh: ${(perRefresh(one[1]!) - perRefresh(one[0]!)).toFixed(2)} ms`);
  console.log(`\n## Refresh lateness (stored − due), ${lateness.accounts} accounts due over ${lateness.windowS} s\n`);
  console.log(`p50 ${lateness.p50Ms} ms, p99 ${lateness.p99Ms} ms, max ${lateness.maxMs} ms`);
}

async function benchmarks() {
  if (process.env.BENCH_ONLY === 'soak') return import('./soak.js').then((s) => s.soak());
  if (process.env.BENCH_ONLY === 'hotpath') return import('./hotpath.js').then(async (h) => console.log(h.hotpathTable(await h.benchHotpath())));
  if (process.env.BENCH_ONLY === 'latency') return import('./latency.js').then(async (l) => console.log(l.latencyTable(await l.runLatency())));
  if (process.env.BENCH_ONLY === 'scaling') return import('./scaling.js').then((s) => s.scaling());
  if (process.env.BENCH_ONLY === 'ops') return ops();
  if (process.env.BENCH_ONLY === 'prepared') return import('./prepared.js').then(async (p) => console.log(p.preparedTable(await p.benchPrepared())));
  if (process.env.BENCH_ONLY === 'snapshot') return snapshot();
  if (process.env.BENCH_ONLY === 'images') return images();
  if (process.env.BENCH_ONLY === 'probes') return probes();
  if (process.env.BENCH_ONLY === 'backup') {
    const sizes = (process.env.BENCH_BACKUP_ROWS ?? '1000000').split(',').map(Number);
    const results = [];
    for (const n of sizes) results.push(await benchBackup(n));
    return printBackup(results);
  }
  if (process.env.BENCH_ONLY === 'usage') return usage();
  if (process.env.BENCH_ONLY === 'shards') return shards();
  if (process.env.BENCH_ONLY === 'topology') {
    console.log(`machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, ${new Date().toISOString()}`);
    console.log('\n## Production topology (bench/topology.ts)\n');
    console.log(await benchTopology());
    console.log('\n## Redis memory (sizing)\n');
    return console.log(await benchRedisSizing());
  }
  if (process.env.BENCH_ONLY === 'coordination') return coordinationAndRefresh();
  if (process.env.BENCH_ONLY === 'startup') return startup();
  if (process.env.BENCH_ONLY === 'idle') {
    const rows = [];
    for (const n of (process.env.BENCH_REPLICAS ?? '1,3,9').split(',').map(Number))
      for (const on of { on: [true], off: [false] }[process.env.BENCH_WAKEUPS ?? ''] ?? [true, false]) rows.push(await runIdle(n, on));
    if (process.env.BENCH_EMBEDDED === '1') rows.push(await runIdleEmbedded());
    return console.log(idleTable(rows));
  }
  if (process.env.BENCH_ONLY === 'cluster') {
    const rows = [];
    for (const n of (process.env.BENCH_REPLICAS ?? '3,9').split(',').map(Number)) rows.push({ build: 'this build', ...(await runScenario(n)) });
    console.log(scenarioTable(rows));
    return;
  }
  if (process.env.BENCH_ONLY === 'cleanup') {
    for (const c of await benchCleanup(Number(process.env.BENCH_CLEANUP_ROWS ?? 1_000_000)))
      console.log(`| ${c.method} | ${c.rows} | ${c.seconds.toFixed(2)} | ${c.rowsPerSec.toFixed(0)} | ${c.longestTxMs.toFixed(0)} |`);
    return;
  }
  await coordinationAndRefresh();
  await usage();
  await ops();
  await snapshot();
  await images();
  await probes();
  await shards();
  await startup();
  console.log('\n## Production topology (bench/topology.ts)\n');
  console.log(await benchTopology());
  console.log('\n## Redis memory (sizing)\n');
  console.log(await benchRedisSizing());
}

/**
 * The process benchmarks (probes, cluster) spawn the CLI's test build: the tests' global setup makes
 * it current first, with the run's temporary folder and migrated template database, which its
 * teardown removes (a bench that did not await it left the template behind on the shared server).
 */
async function main() {
  const teardown = await buildCli();
  try {
    await benchmarks();
  } finally {
    await teardown();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
