import { stringify as stringifyYaml } from 'yaml';
import { withDurationStrings } from './duration-keys.js';
import { keySource, redactConfig, type Config } from './load.js';
import type { ConfigSchema } from './schema.js';

type Tree = Record<string, unknown>;

/** Takes out every redacted secret (`***`), returning their dotted keys: a printed `***` would load back as a wrong secret or be refused. */
function takeSecrets(node: Tree, path: string[], out: string[]): void {
  for (const [k, v] of Object.entries(node)) {
    if (v === '***') {
      delete node[k];
      out.push([...path, k].join('.'));
    } else if (v && typeof v === 'object' && !Array.isArray(v)) takeSecrets(v as Tree, [...path, k], out);
  }
}

/**
 * `config check --print`: the effective configuration as a config file that loads back as the
 * same configuration, key for key. Durations are written as durations (`60s`, `1d`; a bare
 * number would mean seconds), derived facts (`mode`, where a key came from) are left out, and
 * secrets are named in the header instead of printed (they load back from where they came from,
 * usually their environment variables). URLs show their password as `***`. `schema` is the one
 * `cfg` was loaded with (it says which keys are durations).
 */
export function printConfigWith(cfg: Config, schema: ConfigSchema): string {
  const tree = withDurationStrings(redactConfig(cfg), schema) as Tree;
  delete tree.mode;
  const secrets: string[] = [];
  takeSecrets(tree, [], secrets);
  const named = secrets.map((k) => `${k} (${keySource(cfg.source.keys, cfg.source.file, k)})`);
  const head = ['# effective configuration: fed back as a config file it gives the same configuration', `# mode: ${cfg.mode} (from database.url and redis.url; not a key)`];
  if (named.length) head.push(`# secrets set but not printed: ${named.join(', ')}`);
  return `${head.join('\n')}\n${stringifyYaml(tree)}`;
}
