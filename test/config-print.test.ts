import { describe, expect, it } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { z } from 'zod';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { loadConfig } from '../src/app/config-schema.js';
import type { Config } from '../src/config/load.js';
import { configSchema, printConfig } from '../src/app/config-schema.js';
import { isDurationSchema } from '../src/config/duration-schema.js';
import { formatDuration } from '../src/config/duration.js';
import { ConfigError } from '../src/config/errors.js';
import { checkJobSections } from '../src/app/registry.js';

type Tree = Record<string, unknown>;

function yamlFile(text: string): string {
  const file = join(mkdtempSync(join(tmpdir(), 'rj-print-')), 'config.yaml');
  writeFileSync(file, text);
  return file;
}

function unwrap(schema: z.ZodType): z.ZodType {
  let s = schema;
  while (s instanceof z.ZodDefault || s instanceof z.ZodPrefault || s instanceof z.ZodOptional) s = s.def.innerType as z.ZodType;
  return s;
}

/** Every leaf key of the schema (objects are walked, records and arrays are leaves), with its schema. */
function leaves(schema: z.ZodType, prefix: string[] = [], out: Array<{ path: string[]; schema: z.ZodType }> = []) {
  const s = unwrap(schema);
  if (s instanceof z.ZodObject) for (const [k, v] of Object.entries(s.shape as Record<string, z.ZodType>)) leaves(v, [...prefix, k], out);
  else out.push({ path: prefix, schema: s });
  return out;
}

const get = (tree: unknown, path: readonly string[]): unknown => path.reduce<unknown>((n, k) => (n && typeof n === 'object' ? (n as Tree)[k] : undefined), tree);
function setPath(tree: Tree, path: readonly string[], value: unknown): void {
  let node = tree;
  for (const k of path.slice(0, -1)) node = (node[k] ??= {}) as Tree;
  node[path[path.length - 1]!] = value;
}

/** Keys the generator cannot invent a valid non-default value for (free text, URLs, maps, optional numbers). */
const MANUAL: Record<string, unknown> = {
  'instance.id': 'r-print',
  'instance.env': 'print',
  'http.host': '127.0.0.2',
  'database.url': 'postgres://db.example:5432/relay',
  'database.direct_url': 'postgres://db-direct.example:5432/relay',
  'sql.database_url': 'postgres://db-console.example:5432/relay',
  'database.data_dir': './data-print',
  'redis.url': 'redis://cache.example:6379/2',
  'redis.key_prefix': 'rj-print',
  'oauth.providers': { openai: { token_url: 'https://auth.example/oauth/token', client_id: 'app-print', max_per_second: 2 }, anthropic: { api_url: 'https://claude.example', body: 'json' } },
  'usage.timezone': 'Asia/Shanghai',
  'billing.currency': 'USD',
  'billing.reminder_days': [5, 2],
  'payments.providers': { stub: { base_url: 'https://pay.example' } },
  'notify.smtp.host': 'smtp.example',
  'notify.smtp.port': 2525,
  'notify.smtp.user': 'relay',
  'notify.smtp.from': 'relay@example.com',
  'notify.webhook.url': 'https://hooks.example/relay',
  'ops.alert_recipients': ['ops@example.com'],
  'ops.timezone': 'Asia/Shanghai',
  'ops.retention_days': { ops_metrics_minute: 3, canary_runs: -1 },
  'image.provider.base_url': 'https://img.example/v1',
  'image.prices': { 'gpt-image-1': 40 },
  'image.storage_dir': './images-print',
  'backup.storage': 's3',
  'backup.dir': './backups-print',
  'backup.s3.bucket': 'relay-backups',
  'backup.s3.prefix': 'prod/',
  'backup.s3.region': 'eu-west-1',
  'backup.s3.endpoint': 'https://s3.example',
  'backup.s3.part_size_mb': 32,
  'image.s3.bucket': 'relay-images',
  'image.s3.prefix': 'img/',
  'image.s3.region': 'eu-west-1',
  'image.s3.endpoint': 'https://s3.example',
  'backup.keep_days': 9,
  'backup.pg_bin_dir': '/usr/lib/postgresql/15/bin',
  jobs: { canary: { enabled: true, every: '7s', timeout: '3s' }, ops_cleanup: { batch: 100 } },
};

