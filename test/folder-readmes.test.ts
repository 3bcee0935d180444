import { describe, expect, it } from 'vitest';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join, relative } from 'node:path';

const SRC = new URL('../src/', import.meta.url).pathname;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === 'migrations' || name === 'scripts' ? [] : sourceFiles(path);
    return name.endsWith('.ts') ? [path] : [];
  });
}

/** Each src/ folder's README names every file in it, and every file it names exists: the map matches the territory. */
describe('folder READMEs', () => {
  const isDir = (p: string) => statSync(join(SRC, p)).isDirectory();
  // Each area under src/areas/ is a folder of its own, with its own README; src/areas/README.md lists the areas.
  const kernel = readdirSync(SRC).filter((f) => isDir(f) && f !== 'areas');
  const areas = readdirSync(join(SRC, 'areas'))
    .map((a) => `areas/${a}`)
    .filter(isDir);
  const folders = [...kernel, ...areas];

  it('src/areas/README.md names every area', () => {
    const text = readFileSync(join(SRC, 'areas', 'README.md'), 'utf8');
    expect(areas.filter((a) => !text.includes(`\`${a.slice('areas/'.length)}/\``))).toEqual([]);
  });

  it.each(folders)('src/%s/README.md lists its files and only files that exist', (folder) => {
    const dir = join(SRC, folder);
    const readme = join(dir, 'README.md');
    expect(existsSync(readme), `src/${folder}/README.md is missing`).toBe(true);
    const text = readFileSync(readme, 'utf8');
    const missing = sourceFiles(dir).filter((f) => !text.includes(`\`${relative(dir, f)}\``) && !text.includes(`\`${basename(f)}\``));
    expect(
      missing.map((f) => relative(SRC, f)),
      `files not named in src/${folder}/README.md`,
    ).toEqual([]);
    const named = [...text.matchAll(/`([a-z0-9_./-]+\.ts)`/g)].map((m) => m[1]!);
    const stale = named.filter((n) => !existsSync(join(dir, n)) && !existsSync(join(SRC, n)) && !sourceFiles(dir).some((f) => basename(f) === basename(n)));
    expect(stale, `files named in src/${folder}/README.md that do not exist`).toEqual([]);
  });
});
