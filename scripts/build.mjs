// Compiles src/ to dist/ (or `--out <dir>`) and copies the non-TypeScript assets (Lua scripts)
// beside the output. The tree is built aside and swapped in with two renames, so a service
// running from the old tree never sees a half-deleted folder, and the CLI keeps its execute bit.
//
// `--if-stale` (the `prepare` script: `npm ci`, and `npx relay-jobs` in a checkout, which installs
// the checkout as a package) builds only when a source is newer than the last build, so running
// the CLI never rebuilds dist/ and web/dist under a service that is using them.
import { execFileSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const outIndex = process.argv.indexOf('--out');
const out = outIndex > 0 ? process.argv[outIndex + 1] : 'dist';
if (!out) throw new Error('--out needs a directory');
const STAMP = `${out}/.built`;
// `--transpile-only` (the tests' build, .test-dist/): each file compiled on its own by esbuild, in
// about a second instead of tsc's twenty; no type check (`npm run typecheck` does that), no
// declarations, no maps. tsconfig.json sets `isolatedModules`, so tsc refuses any code whose
// per-file output would differ from its own.
const transpileOnly = process.argv.includes('--transpile-only');

async function transpile(from, to) {
  const { build } = await import('esbuild');
  const files = readdirSync(from, { recursive: true })
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))
    .map((f) => join(from, f));
  await build({ entryPoints: files, outdir: to, outbase: from, format: 'esm', platform: 'node', target: 'node20', bundle: false, logLevel: 'warning' });
}
const withConsole = out === 'dist';

/** The newest modification time under the given files and folders (0 for none). */
function newest(paths) {
  let max = 0;
  for (const p of paths) {
    if (!existsSync(p)) continue;
    const st = statSync(p);
    max = Math.max(max, st.isDirectory() ? newest(readdirSync(p).map((n) => join(p, n))) : st.mtimeMs);
  }
  return max;
}

if (process.argv.includes('--if-stale')) {
  const sources = ['src', 'tsconfig.json', 'package.json', ...(withConsole ? ['web/src', 'web/index.html', 'web/vite.config.ts'] : [])];
  const built = existsSync(STAMP) && (!withConsole || existsSync('web/dist/index.html')) ? statSync(STAMP).mtimeMs : 0;
  if (built && built >= newest(sources)) {
    process.stdout.write(`relay-jobs: ${out}/${withConsole ? ' and web/dist' : ''} up to date; not rebuilt (npm run build forces a build)\n`);
    process.exit(0);
  }
}
const staging = `${out}.building-${process.pid}`;
const old = `${out}.old-${process.pid}`;

rmSync(staging, { recursive: true, force: true });
try {
  if (transpileOnly) await transpile('src', staging);
  else execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.json', '--outDir', staging], { stdio: 'inherit' });
  if (existsSync('src/coordination/scripts')) cpSync('src/coordination/scripts', `${staging}/coordination/scripts`, { recursive: true, filter: (p) => !p.endsWith('.ts') });
  chmodSync(`${staging}/cli/main.js`, 0o755);
  if (!withConsole) writeFileSync(`${staging}/.built`, `${new Date().toISOString()}\n`);
  if (existsSync(out)) renameSync(out, old);
  renameSync(staging, out);
} finally {
  rmSync(staging, { recursive: true, force: true });
  rmSync(old, { recursive: true, force: true });
}

// The web console (web/, Preact + uPlot) is bundled by Vite into web/dist, which the service serves
// at `/`. Only the service's own build makes it; the tests' CLI build (--out .test-dist) does not.
if (withConsole) {
  const { build } = await import('vite');
  await build({ configFile: 'web/vite.config.ts', logLevel: 'warn' });
  // The stamp is the last thing written: a build interrupted before here is stale next time.
  writeFileSync(STAMP, `${new Date().toISOString()}\n`);
}
