import type { Config } from '../config/load.js';
import { Runtime } from '../app/runtime.js';
import { buildHttpServer } from '../http/server.js';
import { UserError } from '../config/errors.js';

/**
 * `relay-jobs start`: runs until SIGTERM/SIGINT. The first signal runs the shutdown ladder
 * and exits 0 once it is done; a second signal exits 130 at once.
 */
export async function startService(config: Config): Promise<void> {
  const rt = await Runtime.create(config);
  const http = buildHttpServer(rt);
  try {
    await http.listen({ port: config.http.port, host: config.http.host });
  } catch (err) {
    await rt.shutdown('http listen failed');
    throw new UserError(`cannot listen on ${config.http.host}:${config.http.port} (RELAY_JOBS_HTTP_PORT): ${(err as Error).message}`);
  }
  rt.start({ close: () => http.close() });
  const enabled = rt.jobs.filter((j) => j.settings.enabled).map((j) => j.name);
  rt.log.info({ mode: config.mode, http_port: (http.server.address() as { port: number }).port, jobs: enabled }, 'relay-jobs started');

  let signals = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    signals++;
    if (signals > 1) {
      rt.log.error({ signal: sig }, 'second signal: exiting now without a clean drain');
      process.exit(130);
    }
    rt.shutdown(`received ${sig}`).then(
      () => process.exit(0),
      (err) => {
        rt.log.error({ err: (err as Error).message }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}
