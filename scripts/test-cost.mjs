// Prints the per-file cost report written by test/helpers/cpu-probe.ts, most CPU first, then what
// the whole machine spent during the run (test/helpers/machine-load.ts):
//   RELAY_TEST_CPU_DIR=/tmp/cpu npx vitest run && node scripts/test-cost.mjs /tmp/cpu
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.argv[2];
if (!dir) {
  console.error('usage: node scripts/test-cost.mjs <dir written by RELAY_TEST_CPU_DIR>');
  process.exit(2);
}
const rows = readdirSync(dir)
  .filter((f) => f.endsWith('.test.ts.json'))
  .map((f) => JSON.parse(readFileSync(join(dir, f), 'utf8')))
  .sort((a, b) => b.cpu_s - a.cpu_s);
const sum = (k) => rows.reduce((s, r) => s + (r[k] ?? 0), 0);
const faults = (r) => `${(((r.minor_faults ?? 0) / 1000) | 0).toString().padStart(6)}k faults`;
const spawned = (r) => (r.cli_runs || r.services ? `  (${r.services} services, ${r.cli_runs} CLI runs)` : '');
console.log(
  `${rows.length} files: ${sum('cpu_s').toFixed(0)} CPU s (${sum('children_cpu_s').toFixed(0)} of it in processes they started), ${sum('wall_s').toFixed(0)} wall s summed, ${(sum('minor_faults') / 1e6).toFixed(1)}M minor page faults; ` +
    `relay-jobs started ${sum('services')} times as a service, ${sum('cli_runs')} one-shot CLI runs`,
);
for (const r of rows)
  console.log(`${r.cpu_s.toFixed(1).padStart(7)} CPU s ${(r.children_cpu_s ?? 0).toFixed(1).padStart(5)} children ${r.wall_s.toFixed(1).padStart(7)} wall s ${faults(r)}  ${r.file}${spawned(r)}`);

const machineFile = join(dir, 'machine.json');
if (existsSync(machineFile)) {
  const m = JSON.parse(readFileSync(machineFile, 'utf8'));
  console.log(
    `\nthe machine: ${m.busy_cpu_s.toFixed(0)} CPU s busy in ${m.wall_s.toFixed(0)} s on ${m.cpus} CPUs (${((100 * m.busy_cpu_s) / (m.wall_s * m.cpus)).toFixed(0)}% busy); ` +
      "processes that ran from the start of the run to its end (servers, the kernel's threads, anything else on the machine):",
  );
  for (const p of m.processes_alive_throughout) console.log(`${p.cpu_s.toFixed(1).padStart(7)} CPU s ${faults(p)}  ${p.name}`);
}
