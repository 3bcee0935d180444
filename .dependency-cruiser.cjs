/**
 * Layering of src/ (see docs/architecture.md): imports only point down this list.
 *   cli, http  →  app  →  jobs  →  doctor  →  scheduler  →  coordination  →  store, upstream, workers  →  config, telemetry, time  →  errors
 * Type-only imports count: a circle through types is still a circle.
 */
const layers = [['cli', 'http'], ['app'], ['jobs'], ['doctor'], ['scheduler'], ['coordination'], ['store', 'upstream', 'workers'], ['config', 'telemetry', 'time'], ['errors']];

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
    exclude: { path: '^(node_modules|dist)/' },
  },
};
