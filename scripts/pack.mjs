// Makes the npm package (`npm run pack`): a tarball that runs without this repository's sources.
//
//   npm run package -- [--out <dir>]     # node scripts/pack.mjs; default: the current directory; prints the tarball's path
//
// It builds aside, never in the working tree (a service started with `npm start` keeps running from
// dist/ and web/dist): the build inputs are copied into a staging directory that shares this
// checkout's node_modules, `scripts/build.mjs --if-stale` compiles dist/ and the console (web/dist)
// there, and `npm pack` packs the staging directory by package.json's `files`. The checkout's own
// dist/ and web/dist are copied too, every file with its modification time, so the build's own
// staleness rule decides: when they are up to date with the sources (right after `npm ci`, whose
// `prepare` built them) they are packed as they are, and the 30-odd CPU seconds of tsc and Vite are
// spent only when a source is newer.
//
// The staged package.json drops the `prepare` script. In a checkout it builds dist/ and web/dist on
// `npm ci`; in the package it would build from sources the package does not carry, and npm (11)
// counts a `prepare` of a package installed from a tarball or git as an install script, so every
// such install warned that relay-jobs' install script is "not yet covered by allowScripts".
// A plain `npm pack` or `npm publish` from the checkout would ship it: the `prepack` script
// (`--guard`) refuses them and names this script; publish the tarball this script makes. The staged
// package.json drops `prepack` too (the guard's file is not shipped).
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

if (process.argv.includes('--guard')) {
  process.stderr.write(
    "relay-jobs: pack the package with `npm run package` (scripts/pack.mjs), then `npm publish <tarball>`: a plain `npm pack`/`npm publish` ships the checkout's `prepare` script\n",
  );
  process.exit(1);
}

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outIndex = process.argv.indexOf('--out');
const out = resolve(outIndex > 0 ? process.argv[outIndex + 1] : '.');
// What scripts/build.mjs reads, and what package.json's `files` ships besides the build.
const INPUTS = ['src', 'scripts', 'tsconfig.json', 'web/src', 'web/index.html', 'web/vite.config.ts', 'web/tsconfig.json'];
// The checkout's build, reused by the staged build when it is up to date (dist/.built is its stamp).
const BUILT = ['dist', 'web/dist'];

const staging = mkdtempSync(join(tmpdir(), 'relay-jobs-pack-'));
try {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  const shipped = pkg.files.filter((f) => !f.startsWith('!') && !f.startsWith('dist') && !f.startsWith('web/dist')).map((f) => f.replace(/\/$/, ''));
  for (const p of [...INPUTS, ...shipped, ...BUILT]) {
    if (!existsSync(join(ROOT, p))) continue;
    mkdirSync(join(staging, p, '..'), { recursive: true });
    cpSync(join(ROOT, p), join(staging, p), { recursive: true, preserveTimestamps: true });
  }
  symlinkSync(join(ROOT, 'node_modules'), join(staging, 'node_modules'), 'dir');
  delete pkg.scripts.prepare;
  delete pkg.scripts.prepack;
  writeFileSync(join(staging, 'package.json'), `${JSON.stringify(pkg, null, 2)}\n`);
  // package.json is a build input to the staleness rule; the two scripts dropped here do not change
  // what is built, so the staged copy keeps the checkout's time.
  const { atime, mtime } = statSync(join(ROOT, 'package.json'));
  utimesSync(join(staging, 'package.json'), atime, mtime);
  execFileSync(process.execPath, ['scripts/build.mjs', '--if-stale'], { cwd: staging, stdio: ['ignore', 'inherit', 'inherit'] });
  mkdirSync(out, { recursive: true });
  const packed = execFileSync('npm', ['pack', '--json', '--pack-destination', out], {
    cwd: staging,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  process.stdout.write(`${join(out, JSON.parse(packed)[0].filename)}\n`);
} finally {
  rmSync(staging, { recursive: true, force: true });
}
