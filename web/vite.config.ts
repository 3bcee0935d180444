import { defineConfig } from 'vite';
import { fileURLToPath } from 'node:url';

// The console bundle: Preact + uPlot, built to web/dist and served by the service at `/`.
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/',
  logLevel: 'warn',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: { outDir: 'dist', emptyOutDir: true, sourcemap: false, chunkSizeWarningLimit: 400, reportCompressedSize: false },
});
