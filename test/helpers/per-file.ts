// Hooks every test file gets (vitest setupFiles run before each file, also when a worker runs
// several files in one process): a failed test prints the log tails of the live clusters.
import { afterEach } from 'vitest';
import { printClusterTails } from './cluster.js';

afterEach((ctx) => printClusterTails(ctx.task.result?.state === 'fail'));
