// Compiles src/ to dist/ (or `--out <dir>`) and copies the non-TypeScript assets (Lua scripts)
// beside the output. The tree is built aside and swapped in with two renames, so a service
// running from the old tree never sees a half-deleted folder, and the CLI keeps its execute bit.
import { execFileSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, renameSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const outIndex = process.argv.indexOf('--out');
const out = outIndex > 0 ? process.argv[outIndex + 1] : 'dist';
if (!out) throw new Error('--out needs a directory');
const staging = `${out}.building-${process.pid}`;
const old = `${out}.old-${process.pid}`;

rmSync(staging, { recursive: true, force: true });
try {
  execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.json', '--outDir', staging], { stdio: 'inherit' });
  if (existsSync('src/coordination/scripts')) cpSync('src/coordination/scripts', `${staging}/coordination/scripts`, { recursive: true, filter: (p) => !p.endsWith('.ts') });
  chmodSync(`${staging}/cli/main.js`, 0o755);
  if (existsSync(out)) renameSync(out, old);
  renameSync(staging, out);
} finally {
  rmSync(staging, { recursive: true, force: true });
  rmSync(old, { recursive: true, force: true });
}

// The web console (web/, Preact + uPlot) is bundled by Vite into web/dist, which the service serves
// at `/`. Only the service's own build makes it; the tests' CLI build (--out .test-dist) does not.
if (out === 'dist') {
  const { build } = await import('vite');
  await build({ configFile: 'web/vite.config.ts', logLevel: 'warn' });
}
