import pino, { type Logger } from 'pino';

export type { Logger };

/** Fields that may carry secrets anywhere in a log object; pino replaces their values. */
const REDACT = ['token', 'access_token', 'refresh_token', 'id_token', 'password', 'secret', 'admin_token', 'authorization', '*.token', '*.password', '*.authorization', 'req.headers.authorization'];

/** One JSON object per line on stdout, with instance and env on every event. */
export function createLogger(opts: { level: string; instanceId: string; env: string; destination?: pino.DestinationStream }): Logger {
  return pino(
    {
      level: opts.level,
      base: { instance_id: opts.instanceId, env: opts.env },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: REDACT, censor: '***' },
    },
    opts.destination ?? pino.destination({ sync: true }),
  );
}

export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
