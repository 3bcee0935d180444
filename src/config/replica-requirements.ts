import type { Config } from './load.js';

/**
 * What a replica needs beyond a valid configuration, checked where the configuration of a replica is
 * loaded (`start` and `config check`: cli/cli-context.ts) and again where the backends open
 * (app/backends.ts, for an embedding that builds its Runtime without the CLI), in the same words:
 * `config check` passing means `start` gets past its configuration. One-shot commands that need
 * the runtime meet the backends' check; those that only talk HTTP (`backups`) need no key.
 */
export function masterKeyProblem(config: Config): string | undefined {
  if (config.mode === 'cluster' && !config.security.master_key) {
    return 'RELAY_JOBS_MASTER_KEY is not set: cluster mode encrypts account credentials with it; give every replica the same 32 random bytes in base64 (e.g. `openssl rand -base64 32`)';
  }
  return undefined;
}
