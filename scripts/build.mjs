// Compiles src/ to dist/ (or `--out <dir>`) and copies the non-TypeScript assets (Lua scripts)
// beside the output. The tree is built aside and swapped in with two renames, so a service
// running from the old tree never sees a half-deleted folder, and the CLI keeps its execute bit.
//
// `--if-stale` (the `prepare` script: `npm ci`, and `npx relay-jobs` in a checkout, which installs
// the checkout as a package) builds only when a source is newer than the last build, so running
// the CLI never rebuilds dist/ and web/dist under a service that is using them.
import { execFileSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const outIndex = process.argv.indexOf('--out');
const out = outIndex > 0 ? process.argv[outIndex + 1] : 'dist';
if (!out) throw new Error('--out needs a directory');
const STAMP = `${out}/.built`;
// `--bundle` (the tests' build, .test-dist/): esbuild bundles the CLI and the SQL console's snapshot
// worker, with their dependencies, into a few files, in about a second instead of tsc's twenty and
// with no type check (`npm run typecheck` does that). Every replica and CLI run a test spawns then
// loads a few large files instead of resolving ~1,000 small ones: a replica's start-up costs about
// half the CPU. Code that finds a file beside itself (`new URL('./x', import.meta.url)`: the Lua
// scripts, package.json, web/dist, the worker) sees the URL it would have in the per-file tree, so
// both trees keep the same layout. tsconfig.json sets `isolatedModules`, so tsc refuses any code
// whose per-file output would differ from esbuild's.
// Not a V8 startup snapshot of the bundle (`node --build-snapshot`, which would also skip evaluating
// it, about a third of a start's CPU): Node 20's snapshot builder cannot load `node:http`, which
// fastify and prom-client need at load ("methods.toSorted is not a function", 6-Dec-2026).
const bundle = process.argv.includes('--bundle');
const BUNDLE_ENTRIES = ['cli/main.ts', 'areas/admin/store/sql-snapshot-worker.js'];

async function bundleTree(from, to) {
  const { build } = await import('esbuild');
  const { readFile } = await import('node:fs/promises');
  const { relative, resolve } = await import('node:path');
  // A module's `import.meta.url` becomes the URL its own file would have at <to>/<path>.js, written
  // relative to <to>/cli/, where the CLI and every shared chunk land (checked below).
  const rewritten = new Set();
  const ownUrl = {
    name: 'own-import-meta-url',
    setup(b) {
      b.onLoad({ filter: /\.ts$/ }, async (args) => {
        let contents = await readFile(args.path, 'utf8');
        if (contents.includes('import.meta.url') && args.path.startsWith(resolve(from))) {
          const own = relative(resolve(from), args.path).replace(/\.ts$/, '.js');
          const rel = relative('cli', own);
          rewritten.add(relative(process.cwd(), args.path));
          contents = contents.replaceAll('import.meta.url', `new URL(${JSON.stringify(rel.startsWith('.') ? rel : `./${rel}`)}, import.meta.url).href`);
        }
        return { contents, loader: 'ts' };
      });
    },
  };
  // zod's translated error messages (`z.locales`: 62 languages, half of zod's code and most of the
  // bundle's non-ASCII text) are never used here: zod's own English default is imported apart, and
  // src/ never calls `z.config(z.locales.x())`. Left out of the bundle, every process a test starts
  // loads 360 KB less (6-Dec-2026, slow kind: `config check` 0.78 -> 0.72 CPU s, 8 alternated runs).
  const noZodLocales = {
    name: 'no-zod-locales',
    setup(b) {
      b.onResolve({ filter: /^\.\.\/locales\/index\.js$/ }, (args) => (/[\\/]node_modules[\\/]zod[\\/]v4[\\/]/.test(args.importer) ? { path: 'zod-locales', namespace: 'no-zod-locales' } : undefined));
      b.onLoad({ filter: /.*/, namespace: 'no-zod-locales' }, () => ({ contents: 'export {};', loader: 'js' }));
    },
  };
  // pg asks at load whether it runs in a Cloudflare Worker: where `navigator` is missing (Node 20)
  // it answers by constructing a `Response`, which loads Node's whole fetch implementation, about
  // 90 ms of CPU in a process that may never fetch (6-Dec-2026, slow kind, `--no-opt`). The bundle
  // only ever runs on Node, where the answer is no; Node 21+ has `navigator` and never paid it.
  const pgOnNode = {
    name: 'pg-on-node',
    setup(b) {
      b.onLoad({ filter: /[\\/]node_modules[\\/]pg[\\/]lib[\\/]stream\.js$/ }, async (args) => {
        const source = await readFile(args.path, 'utf8');
        const head = 'function isCloudflareRuntime() {';
        if (!source.includes(head)) throw new Error(`${args.path}: no ${head} to answer (pg changed; see scripts/build.mjs)`);
        return { contents: source.replace(head, `${head}\n  return false;`), loader: 'js' };
      });
    },
  };
  const { metafile } = await build({
    entryPoints: BUNDLE_ENTRIES.map((e) => join(from, e)),
    outdir: to,
    outbase: from,
    bundle: true,
    splitting: true,
    chunkNames: 'cli/[name]-[hash]',
    metafile: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    // Left as they are in node_modules: packages that load files beside their own modules (PGlite's
    // and libpg-query's WASM, pino's worker threads), and pg's optional native peer.
    external: ['@electric-sql/pglite', 'libpg-query', 'pino', 'pino-pretty', 'thread-stream', 'pg-native'],
    // Bundled CommonJS dependencies call require() for Node's built-ins and read __dirname.
    banner: {
      js: [
        "import { createRequire as __rjRequire } from 'node:module'; import { fileURLToPath as __rjPath } from 'node:url'; import { dirname as __rjDir } from 'node:path';",
        'const require = __rjRequire(import.meta.url); const __filename = __rjPath(import.meta.url); const __dirname = __rjDir(__filename);',
      ].join('\n'),
    },
    plugins: [ownUrl, noZodLocales, pgOnNode],
    logLevel: 'warning',
  });
  for (const [file, { inputs }] of Object.entries(metafile.outputs)) {
    const misplaced = Object.keys(inputs).filter((i) => rewritten.has(i));
    if (misplaced.length && relative(to, file).split('/')[0] !== 'cli') throw new Error(`${misplaced.join(', ')} landed in ${file}, outside ${to}/cli/: its import.meta.url would be wrong`);
  }
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
  // The script itself too: a change to how it builds (its plugins, say) is a change of the output.
  const sources = ['src', 'tsconfig.json', 'package.json', 'scripts/build.mjs', ...(withConsole ? ['web/src', 'web/index.html', 'web/vite.config.ts'] : [])];
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
  if (bundle) await bundleTree('src', staging);
  else execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.json', '--outDir', staging], { stdio: 'inherit' });
  if (existsSync('src/coordination/scripts')) cpSync('src/coordination/scripts', `${staging}/coordination/scripts`, { recursive: true, filter: (p) => !p.endsWith('.ts') });
  // The API reference page's renderer (src/http/openapi-routes.ts), shipped beside its module: redoc is a devDependency.
  mkdirSync(`${staging}/http`, { recursive: true });
  cpSync(require.resolve('redoc/bundles/redoc.standalone.js'), `${staging}/http/redoc.standalone.js`);
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
