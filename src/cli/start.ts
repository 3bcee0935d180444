import type { Config } from '../config/load.js';
import { Runtime } from '../app/runtime.js';
import { buildHttpServer } from '../http/server.js';
import { applyConnectionCap, ServerIngress } from '../http/connection-limits.js';
import { startedByScript, watchParent } from './parent-watch.js';
import { checkPortFree, portError } from './port-check.js';
import { createLogger } from '../telemetry/logger.js';
import { StartupInterrupted } from '../app/startup-abort.js';
import { timeout, type Cancel } from '../time/wall.js';

/**
 * A forced exit (second signal) still waits this long for work only this process can store (the
 * areas' ForcedExitSaver: refresh calls already sent to the OAuth provider, whose replies alone
 * hold a rotated refresh token). Short, so a forced exit stays a forced exit; what could not be
 * saved is logged at error level.
 */
export const FORCED_EXIT_WAIT_MS = 5000;

/**
 * `relay-jobs start`: runs until SIGTERM/SIGINT. The first signal runs the shutdown ladder
 * and exits 0 once it is done; a second signal exits 130 after at most FORCED_EXIT_WAIT_MS
 * (in-flight refresh calls are stored, or their accounts named); a third exits 130 at once. The handlers are installed
 * before anything starts: a signal during start-up (a rollout replacing a pod that is still
 * migrating) lets start-up finish its step, then shuts down cleanly instead of dying mid-write.
 * Start-up always ends (issue 49): a wait for a server that does not answer (PostgreSQL, Redis,
 * sentinels, cluster nodes) holds nothing, so a signal ends it at once and the process exits 0
 * naming what it waited on; any other step still running `shutdown.grace` after the signal is
 * abandoned (exit 1, one line), so a start-up step that hangs cannot outlive the stop.
 */
export async function startService(config: Config): Promise<void> {
  let rt: Runtime | null = null;
  let early: NodeJS.Signals | null = null;
  let signals = 0;
  const log = createLogger({ level: config.logging.level, format: config.logging.format, instanceId: config.instance.id, env: config.instance.env });
  const startup = new AbortController();
  let abandon: Cancel | undefined;
  const stop = (runtime: Runtime, reason: string) =>
    runtime.shutdown(reason).then(
      () => process.exit(0),
      (err) => {
        runtime.log.error({ err: (err as Error).message }, 'shutdown failed');
        process.exit(1);
      },
    );
  const onSignal = (sig: NodeJS.Signals) => {
    signals++;
    if (signals > 1) {
      const savers = rt?.forcedExitSavers.filter((s) => s.pending()) ?? [];
      if (signals > 2 || !savers.length) {
        for (const s of rt?.forcedExitSavers ?? []) s.abandon();
        rt?.log.error({ signal: sig }, 'second signal: exiting now without a clean drain');
        process.exit(130);
      }
      void Promise.all(savers.map((s) => s.save(FORCED_EXIT_WAIT_MS))).then(() => process.exit(130));
      return;
    }
    if (rt) void stop(rt, `received ${sig}`);
    else {
      early = sig;
      startup.abort(sig);
      abandon = timeout(
        () => {
          log.error({ signal: sig, grace_ms: config.shutdown.grace }, `start-up still running shutdown.grace after ${sig}: exiting without a drain`);
          process.exit(1);
        },
        config.shutdown.grace,
        { unref: true },
      );
    }
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  if (startedByScript()) {
    watchParent((parent) => {
      if (rt) void stop(rt, `parent process ${parent} exited (started by \`npm start\`)`);
      else {
        early = 'SIGHUP';
        startup.abort('SIGHUP');
      }
    });
  }

  await checkPortFree(config);
  let runtime: Runtime;
  try {
    runtime = rt = await Runtime.create(config, { logger: log, signal: startup.signal });
    abandon?.(); // started: the shutdown ladder bounds the stop from here
  } catch (err) {
    if (!(err instanceof StartupInterrupted)) throw err;
    log.warn({ signal: early }, err.message);
    process.exit(0);
  }
  if (early) return void stop(runtime, `received ${early} during start-up`);
  const http = buildHttpServer(runtime);
  try {
    await http.listen({ port: config.http.port, host: config.http.host });
  } catch (err) {
    await runtime.shutdown('http listen failed');
    throw portError(config, err as NodeJS.ErrnoException);
  }
  applyConnectionCap(http, config);
  runtime.start(new ServerIngress(http));
  const enabled = runtime.jobs.filter((j) => j.settings.enabled).map((j) => j.name);
  runtime.log.info(
    { mode: config.mode, pid: process.pid, http_port: (http.server.address() as { port: number }).port, jobs: enabled },
    'relay-jobs started: ready, serving HTTP and running the enabled jobs',
  );
}
