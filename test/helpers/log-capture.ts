import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../src/telemetry/logger.js';

/** A JSON logger whose lines the test can read (and search for leaked secrets). */
export function captureLogs(instanceId = 'test', level = 'debug'): { lines: Array<Record<string, unknown>>; text: () => string; logger: Logger; stream: Writable } {
  const lines: Array<Record<string, unknown>> = [];
  const raw: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) {
        if (!l.trim()) continue;
        raw.push(l);
        lines.push(JSON.parse(l));
      }
      cb();
    },
  });
  return { lines, stream, text: () => raw.join('\n'), logger: createLogger({ level, instanceId, env: 'test', destination: stream }) };
}