/** Secrets are not printed: they come from the environment in both loads, as in production. */
const SECRET_ENV = {
  RELAY_JOBS_ADMIN_TOKEN: 'print-test-admin-token-0123',
  RELAY_JOBS_MASTER_KEY: Buffer.alloc(32, 7).toString('base64'),
  RELAY_JOBS__OAUTH__PROVIDERS__OPENAI__CLIENT_SECRET: 'oauth-secret',
  RELAY_JOBS__PAYMENTS__PROVIDERS__STUB__API_KEY: 'pay-key',
  RELAY_JOBS__PAYMENTS__PROVIDERS__STUB__WEBHOOK_SECRET: 'pay-webhook-secret-0123',
  RELAY_JOBS__NOTIFY__SMTP__PASS: 'smtp-pass',
  RELAY_JOBS__NOTIFY__WEBHOOK__SECRET: 'webhook-secret-0123456',
  RELAY_JOBS__IMAGE__PROVIDER__API_KEY: 'sk-image',
};
const SECRET_KEYS = ['http.admin_token', 'security.master_key', 'notify.smtp.pass', 'notify.webhook.secret', 'image.provider.api_key'];
/** Keys with one allowed value: nothing else to set them to. */
const FIXED = ['backup.compression'];

/** A config file that sets every key of the schema to a value other than its default. */
function everyKeyChanged(defaults: Config): { tree: Tree; uncovered: string[] } {
  const tree: Tree = {};
  const uncovered: string[] = [];
  for (const { path, schema } of leaves(configSchema)) {
    const key = path.join('.');
    if (SECRET_KEYS.includes(key) || FIXED.includes(key)) continue;
    const d = get(defaults, path);
    let v: unknown;
    if (key in MANUAL) v = MANUAL[key];
    else if (isDurationSchema(schema)) v = formatDuration(((d as number | undefined) ?? 1000) + 1000);
    else if (schema instanceof z.ZodBoolean) v = !(d ?? false);
    else if (schema instanceof z.ZodEnum) v = (schema.options as unknown[]).find((o) => o !== d);
    else if (typeof d === 'number') v = d + 1;
    if (v === undefined) uncovered.push(key);
    else setPath(tree, path, v);
  }
  return { tree, uncovered };
}

const plain = (c: Config) => {
  const { source: _s, warnings: _w, ...rest } = c;
  return rest;
};

