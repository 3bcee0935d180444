// `yamllint deploy/` from the repository root, as docs/deployment.md says to run it, passes: the
// root's .yamllint holds the rules of deploy/.yamllint.yaml (which test/deploy-files.test.ts passes
// with -c), and this file keeps the two equal (issue 52, point 7f).
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const has = (cmd: string) => {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'pipe' });
    return true;
  } catch {
    return false;
  }
};

describe('yamllint from the repository root', () => {
  it('the root .yamllint has the rules of deploy/.yamllint.yaml', () => {
    const root = parse(readFileSync(`${ROOT}.yamllint`, 'utf8')) as { extends: string; rules: unknown };
    const deploy = parse(readFileSync(`${ROOT}deploy/.yamllint.yaml`, 'utf8')) as { extends: string; rules: unknown };
    expect(root.extends).toBe(deploy.extends);
    expect(root.rules).toEqual(deploy.rules);
  });

  it.runIf(has('yamllint'))('plain `yamllint deploy/` passes', () => {
    // Throws (exit 1) on any error; warnings (long lines) exit 0.
    execFileSync('yamllint', ['deploy/'], { cwd: ROOT, stdio: 'pipe' });
  });
});

describe('docs/deployment.md', () => {
  const doc = readFileSync(`${ROOT}docs/deployment.md`, 'utf8');
  const readme = readFileSync(`${ROOT}README.md`, 'utf8');
  it("sizes a replica's memory as the README and the benchmarks measure it", () => {
    const row = doc.split('\n').find((l) => l.startsWith('| memory |'))!;
    expect(row).toContain('about 90 MiB');
    expect(row).not.toMatch(/400 MB/);
    expect(readme).toContain('A cluster replica holds\nabout 90 MiB');
  });
  it('says a dead replica stays in GET /api/v1/instances with alive: false', () => {
    const row = doc.split('\n').find((l) => l.startsWith('| a replica (SIGKILL'))!;
    expect(row).toContain('stays in `GET /api/v1/instances` with `alive: false`');
    expect(row).not.toMatch(/missing from/);
  });
});
