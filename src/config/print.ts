import { stringify as stringifyYaml } from 'yaml';
import { withDurationStrings } from './duration-keys.js';
import { keySource, redactConfig, type Config } from './load.js';
import type { ConfigSchema } from './schema.js';

type Tree = Record<string, unknown>;

/**
 * A PostgreSQL URL as printed: only the password is a secret. The role name is printed as it is (the
 * generic redaction masks a lone user name, which in other URLs may be a token: `https://TOKEN@host`),
 * so the printed file names the role it connects as, and loads back with the same role.
 */
function pgUrlShown(url: string | undefined, shown: unknown): unknown {
  if (!url) return shown;
  try {
    const u = new URL(url);
    if (!u.username || u.password || typeof shown !== 'string') return shown;
    const back = new URL(shown);
    back.username = u.username;
    return back.toString();
  } catch {
    return shown;
  }
}

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
 * usually their environment variables). URLs show their password as `***` (a PostgreSQL URL's role
 * name is not a secret and is printed); such a file loads only with the real value set where it came
 * from (config/redacted-values.ts refuses a `***` by key). `schema` is the one
 * `cfg` was loaded with (it says which keys are durations).
 */
export function printConfigWith(cfg: Config, schema: ConfigSchema): string {
  const tree = withDurationStrings(redactConfig(cfg), schema) as Tree;
  const database = tree.database as Tree;
  database.url = pgUrlShown(cfg.database.url, database.url);
  database.direct_url = pgUrlShown(cfg.database.direct_url, database.direct_url);
  const sql = tree.sql as Tree | undefined;
  if (sql) sql.database_url = pgUrlShown(cfg.sql.database_url, sql.database_url);
  delete tree.mode;
  const secrets: string[] = [];
  takeSecrets(tree, [], secrets);
  const named = secrets.map((k) => `${k} (${keySource(cfg.source.keys, cfg.source.file, k)})`);
  const head = ['# effective configuration: fed back as a config file it gives the same configuration', `# mode: ${cfg.mode} (from database.url and redis.url; not a key)`];
  if (named.length) head.push(`# secrets set but not printed: ${named.join(', ')}`);
  return `${head.join('\n')}\n${stringifyYaml(tree)}`;
}
