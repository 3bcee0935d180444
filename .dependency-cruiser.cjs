/**
 * Two kinds of folders (docs/architecture.md): the kernel (every folder of src/ but areas/) and
 * src/areas/<area>/, one capability each. The kernel knows no area; an area imports the kernel and
 * other areas' index.ts only.
 *
 * Layering of the kernel: imports only point down this list.
 *   cli, http  →  app  →  modules  →  scheduler  →  coordination  →  store, upstream, workers  →  config, telemetry  →  time  →  errors
 * Type-only imports count: a circle through types is still a circle.
 */
const layers = [['cli', 'http'], ['app'], ['modules'], ['scheduler'], ['coordination'], ['store', 'upstream', 'workers'], ['config', 'telemetry'], ['time'], ['errors']];

const rules = [];
layers.forEach((group, i) => {
  const above = layers.slice(0, i).flat();
  // Folders on the same level know nothing of each other, except cli, which starts the http server.
  const siblings = group.length > 1 && group[0] !== 'cli' ? group : [];
  for (const folder of group) {
    const forbidden = [...above, ...siblings.filter((s) => s !== folder)];
    if (!forbidden.length) continue;
    rules.push({
      name: `layer-${folder}`,
      comment: `src/${folder} may not import ${forbidden.join(', ')}: imports point down the layers (docs/architecture.md)`,
      severity: 'error',
      from: { path: `^src/${folder}/` },
      to: { path: `^src/(${forbidden.join('|')})/` },
    });
  }
});
/**
 * The composition root is on top: src/app/ (the area list, app/registry.ts, and what is composed from
 * it: the schema, the migrations, the runtime), src/cli/ and the library's exports (src/index.ts) are
 * the only kernel files that may name an area, and they name its face only: area.ts, index.ts,
 * config.ts, metrics.ts. No other exception.
 */
const ROOT = '^src/(app/|cli/|index\\.ts$)';
rules.push({
  name: 'kernel-not-area',
  comment: 'the kernel knows no area: only the composition root (src/app/, src/cli/, src/index.ts) names src/areas/',
  severity: 'error',
  from: { path: '^src/(?!areas/)', pathNot: ROOT },
  to: { path: '^src/areas/' },
});
rules.push({
  name: 'composition-through-face',
  comment: "the composition root names an area's module, public face, config section or metrics only, never its internals",
  severity: 'error',
  from: { path: ROOT },
  to: { path: '^src/areas/', pathNot: '^src/areas/[^/]+/(area|index|config|metrics)\\.ts$' },
});
rules.push({
  name: 'area-through-index',
  comment: "an area imports another area only through that area's index.ts (its public face), never its internals",
  severity: 'error',
  from: { path: '^src/areas/([^/]+)/' },
  to: { path: '^src/areas/[^/]+/', pathNot: ['^src/areas/$1/', '^src/areas/[^/]+/index\\.ts$'] },
});
rules.push({
  name: 'area-store-down',
  comment: "an area's repositories (store/) know nothing of its routes, wiring or jobs: routes → services → repositories",
  severity: 'error',
  from: { path: '^src/areas/([^/]+)/store/' },
  to: { path: '^src/areas/$1/', pathNot: '^src/areas/$1/store/' },
});
/**
 * Libraries that only some replicas use, loaded on first use so a replica's start does not parse
 * them (docs/benchmarks.md, start-up): undici (token refreshes and probes, through
 * upstream/undici.ts), nodemailer (a replica that mails) and pino-pretty (a human at a terminal).
 * Type-only and dynamic imports are free.
 */
rules.push({
  name: 'lazy-heavy-libraries',
  comment: 'undici, nodemailer, pino-pretty and OpenTelemetry are loaded on first use: import their types, or import() them (through upstream/undici.ts, telemetry/tracing.ts)',
  severity: 'error',
  from: { path: '^src/' },
  to: { path: '^node_modules/(undici|nodemailer|pino-pretty|@opentelemetry)/', dependencyTypesNot: ['type-only', 'type-import', 'dynamic-import'] },
});
rules.push({
  name: 'client-standalone',
  severity: 'error',
  comment: 'src/client/ is the package export relay-jobs/client, loaded by gateways: it imports nothing else of src/',
  from: { path: '^src/client/' },
  to: { path: '^src/(?!client/)' },
});
rules.push({ name: 'http-not-cli', severity: 'error', comment: 'http/ may not import cli/', from: { path: '^src/http/' }, to: { path: '^src/cli/' } });

module.exports = {
  forbidden: [
    { name: 'no-circular', severity: 'error', comment: 'import circles (type imports included) make layers meaningless', from: {}, to: { circular: true } },
    { name: 'not-to-test', severity: 'error', comment: 'src/ never imports tests or benchmarks', from: { path: '^src/' }, to: { path: '^(test|bench)/' } },
    ...rules,
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    // node_modules stays in the graph as leaves (doNotFollow), so rules can name a package.
    exclude: { path: '^dist/' },
  },
};
