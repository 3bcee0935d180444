import { hostname } from 'node:os';
import { closest } from './closest.js';
import { readFileSync } from 'node:fs';
import { parse as parseYaml, YAMLParseError } from 'yaml';
import { formatIssues, type ConfigFile, type ConfigSchema } from './schema.js';
import { ConfigError } from './errors.js';
import { redactUrl } from './redact-url.js';
import { bareNumberWarnings } from './duration-keys.js';
import { configErrorMap } from './error-map.js';
import { moveDeprecatedKeys } from './deprecated-keys.js';
import { redactedValueProblems } from './redacted-values.js';

export type Mode = 'embedded' | 'cluster';
/** `source.keys`: where each key set by a variable came from (the file otherwise), for error messages. */
/** `warnings`: things that load but are probably not what was meant (a bare number of seconds that looks like milliseconds). */
export type Config = ConfigFile & { mode: Mode; instance: { id: string; env: string }; source: { file?: string; keys: Map<string, string> }; warnings: string[] };

/** Pinned environment variables (DESIGN.md) and the config path each one sets. */
export const ENV_KEYS: Record<string, string[]> = {
  DATABASE_URL: ['database', 'url'],
  DATABASE_DIRECT_URL: ['database', 'direct_url'],
  REDIS_URL: ['redis', 'url'],
  RELAY_JOBS_INSTANCE_ID: ['instance', 'id'],
  RELAY_JOBS_ENV: ['instance', 'env'],
  RELAY_JOBS_DATA_DIR: ['database', 'data_dir'],
  RELAY_JOBS_HTTP_PORT: ['http', 'port'],
  RELAY_JOBS_ADMIN_TOKEN: ['http', 'admin_token'],
  RELAY_JOBS_MASTER_KEY: ['security', 'master_key'],
  RELAY_JOBS_LOG_FORMAT: ['logging', 'format'],
};
const OVERRIDE_PREFIX = 'RELAY_JOBS__';
/** Other `RELAY_JOBS_*` variables that are not config keys: read elsewhere (the config file's path, the tests' contract check, the client examples' service URL) or by the deploy files. */
const OTHER_VARIABLES = new Set(['RELAY_JOBS_CONFIG', 'RELAY_JOBS_CONTRACT_CHECK', 'RELAY_JOBS_URL', 'RELAY_JOBS_DB_PASSWORD', 'RELAY_JOBS_CONSOLE_DB_PASSWORD']);

