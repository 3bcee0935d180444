import { describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { hostname, tmpdir } from 'node:os';
import { loadConfig } from '../src/app/config-schema.js';
import { redactConfig } from '../src/config/load.js';
import { parseDuration } from '../src/config/duration.js';
import { resolveJobSettings } from '../src/config/job-settings.js';
import { ConfigError } from '../src/config/errors.js';
import { buildJobs, checkJobSections, JOBS } from '../src/app/registry.js';
import { DURATION_KEYS, withDurationStrings } from '../src/app/config-schema.js';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';

function yamlFile(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'rj-cfg-'));
  const file = join(dir, 'config.yaml');
  writeFileSync(file, text);
  return file;
}

function problems(fn: () => unknown): string[] {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).problems;
  }
  throw new Error('expected a ConfigError');
}

describe('durations', () => {
  it('parses units and bare seconds', () => {
    expect(parseDuration('300ms')).toBe(300);
    expect(parseDuration('1s')).toBe(1000);
    expect(parseDuration('5m')).toBe(300_000);
    expect(parseDuration('1h')).toBe(3_600_000);
    expect(parseDuration('1.5s')).toBe(1500);
    expect(parseDuration(30)).toBe(30_000);
    expect(parseDuration('30')).toBe(30_000);
  });
  it('rejects negative and malformed values', () => {
    for (const bad of ['-5s', 'soon', '5 minutes', '', -1, null, true]) expect(parseDuration(bad)).toBeNull();
  });
});

