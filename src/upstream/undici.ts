/**
 * undici, imported on first use. It is about a megabyte of code: a replica (or a CLI command) that
 * never calls a provider's token endpoint and never probes a channel does not parse it at start
 * (a replica's start-up CPU: see docs/benchmarks.md). Every client that uses undici takes it from
 * here; `import type` from 'undici' stays free.
 */
export type Undici = typeof import('undici');

let undici: Promise<Undici> | undefined;

export function loadUndici(): Promise<Undici> {
  // undici is CommonJS: Node's import() gives its exports by name as well as `default`, but a bundle
  // (esbuild, the tests' .test-dist) only `default`. module.exports, either way.
  return (undici ??= import('undici').then((m) => ('fetch' in m ? m : (m as { default: Undici }).default)));
}