/** What Kubernetes sets in every pod for a Service named `relay-jobs` (service links: `RELAY_JOBS_SERVICE_HOST`, `RELAY_JOBS_PORT_8080_TCP_ADDR`, …). */
const SERVICE_LINK = /^RELAY_JOBS_(SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT(_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$/;

/** `RELAY_JOBS_*` variables relay-jobs does not read (`RELAY_JOBS_HTTP_PROT`): ignored, so said, with the nearest one it reads. */
function unknownVariables(env: NodeJS.ProcessEnv): string[] {
  const known = [...Object.keys(ENV_KEYS), ...OTHER_VARIABLES];
  return Object.keys(env)
    .filter((n) => n.startsWith('RELAY_JOBS_') && !n.startsWith(OVERRIDE_PREFIX) && !known.includes(n) && !n.startsWith('RELAY_JOBS_TEST_') && !SERVICE_LINK.test(n))
    .map((n) => {
      const near = closest(n, known);
      return `${n} is not a variable relay-jobs reads, and is ignored${near ? `; did you mean ${near}?` : ''} (a config key is RELAY_JOBS__SECTION__KEY)`;
    });
}

type Tree = Record<string, unknown>;

function setPath(tree: Tree, path: string[], value: unknown): void {
  let node = tree;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    if (typeof next !== 'object' || next === null || Array.isArray(next)) node[key] = {};
    node = node[key] as Tree;
  }
  node[path[path.length - 1]!] = value;
}

/** `key:` with nothing after it (or a section whose keys are all commented out) means "not set". */
function dropNulls(tree: Tree): Tree {
  const out: Tree = {};
  for (const [k, v] of Object.entries(tree)) {
    if (v === null) continue;
    out[k] = typeof v === 'object' && !Array.isArray(v) ? dropNulls(v as Tree) : v;
  }
  return out;
}

/** `RELAY_JOBS__JOBS__CANARY__EVERY=1s` values are YAML scalars, so `true` and `3` keep their types. */
function parseEnvScalar(raw: string): unknown {
  try {
    const v = parseYaml(raw);
    return v === null || typeof v === 'object' ? raw : v;
  } catch {
    return raw;
  }
}

/** What a failed read of the config file says, for the errors a user causes. */
const READ_ERRORS: Record<string, string> = {
  ENOENT: 'no such file',
  EACCES: 'permission denied (this process cannot read it)',
  EISDIR: 'it is a directory, not a YAML file',
  ENOTDIR: 'a part of the path is not a directory',
};

export interface LoadOptions {
  env?: NodeJS.ProcessEnv;
  file?: string;
  /**
   * Checks the raw `jobs:` section (the job registry knows each job's keys; config/ does not),
   * so that job problems are reported together with every other one. `from` names a key's source.
   */
  checkJobs?: (jobs: Record<string, unknown>, from: (key: string) => string) => string[];
  /**
   * A one-shot command (`relay-jobs status`, `doctor`, `run` …), not a replica: in cluster mode
   * with no instance id it takes the host's name instead of refusing. `start`, and
   * `config check` (which checks a replica's configuration), never set it.
   */
  oneShot?: boolean;
  /** The areas' warnings on their own sections (`AreaModule.configWarnings`), added after the kernel's. */
  warn?: (config: Config) => string[];
}

/** The key path where a parsed YAML value contains itself (`a: &a [*a]`), or null. */
function selfContaining(v: unknown, path: string[] = [], open = new Set<object>()): string | null {
  if (typeof v !== 'object' || v === null) return null;
  if (open.has(v)) return path.join('.');
  open.add(v);
  for (const [k, child] of Object.entries(v)) {
    const found = selfContaining(child, [...path, k], open);
    if (found) return found;
  }
  open.delete(v);
  return null;
}

/**
 * Builds the configuration from, in rising precedence: the YAML file (`RELAY_JOBS_CONFIG`),
 * the pinned environment variables, then `RELAY_JOBS__SECTION__KEY` overrides. Every problem
 * names the key, where it came from and the expected form. `schema` is the whole schema, the
 * areas' sections included: `loadConfig` (app/config-schema.ts) passes the one the area list composes.
 */
export function loadConfigWith(schema: ConfigSchema, opts: LoadOptions = {}): Config {
  const env = opts.env ?? process.env;
  const file = opts.file ?? (env.RELAY_JOBS_CONFIG || undefined);
  const sources = new Map<string, string>();
  let tree: Tree = {};

  if (file) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? '';
      const why = READ_ERRORS[code] ?? (err as Error).message;
      throw new ConfigError([`cannot read config file ${file} (${opts.file ? '-c/--config' : 'RELAY_JOBS_CONFIG'}): ${why}`]);
    }
    let parsed: unknown;
    try {
      parsed = parseYaml(text);
    } catch (err) {
      throw new ConfigError([yamlProblem(file, text, err as Error)]);
    }
    if (parsed !== null && parsed !== undefined) {
      if (typeof parsed !== 'object' || Array.isArray(parsed)) throw new ConfigError([`${file}: expected a mapping of sections at the top level`]);
      const cycle = selfContaining(parsed);
      if (cycle) throw new ConfigError([`${file}: the YAML alias at ${cycle} refers to a node that contains it (a value without end); write the value out instead`]);
      tree = dropNulls(parsed as Tree);
    }
  }

  for (const [name, path] of Object.entries(ENV_KEYS)) {
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    setPath(tree, path, path[1] === 'port' ? parseEnvScalar(raw) : raw);
    sources.set(path.join('.'), name);
  }
  for (const [name, raw] of Object.entries(env)) {
    if (!name.startsWith(OVERRIDE_PREFIX) || raw === undefined) continue;
    const path = name.slice(OVERRIDE_PREFIX.length).toLowerCase().split('__');
    if (path.some((p) => p === '')) throw new ConfigError([`${name}: expected RELAY_JOBS__SECTION__KEY with non-empty parts`]);
    setPath(tree, path, parseEnvScalar(raw));
    sources.set(path.join('.'), name);
  }

  const from = (key: string) => keySource(sources, file, key);
  const deprecated = moveDeprecatedKeys(tree, from, sources);
  const result = schema.safeParse(tree, { error: configErrorMap });
  const jobs = tree.jobs && typeof tree.jobs === 'object' && !Array.isArray(tree.jobs) ? (tree.jobs as Record<string, unknown>) : {};
  const problems = [...redactedValueProblems(tree, from), ...(result.success ? [] : formatIssues(result.error.issues, [], from, schema)), ...(opts.checkJobs?.(jobs, from) ?? [])];
  if (!result.success || problems.length) throw new ConfigError(problems);
  if (opts.oneShot && !result.data.instance.id && result.data.database.url) {
    // The host's name; the command's runtime runs as `<it>-cli-<pid>` (cli/cli-context.ts).
    result.data.instance.id =
      hostname()
        .replace(/[^A-Za-z0-9._:-]/g, '-')
        .slice(0, 64) || 'cli';
    sources.set('instance.id', "this host's name (a one-shot command)");
  }
  const config = finish(result.data, file, sources, [...unknownVariables(env), ...deprecated, ...bareNumberWarnings(tree, from, schema)]);
  config.warnings.push(...(opts.warn?.(config) ?? []));
  return config;
}

