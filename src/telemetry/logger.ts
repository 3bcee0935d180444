import { createRequire } from 'node:module';
import pino, { type Logger } from 'pino';
import type { PrettyOptions, PrettyStream } from 'pino-pretty';

export type { Logger };

/** Fields that may carry secrets anywhere in a log object; pino replaces their values. */
const REDACT = ['token', 'access_token', 'refresh_token', 'id_token', 'password', 'secret', 'admin_token', 'authorization', '*.token', '*.password', '*.authorization', 'req.headers.authorization'];

export type LogFormat = 'json' | 'pretty';

/** pino-pretty (and its dozen modules) only for a process that prints for a human. */
function pretty(opts: PrettyOptions): PrettyStream {
  const { build } = createRequire(import.meta.url)('pino-pretty') as { build: (o: PrettyOptions) => PrettyStream };
  return build(opts);
}

/**
 * One JSON object per line on stdout, with instance and env on every event. `pretty`
 * (`RELAY_JOBS_LOG_FORMAT=pretty`) prints the same events as coloured lines for a human at a
 * terminal; it is written synchronously too, so nothing is lost at exit.
 */
export function createLogger(opts: { level: string; instanceId: string; env: string; format?: LogFormat; destination?: pino.DestinationStream }): Logger {
  const destination =
    opts.destination ??
    (opts.format === 'pretty'
      ? pretty({ sync: true, colorize: Boolean(process.stdout.isTTY), translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname,env', singleLine: true })
      : pino.destination({ sync: true }));
  return pino(
    {
      level: opts.level,
      base: { instance_id: opts.instanceId, env: opts.env },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: REDACT, censor: '***' },
    },
    destination,
  );
}

export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
