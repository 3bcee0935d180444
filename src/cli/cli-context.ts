import type { Command } from 'commander';
import type { CliContext, CliRuntime } from '../modules/area.js';
import type { Config } from '../config/load.js';
import type { Runtime } from '../app/runtime.js';
import { UserError } from '../config/errors.js';
import { masterKeyProblem } from '../config/replica-requirements.js';

/**
 * What the CLI gives every command, the areas' included: the configuration (loaded and checked with
 * every job's section) and a one-shot runtime. Both import their code when first called, so
 * `relay-jobs --version` or `relay-jobs backups` never loads the runtime.
 */
export const cliContext: CliContext = {
  async config(cmd: Command): Promise<Config> {
    const [{ loadConfig }, { checkJobSections }] = await Promise.all([import('../app/config-schema.js'), import('../app/registry.js')]);
    const file = (cmd.optsWithGlobals() as { config?: string }).config;
    // Every command but `start` and `config check` is a one-shot: it needs no instance id of its own.
    const replicaConfig = cmd.name() === 'start' || (cmd.name() === 'check' && cmd.parent?.name() === 'config');
    const config = loadConfig({ file, checkJobs: checkJobSections(), oneShot: !replicaConfig });
    // What `start` requires beyond the file, refused here in start's own words: `config check` passing means `start` gets past it.
    const keyProblem = replicaConfig ? masterKeyProblem(config) : undefined;
    if (keyProblem) throw new UserError(keyProblem);
    return config;
  },
  async runtime<S>(config: Config): Promise<CliRuntime<S>> {
    return (await oneShotRuntime(config)) as unknown as CliRuntime<S>;
  },
};

/**
 * The runtime of a one-shot command: no instance row, no heartbeat, warnings on stderr. In cluster
 * mode it runs under an id of its own, `<instance id>-cli-<pid>`, so a round it runs or a claim it
 * makes is never taken for a replica's, and the doctor does not count it as one.
 */
export async function oneShotRuntime(config: Config): Promise<Runtime> {
  const [{ Runtime }, { createLogger }] = await Promise.all([import('../app/runtime.js'), import('../telemetry/logger.js')]);
  // The suffix is kept whole (an id may be 64 characters, the most there is): the id is cut instead.
  const suffix = `-cli-${process.pid}`;
  const own: Config = config.mode === 'cluster' ? { ...config, instance: { ...config.instance, id: config.instance.id.slice(0, 64 - suffix.length) + suffix } } : config;
  return Runtime.create(own, {
    register: false,
    logger: createLogger({ level: 'warn', instanceId: own.instance.id, env: own.instance.env, destination: process.stderr as never }),
  });
}