describe('loadConfig', () => {
  it('defaults to embedded mode with the pinned defaults', () => {
    const c = loadConfig({ env: {} });
    expect(c.mode).toBe('embedded');
    expect(c.http.port).toBe(8080);
    expect(c.database.data_dir).toBe('./data');
    expect(c.auth.refresh_margin_seconds).toBe(300);
    expect(c.admin.session_cleanup_interval_secs).toBe(3600);
  });

  it('layers file < pinned env < RELAY_JOBS__ overrides, with typed scalars', () => {
    const file = yamlFile('http:\n  port: 9000\njobs:\n  canary:\n    every: 5s\n    enabled: false\n');
    const c = loadConfig({ env: { RELAY_JOBS_CONFIG: file, RELAY_JOBS_HTTP_PORT: '9100', RELAY_JOBS__JOBS__CANARY__EVERY: '1s', RELAY_JOBS__JOBS__CANARY__ENABLED: 'true' } });
    expect(c.http.port).toBe(9100);
    expect(buildJobs(c).find((j) => j.name === 'canary')!.settings).toMatchObject({ schedule: { everyMs: 1000 }, enabled: true });
  });

  it('cluster mode needs both URLs, an instance id and an env name', () => {
    expect(problems(() => loadConfig({ env: { DATABASE_URL: 'postgres://x@h/db' } }))[0]).toMatch(/REDIS_URL/);
    const p = problems(() => loadConfig({ env: { DATABASE_URL: 'postgres://x@h/db', REDIS_URL: 'redis://h:6379' } }));
    expect(p.join('\n')).toMatch(/instance\.id.*RELAY_JOBS_INSTANCE_ID/);
    expect(p.join('\n')).toMatch(/instance\.env.*RELAY_JOBS_ENV/);
    const c = loadConfig({ env: { DATABASE_URL: 'postgres://x:pw@h/db', REDIS_URL: 'redis://h:6379', RELAY_JOBS_INSTANCE_ID: 'a', RELAY_JOBS_ENV: 'staging' } });
    expect(c.mode).toBe('cluster');
    expect(JSON.stringify(redactConfig(c))).not.toContain('pw');
  });

  it('names the key, the source and the expected form for each bad value', () => {
    const file = yamlFile('jobs:\n  canary:\n    every: -5s\n    timeout: soon\n    colour: blue\nhttp:\n  port: "http"\n');
    const p = problems(() => loadConfig({ env: { RELAY_JOBS_CONFIG: file }, checkJobs: checkJobSections() }));
    const text = p.join('\n');
    expect(text).toMatch(/jobs\.canary\.every .*expected a duration/);
    expect(text).toMatch(/jobs\.canary\.timeout .*got "soon"/);
    expect(text).toMatch(/jobs\.canary\.colour .*unknown key/);
    expect(text).toMatch(/http\.port/);
    expect(text).toContain(file);
  });

  it('reports env overrides by variable name and unknown sections', () => {
    const p = problems(() => loadConfig({ env: { RELAY_JOBS__JOBS__CANARY__TIMEOUT: 'x', RELAY_JOBS__NOPE__KEY: '1', RELAY_JOBS__JOBS__CANRY__EVERY: '1s' }, checkJobs: checkJobSections() }));
    expect(p.join('\n')).toMatch(/jobs\.canary\.timeout \(RELAY_JOBS__JOBS__CANARY__TIMEOUT\)/);
    expect(p.join('\n')).toMatch(/nope .*unknown key/);
    expect(p.join('\n')).toMatch(/jobs\.canry \(RELAY_JOBS__JOBS__CANRY__EVERY\): unknown job; did you mean canary\?/);
  });

  it('an unknown key names the nearest known one at its place; an unknown RELAY_JOBS_ variable is a warning naming the nearest it reads', () => {
    const file = yamlFile('databse:\n  url: postgres://x@h/db\njobs:\n  canary:\n    evry: 1s\nsnapshot:\n  claim_tt: 5s\n');
    const text = problems(() => loadConfig({ env: { RELAY_JOBS_CONFIG: file, RELAY_JOBS__HTTP__PROT: '1' }, checkJobs: checkJobSections() })).join('\n');
    expect(text).toContain(`databse (${file}): unknown key; did you mean database?`);
    expect(text).toContain(`jobs.canary.evry (${file}): unknown key; did you mean jobs.canary.every?`);
    expect(text).toContain(`snapshot.claim_tt (${file}): unknown key; did you mean snapshot.claim_ttl?`);
    expect(text).toContain('http.prot (RELAY_JOBS__HTTP__PROT): unknown key; did you mean http.port?');
    expect(problems(() => loadConfig({ env: { RELAY_JOBS__ZZZZ__A: '1' } })).join('\n')).toMatch(/zzzz \(RELAY_JOBS__ZZZZ__A\): unknown key$/);
    // A misspelt pinned variable was ignored without a word (the service listened on 8080).
    // Kubernetes' service links for the manifest's Service `relay-jobs` are in every pod: not warned about.
    const links = {
      RELAY_JOBS_SERVICE_HOST: '10.0.0.1',
      RELAY_JOBS_SERVICE_PORT: '8080',
      RELAY_JOBS_SERVICE_PORT_HTTP: '8080',
      RELAY_JOBS_PORT: 'tcp://10.0.0.1:8080',
      RELAY_JOBS_PORT_8080_TCP_ADDR: '10.0.0.1',
    };
    const c = loadConfig({ env: { ...links, RELAY_JOBS_HTTP_PROT: '18090', RELAY_JOBS_CONFIG_FILE: 'x', RELAY_JOBS_URL: 'http://127.0.0.1:8080', RELAY_JOBS_DB_PASSWORD: 'x' } });
    expect(c.http.port).toBe(8080);
    expect(c.warnings).toEqual([
      'RELAY_JOBS_HTTP_PROT is not a variable relay-jobs reads, and is ignored; did you mean RELAY_JOBS_HTTP_PORT? (a config key is RELAY_JOBS__SECTION__KEY)',
      'RELAY_JOBS_CONFIG_FILE is not a variable relay-jobs reads, and is ignored (a config key is RELAY_JOBS__SECTION__KEY)',
    ]);
  });

  it('reports malformed YAML with its line', () => {
    const file = yamlFile('jobs:\n  canary:\n   every: [1s\n');
    expect(problems(() => loadConfig({ env: { RELAY_JOBS_CONFIG: file } }))[0]).toMatch(/malformed YAML/);
    expect(problems(() => loadConfig({ env: { RELAY_JOBS_CONFIG: '/nonexistent/relay.yaml' } }))[0]).toMatch(/cannot read config file \/nonexistent\/relay\.yaml/);
  });
});

