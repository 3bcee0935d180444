// Compiles src/ to dist/ and copies the non-TypeScript assets (Lua scripts) beside the output.
import { execFileSync } from 'node:child_process';
import { cpSync, rmSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
rmSync('dist', { recursive: true, force: true });
execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.json'], { stdio: 'inherit' });
if (existsSync('src/coordination/scripts')) cpSync('src/coordination/scripts', 'dist/coordination/scripts', { recursive: true, filter: (p) => !p.endsWith('.ts') });

// The web console (web/, Preact + uPlot) is bundled by Vite into web/dist, which the service serves at `/`.
const { build } = await import('vite');
await build({ configFile: 'web/vite.config.ts', logLevel: 'warn' });