describe('config check --print', () => {
  it('fed back as a config file gives the same effective configuration, for every key of the schema', () => {
    const defaults = loadConfig({ env: {} });
    const { tree, uncovered } = everyKeyChanged(defaults);
    expect(uncovered, 'schema keys without a generated non-default value: add them to MANUAL').toEqual([]);
    const env = { ...SECRET_ENV, RELAY_JOBS_CONFIG: yamlFile(stringifyYaml(tree)) };
    const first = loadConfig({ env, checkJobs: checkJobSections() });
    expect(first.warnings).toEqual([]);
    // The generated file really moved every key off its default (so the comparison below covers them all).
    const unchanged = leaves(configSchema)
      .map((l) => l.path)
      .filter((p) => !FIXED.includes(p.join('.')))
      .filter((p) => JSON.stringify(get(first, p)) === JSON.stringify(get(defaults, p)));
    expect(unchanged.map((p) => p.join('.'))).toEqual([]);

    const printed = printConfig(first);
    expect(printed).not.toMatch(/^mode:/m);
    for (const secret of Object.values(SECRET_ENV)) expect(printed).not.toContain(secret);
    expect(printed).toMatch(/# secrets set but not printed: .*http\.admin_token \(RELAY_JOBS_ADMIN_TOKEN\)/);
    // Durations are durations, never milliseconds.
    const doc = parseYaml(printed) as Tree;
    expect(get(doc, ['ops', 'bucket'])).toBe('61s');
    expect(get(doc, ['image', 'input_retention'])).toBe(formatDuration(86_400_000 + 1000));
    expect(get(doc, ['backup', 'lease'])).toBe('31s');

    const again = loadConfig({ env: { ...SECRET_ENV, RELAY_JOBS_CONFIG: yamlFile(printed) }, checkJobs: checkJobSections() });
    expect(again.warnings).toEqual([]);
    expect(plain(again)).toEqual(plain(first));
    // And printing is stable.
    expect(printConfig(again).split('\n').slice(2)).toEqual(printed.split('\n').slice(2));
  });

  it('the defaults print and load back as themselves', () => {
    const defaults = loadConfig({ env: {} });
    const again = loadConfig({ env: { RELAY_JOBS_CONFIG: yamlFile(printConfig(defaults)) } });
    expect(plain(again)).toEqual(plain(defaults));
  });
});

describe('ops.retention_days', () => {
  const problems = (env: Record<string, string>) => {
    try {
      loadConfig({ env });
    } catch (err) {
      return (err as ConfigError).problems;
    }
    return [];
  };

  it('merges the keys given over the defaults', () => {
    const c = loadConfig({ env: { RELAY_JOBS__OPS__RETENTION_DAYS__OPS_METRICS_MINUTE: '3' } });
    const defaults = loadConfig({ env: {} }).ops.retention_days;
    expect(c.ops.retention_days).toEqual({ ...defaults, ops_metrics_minute: 3 });
    expect(c.ops.retention_days.ops_metrics_daily).toBe(730);
  });

  it('refuses an unknown target, naming the key and the known ones', () => {
    const p = problems({ RELAY_JOBS_CONFIG: yamlFile('ops:\n  retention_days:\n    ops_metric_minute: 3\n') });
    expect(p).toHaveLength(1);
    expect(p[0]).toMatch(/^ops\.retention_days\.ops_metric_minute \(.*config\.yaml\): unknown ops_cleanup target; known: ops_metrics_minute, /);
  });

  it('job_runs is deprecated: its days become scheduler.run_retention, with a warning naming it', () => {
    const c = loadConfig({ env: { RELAY_JOBS_CONFIG: yamlFile('ops:\n  retention_days:\n    job_runs: 30\n') } });
    expect(c.scheduler.run_retention).toBe(30 * 86_400_000);
    expect(c.ops.retention_days).not.toHaveProperty('job_runs');
    expect(c.warnings).toEqual([expect.stringMatching(/^ops\.retention_days\.job_runs \(.*config\.yaml\) is deprecated: .*scheduler\.run_retention: 30d/)]);
    // Printed, it is the replacement only, and loads back without the warning.
    const again = loadConfig({ env: { RELAY_JOBS_CONFIG: yamlFile(printConfig(c)) } });
    expect(again.scheduler.run_retention).toBe(30 * 86_400_000);
    expect(again.warnings).toEqual([]);
  });

  it('job_runs next to scheduler.run_retention: run_retention wins and the warning says so', () => {
    const c = loadConfig({ env: { RELAY_JOBS__SCHEDULER__RUN_RETENTION: '2d', RELAY_JOBS__OPS__RETENTION_DAYS__JOB_RUNS: '30' } });
    expect(c.scheduler.run_retention).toBe(2 * 86_400_000);
    expect(c.warnings[0]).toMatch(/ops\.retention_days\.job_runs \(RELAY_JOBS__OPS__RETENTION_DAYS__JOB_RUNS\) is deprecated.*also set \(RELAY_JOBS__SCHEDULER__RUN_RETENTION\) and wins/);
  });
});