describe('one-shot commands need no instance id of their own', () => {
  const cluster = { DATABASE_URL: 'postgres://postgres@127.0.0.1/x', REDIS_URL: 'redis://127.0.0.1:6379', RELAY_JOBS_ENV: 'prod' };
  it("a replica's configuration (start, config check) is refused without one; a one-shot command takes the host's name", () => {
    expect(problems(() => loadConfig({ env: cluster }))[0]).toMatch(/instance\.id: cluster mode needs a unique instance id per replica/);
    const host = hostname()
      .replace(/[^A-Za-z0-9._:-]/g, '-')
      .slice(0, 50);
    expect(loadConfig({ env: cluster, oneShot: true }).instance.id).toBe(host);
    expect(loadConfig({ env: { ...cluster, RELAY_JOBS_INSTANCE_ID: 'pod-7' }, oneShot: true }).instance.id).toBe('pod-7');
    // The environment is still required: it names the locks' keys, which a command must share with the replicas.
    expect(problems(() => loadConfig({ env: { ...cluster, RELAY_JOBS_ENV: '' }, oneShot: true }))[0]).toMatch(/instance\.env/);
    expect(loadConfig({ env: {}, oneShot: true }).instance.id).toBe('embedded');
  });
});

describe('config wording, for a person rather than a library', () => {
  it("says what a key expects in config words, with the value given, never zod's phrasing", () => {
    const file = yamlFile('jobs:\n  canary:\n    enabled: maybe\n    no_work_log: loud\nhttp:\n  port: abc\nbilling:\n  reminder_days: []\nlogging:\n  level: loud\n');
    const text = problems(() => loadConfig({ env: { RELAY_JOBS_CONFIG: file }, checkJobs: checkJobSections() })).join('\n');
    expect(text).toMatch(/jobs\.canary\.enabled \(.*\): expected true or false, got "maybe"/);
    expect(text).toMatch(/jobs\.canary\.no_work_log \(.*\): expected one of "debug", "info", got "loud"/);
    expect(text).toMatch(/http\.port \(.*\): expected a number, got "abc"/);
    expect(text).toMatch(/billing\.reminder_days \(.*\): expected at least 1 item, got an empty list/);
    expect(text).toMatch(/logging\.level \(.*\): expected one of "trace", .*got "loud"/);
    expect(text).not.toMatch(/Invalid input|Invalid option|received|Too small|NaN/);
  });

  it('refuses what a running service would only meet later: a zone it does not know, a duration past ten years', () => {
    const file = yamlFile(
      'usage:\n  timezone: Mars/Olympus\nops:\n  timezone: Asia/Nowhere\njobs:\n  canary:\n    enabled: true\n    every: 100000000000000000000\ncluster:\n  instance_heartbeat: 3651d\n',
    );
    const text = problems(() => loadConfig({ env: { RELAY_JOBS_CONFIG: file }, checkJobs: checkJobSections() })).join('\n');
    expect(text).toMatch(/usage\.timezone \(.*\): unknown time zone; expected an IANA name such as UTC or Asia\/Shanghai/);
    expect(text).toMatch(/ops\.timezone \(.*\): unknown time zone/);
    expect(text).toMatch(/jobs\.canary\.every \(.*\): expected at most 3650d \(ten years\), got 100000000000000000000/);
    expect(text).toMatch(/cluster\.instance_heartbeat \(.*\): expected at most 3650d \(ten years\), got "3651d"/);
    // The longest allowed passes.
    const ok = loadConfig({ env: { RELAY_JOBS_CONFIG: yamlFile('usage:\n  timezone: Asia/Shanghai\ncluster:\n  instance_heartbeat: 3650d\n') } });
    expect([ok.usage.timezone, ok.cluster.instance_heartbeat]).toEqual(['Asia/Shanghai', 3650 * 86_400_000]);
  });

  it('a YAML alias to a node that contains it is a config error naming where, not a stack overflow', () => {
    for (const [text, at] of [
      ['a: &a [*a]\n', 'a.0'],
      ['http: &h\n  port: 8080\n  again: *h\n', 'http.again'],
    ] as const) {
      const file = yamlFile(text);
      expect(problems(() => loadConfig({ env: { RELAY_JOBS_CONFIG: file } }))).toEqual([
        `${file}: the YAML alias at ${at} refers to a node that contains it (a value without end); write the value out instead`,
      ]);
    }
    // An alias to a node elsewhere is fine (the same value twice).
    const shared = loadConfig({ env: { RELAY_JOBS_CONFIG: yamlFile('usage:\n  lookback: &l 2h\n  cleanup_every: *l\n') } });
    expect([shared.usage.lookback, shared.usage.cleanup_every]).toEqual([7_200_000, 7_200_000]);
  });

  it("a YAML syntax error gives file:line:column, the parser's reason and the lines with a caret", () => {
    const file = yamlFile('http:\n  port: 8080\njobs: [\n');
    const [p] = problems(() => loadConfig({ env: { RELAY_JOBS_CONFIG: file } }));
    expect(p).toMatch(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:4:1: malformed YAML: [^\n]*\\]\n`));
    expect(p).not.toMatch(/:\n\s*$|column \d+:\n/);
    expect(p).toContain('3 | jobs: [');
    expect(p).toMatch(/\| \^$/);
  });

  it('warns when a bare number of seconds looks like milliseconds, and only then', () => {
    const file = yamlFile('shutdown:\n  grace: 20000\njobs:\n  canary:\n    every: 3600\n    timeout: 30000\n');
    const c = loadConfig({ env: { RELAY_JOBS_CONFIG: file }, checkJobs: checkJobSections() });
    expect(c.shutdown.grace).toBe(20_000_000);
    expect(c.warnings).toHaveLength(2);
    expect(c.warnings[0]).toMatch(/^shutdown\.grace \(.*\): the bare number 20000 means 20000 seconds \(about 5\.6 hours\); if milliseconds were meant, write "20s"/);
    expect(c.warnings[1]).toMatch(/^jobs\.canary\.timeout .*write "30s"/);
    expect(loadConfig({ env: {} }).warnings).toEqual([]);
  });

  it("prints durations in the config's own form, so printed values paste back unchanged", () => {
    const c = loadConfig({ env: { RELAY_JOBS__SHUTDOWN__GRACE: '20s', RELAY_JOBS__SCHEDULER__ABORT_GRACE: '1500ms' } });
    const printed = withDurationStrings(redactConfig(c)) as { shutdown: { grace: string }; scheduler: { abort_grace: string }; usage: { retention: string; batch_size: number } };
    expect(printed.shutdown.grace).toBe('20s');
    expect(printed.scheduler.abort_grace).toBe('1500ms');
    expect(printed.usage).toMatchObject({ retention: '90d', batch_size: 1000 });
    // Round trip: every printed duration parses back to the same milliseconds.
    const file = yamlFile(stringifyYaml({ shutdown: printed.shutdown, scheduler: printed.scheduler }));
    const again = loadConfig({ env: { RELAY_JOBS_CONFIG: file } });
    expect([again.shutdown.grace, again.scheduler.abort_grace]).toEqual([20_000, 1500]);
    expect(again.warnings).toEqual([]);
  });

  it('knows every duration key from the schema', () => {
    expect(DURATION_KEYS.map((p) => p.join('.'))).toEqual(expect.arrayContaining(['shutdown.grace', 'database.connect_timeout', 'auth.refresh_backoff_base', 'usage.retention']));
    expect(DURATION_KEYS.map((p) => p.join('.'))).not.toContain('auth.refresh_margin_seconds');
  });
});

describe('job settings', () => {
  const defaults = { enabled: true, every: 60_000, timeout: 10_000 };
  it('derives a lock TTL longer than the timeout', () => {
    const s = resolveJobSettings('x', defaults, {});
    expect(s.lockTtlMs).toBeGreaterThan(s.timeoutMs);
  });
  it('refuses a lock TTL not longer than the timeout, naming both keys', () => {
    const p = problems(() => resolveJobSettings('canary', defaults, { timeout: 5000, lock_ttl: 3000 }));
    expect(p[0]).toMatch(/jobs\.canary\.lock_ttl \(3s\) must be longer than jobs\.canary\.timeout \(5s\)/);
  });
  it('refuses both schedules, bad cron, bad zone, jitter beyond the interval', () => {
    expect(problems(() => resolveJobSettings('j', defaults, { every: 1000, cron: '* * * * *' }))[0]).toMatch(/set one schedule/);
    expect(problems(() => resolveJobSettings('j', defaults, { cron: 'every day' }))[0]).toMatch(/jobs\.j\.cron: invalid cron/);
    expect(problems(() => resolveJobSettings('j', defaults, { cron: '0 2 * * *', timezone: 'Mars/Olympus' }))[0]).toMatch(/unknown time zone/);
    // Valid syntax, no date that matches (the 30th of February): the scheduler would stop at its first slot.
    expect(problems(() => resolveJobSettings('j', defaults, { cron: '0 0 30 2 *' }))[0]).toMatch(/^jobs\.j\.cron: the cron expression "0 0 30 2 \*" never fires/);
    expect(problems(() => resolveJobSettings('j', defaults, { every: 1000, jitter: 1000 }))[0]).toMatch(/jitter .* shorter than/);
  });
  it('session_cleanup follows admin.session_cleanup_interval_secs unless jobs.session_cleanup.every is set', () => {
    const a = buildJobs(loadConfig({ env: { RELAY_JOBS__ADMIN__SESSION_CLEANUP_INTERVAL_SECS: '120' } }));
    expect(a.find((j) => j.name === 'session_cleanup')!.settings.schedule).toMatchObject({ kind: 'every', everyMs: 120_000 });
    const b = buildJobs(loadConfig({ env: { RELAY_JOBS__JOBS__SESSION_CLEANUP__EVERY: '10m' } }));
    expect(b.find((j) => j.name === 'session_cleanup')!.settings.schedule).toMatchObject({ kind: 'every', everyMs: 600_000 });
    expect(a.find((j) => j.name === 'canary')!.settings.enabled).toBe(false);
  });
});

describe('config.example.yaml', () => {
  const file = new URL('../config.example.yaml', import.meta.url).pathname;

  it('is valid and documents the defaults it shows', () => {
    const c = loadConfig({ env: { RELAY_JOBS_CONFIG: file }, checkJobs: checkJobSections() });
    const d = loadConfig({ env: {} });
    expect({ ...c, source: null }).toEqual({ ...d, jobs: c.jobs, source: null });
    // Every job shown with its defaults: the example's settings are exactly what an empty config gives.
    const shown = buildJobs(c).map((j) => [j.name, j.settings]);
    expect(shown).toEqual(buildJobs(d).map((j) => [j.name, j.settings]));
  });

  it('has a section for every job in the registry, in registry order, and for nothing else', () => {
    const example = parseYaml(readFileSync(file, 'utf8')) as { jobs: Record<string, Record<string, unknown>> };
    expect(Object.keys(example.jobs)).toEqual(JOBS.map((j) => j.name));
    for (const job of JOBS) {
      // Each job-specific option is shown (set or commented) next to the common keys.
      const text = readFileSync(file, 'utf8');
      const section = text.slice(text.indexOf(`\n  ${job.name}:\n`));
      for (const key of Object.keys(job.options ?? {})) expect(section, `jobs.${job.name}.${key}`).toMatch(new RegExp(`\\n\\s+#?\\s*${key}:`));
    }
  });
});
