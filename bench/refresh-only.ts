/** `tsx bench/refresh-only.ts`: only the sustained-refresh figure of bench/token-refresh.ts (bare calls vs the Refresher, same run). */
import { benchRefreshThroughput } from './token-refresh.js';

const n = Number(process.env.BENCH_REFRESHES ?? 3000);
const { results } = await benchRefreshThroughput(n);
for (const t of results)
  console.log(`| ${t.path} | ${t.refreshes} | ${t.seconds.toFixed(2)} | ${t.perSecond.toFixed(0)} | ${t.cpu?.benchMs.toFixed(3) ?? ''} | ${t.cpu?.postgresMs.toFixed(3) ?? ''} |`);
const [bare, full] = [results[0]!, results[1]!];
console.log(`ratio ${(full.perSecond / bare.perSecond).toFixed(2)}x; coordination per refresh per lane (concurrency 8): ${((8 / full.perSecond - 8 / bare.perSecond) * 1000).toFixed(1)} ms`);
