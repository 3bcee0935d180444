import type { Command } from 'commander';
import type { CliContext, CliRuntime } from '../jobs/area.js';
import type { Config } from '../config/load.js';

/**
 * What the CLI gives every command, the areas' included: the configuration (loaded and checked with
 * every job's section) and a one-shot runtime. Both import their code when first called, so
 * `relay-jobs --version` or `relay-jobs backups` never loads the runtime.
 */
export const cliContext: CliContext = {
  async config(cmd: Command): Promise<Config> {
    const [{ loadConfig }, { checkJobSections }] = await Promise.all([import('../jobs/config-schema.js'), import('../jobs/registry.js')]);
    const file = (cmd.optsWithGlobals() as { config?: string }).config;
    return loadConfig({ file, checkJobs: checkJobSections() });
  },
  async runtime<S>(config: Config): Promise<CliRuntime<S>> {
    const [{ Runtime }, { createLogger }] = await Promise.all([import('../app/runtime.js'), import('../telemetry/logger.js')]);
    const rt = await Runtime.create(config, {
      register: false,
      logger: createLogger({ level: 'warn', instanceId: config.instance.id, env: config.instance.env, destination: process.stderr as never }),
    });
    return rt as unknown as CliRuntime<S>;
  },
};