function finish(data: ConfigFile, file: string | undefined, sources: Map<string, string>, warnings: string[]): Config {
  const hasDb = Boolean(data.database.url);
  const hasRedis = Boolean(data.redis.url);
  if (hasDb !== hasRedis) {
    const missing = hasDb ? 'REDIS_URL (redis.url)' : 'DATABASE_URL (database.url)';
    const present = hasDb ? (sources.get('database.url') ?? 'database.url') : (sources.get('redis.url') ?? 'redis.url');
    throw new ConfigError([`cluster mode needs both DATABASE_URL and REDIS_URL: ${present} is set but ${missing} is not; unset both for embedded mode`]);
  }
  const mode: Mode = hasDb ? 'cluster' : 'embedded';
  const problems: string[] = [];
  if (mode === 'cluster') {
    if (!data.instance.id) problems.push('instance.id: cluster mode needs a unique instance id per replica; set RELAY_JOBS_INSTANCE_ID (e.g. the pod name)');
    if (!data.instance.env) problems.push('instance.env: cluster mode needs an environment name so staging and production never share locks; set RELAY_JOBS_ENV (e.g. production)');
  } else if (data.database.direct_url) {
    problems.push(
      `database.direct_url (${sources.get('database.direct_url') ?? 'config file'}) is set but DATABASE_URL is not: the direct session is for cluster mode behind a pooler; unset it for embedded mode`,
    );
  }
  if (problems.length) throw new ConfigError(problems);
  return {
    ...data,
    mode,
    instance: { id: data.instance.id ?? 'embedded', env: data.instance.env ?? 'local' },
    source: { file, keys: sources },
    warnings,
  };
}

/**
 * A YAML syntax error as `file:line:column: malformed YAML: what`, then the lines around it with
 * a caret under the column (the parser's own message ends in a dangling "at line 2, column 1:").
 */
function yamlProblem(file: string, text: string, err: Error): string {
  const what = err.message
    .split('\n')[0]!
    .replace(/\s*at line \d+, column \d+:?\s*$/, '')
    .replace(/:\s*$/, '');
  const pos = err instanceof YAMLParseError ? err.linePos?.[0] : undefined;
  if (!pos) return `${file}: malformed YAML: ${what}`;
  const lines = text.split(/\r?\n/);
  const width = String(pos.line).length;
  const snippet = [];
  for (let n = Math.max(1, pos.line - 2); n <= Math.min(lines.length, pos.line); n++) snippet.push(`${String(n).padStart(width)} | ${lines[n - 1]}`);
  snippet.push(`${' '.repeat(width)} | ${' '.repeat(Math.max(0, pos.col - 1))}^`);
  return `${file}:${pos.line}:${pos.col}: malformed YAML: ${what}\n${snippet.map((l) => `    ${l}`).join('\n')}`;
}

/** Where a key (or, for a section, the first key under it) was set: a variable's name, else the file, else defaults. */
export function keySource(sources: Map<string, string>, file: string | undefined, key: string): string {
  const own = sources.get(key) ?? [...sources].find(([k]) => k.startsWith(`${key}.`))?.[1];
  return own ?? file ?? 'defaults';
}

/** A key and where its value came from, as a connection error names it: `sql.database_url from RELAY_JOBS__SQL__DATABASE_URL`, `… in <file>`, or the key alone (a default). */
export function keyOrigin(config: Pick<Config, 'source'>, key: string): string {
  // A configuration built by hand (an embedding, a test) may have no record of its sources: then the key alone.
  const source = config.source as Config['source'] | undefined;
  if (!source) return key;
  const from = keySource(source.keys, source.file, key);
  return from === 'defaults' ? key : /^[A-Z][A-Z0-9_]*$/.test(from) ? `${key} from ${from}` : `${key} in ${from}`;
}

/** A URL as printed: redacted when it holds a credential, else exactly as given (the parser's normal form would not load back equal). */
function urlShown(url: string): string {
  const redacted = redactUrl(url);
  return redacted.includes('***') ? redacted : url;
}

/** The configuration with every secret replaced, for `config check` and logs. */
export function redactConfig(config: Config): unknown {
  const { source: _source, warnings: _warnings, ...rest } = config;
  return {
    ...rest,
    http: { ...config.http, admin_token: config.http.admin_token ? '***' : undefined },
    security: { master_key: config.security.master_key ? '***' : undefined },
    payments: {
      ...config.payments,
      providers: Object.fromEntries(
        Object.entries(config.payments.providers).map(([k, p]) => [k, { ...p, base_url: urlShown(p.base_url), api_key: p.api_key ? '***' : undefined, webhook_secret: '***' }]),
      ),
    },
    notify: {
      ...config.notify,
      smtp: config.notify.smtp && { ...config.notify.smtp, pass: config.notify.smtp.pass ? '***' : undefined },
      webhook: config.notify.webhook && { ...config.notify.webhook, url: urlShown(config.notify.webhook.url), secret: config.notify.webhook.secret ? '***' : undefined },
    },
    oauth: {
      providers: Object.fromEntries(
        Object.entries(config.oauth.providers).map(([k, p]) => [k, { ...p, token_url: p.token_url && urlShown(p.token_url), client_secret: p.client_secret ? '***' : undefined }]),
      ),
    },
    image: {
      ...config.image,
      provider: { ...config.image.provider, base_url: config.image.provider.base_url && urlShown(config.image.provider.base_url), api_key: config.image.provider.api_key ? '***' : undefined },
    },
    database: { ...config.database, url: config.database.url && urlShown(config.database.url), direct_url: config.database.direct_url && urlShown(config.database.direct_url) },
    redis: { ...config.redis, url: config.redis.url && urlShown(config.redis.url) },
    sql: { ...config.sql, database_url: config.sql.database_url && urlShown(config.sql.database_url) },
  };
}

export { redactUrl } from './redact-url.js';
