import { describe, expect, it } from 'vitest';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';

/**
 * README.md and docs/*.md read as one document each: no line said twice (the trace of two merges
 * colliding), and every table well formed (each row has the header's cell count; no table row
 * stranded away from its table, which Markdown renders as raw pipes).
 */
const ROOT = new URL('../', import.meta.url).pathname;
const FILES = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** Lines outside fenced code blocks, with their 1-based numbers. */
function proseLines(text: string): { n: number; line: string }[] {
  let fenced = false;
  const out: { n: number; line: string }[] = [];
  text.split('\n').forEach((line, i) => {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    else if (!fenced) out.push({ n: i + 1, line });
  });
  return out;
}

const isSeparator = (l: string) => /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/.test(l);
const isRow = (l: string) => l.trimStart().startsWith('|');

/** Cells of a table row: `|` separates cells unless escaped (`\|`) or inside a code span. */
function cells(row: string): number {
  let n = 0;
  let code = false;
  const s = row.trim().replace(/^\|/, '').replace(/\|$/, '');
  for (let i = 0; i < s.length; i++) {
    if (s[i] === '\\') i++;
    else if (s[i] === '`') code = !code;
    else if (s[i] === '|' && !code) n++;
  }
  return n + 1;
}

function duplicatedLines(text: string): string[] {
  const seen = new Map<string, number>();
  const repeated = new Set<number>();
  const dups: string[] = [];
  const lines = proseLines(text);
  for (const [i, { n, line }] of lines.entries()) {
    const key = line.trim();
    // Separators and table headers repeat by design (two tables of the same shape).
    if (key.length <= 40 || isSeparator(key) || isSeparator(lines[i + 1]?.line ?? '')) continue;
    const first = seen.get(key);
    if (first) {
      dups.push(`lines ${first} and ${n}: ${key.slice(0, 80)}`);
      repeated.add(n);
    } else seen.set(key, n);
  }
  // Near-duplicates: two rows of one table for the same thing (same first cell), and a sentence said twice.
  let firstCells = new Map<string, number>();
  const sentences = new Map<string, number>();
  for (const { n, line } of lines) {
    if (!isRow(line)) firstCells = new Map();
    else if (!isSeparator(line)) {
      const first = line
        .trim()
        .replace(/^\|/, '')
        .split(/(?<!\\)\|/)
        .slice(0, 2)
        .join('|')
        .trim();
      if (first && firstCells.has(first)) dups.push(`lines ${firstCells.get(first)} and ${n}: two rows starting ${first}`);
      firstCells.set(first, n);
      continue;
    }
    if (repeated.has(n)) continue;
    for (const sentence of line.split(/(?<=\.)\s+(?=[A-Z`])/)) {
      const key = sentence.trim();
      if (key.length <= 40 || !key.endsWith('.')) continue;
      if (sentences.has(key) && sentences.get(key) !== n) dups.push(`lines ${sentences.get(key)} and ${n}: the sentence "${key.slice(0, 60)}"`);
      sentences.set(key, n);
    }
  }
  return [...new Set(dups)];
}

function tableProblems(text: string): string[] {
  const lines = proseLines(text);
  const problems: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const { n, line } = lines[i]!;
    if (!isRow(line)) continue;
    const prev = lines[i - 1];
    const next = lines[i + 1];
    const startsTable = !prev || !isRow(prev.line);
    if (!startsTable) continue;
    // A table starts with a header row and a separator; a row that starts a block without one is stranded.
    if (!next || !isSeparator(next.line)) {
      problems.push(`line ${n}: a table row outside a table (no header and separator above it): ${line.slice(0, 80)}`);
      continue;
    }
    const width = cells(line);
    for (let j = i + 2; j < lines.length && isRow(lines[j]!.line); j++) {
      const got = cells(lines[j]!.line);
      if (got !== width) problems.push(`line ${lines[j]!.n}: ${got} cells, the header has ${width}: ${lines[j]!.line.slice(0, 80)}`);
      i = j;
    }
  }
  return problems;
}

describe('README.md and docs/*.md', () => {
  it.each(FILES)('%s has no duplicated lines', (file) => {
    expect(duplicatedLines(readFileSync(join(ROOT, file), 'utf8'))).toEqual([]);
  });

  it('would have caught the README of issue 28 (duplicated rows and sentences, a table broken by a stray line)', () => {
    const old = execFileSync('git', ['show', '3980b5b:README.md'], { cwd: ROOT, encoding: 'utf8' });
    expect(duplicatedLines(old).length).toBeGreaterThanOrEqual(3);
    expect(tableProblems(old).length).toBeGreaterThanOrEqual(1);
  });

  it.each(FILES)('%s has well-formed tables', (file) => {
    expect(tableProblems(readFileSync(join(ROOT, file), 'utf8'))).toEqual([]);
  });

  it('the checks catch what they are for', () => {
    const table = '| a | b |\n|---|---|\n| 1 | 2 |\n';
    expect(tableProblems(table)).toEqual([]);
    expect(tableProblems(`${table}| 1 | 2 | 3 |\n`)).toHaveLength(1);
    expect(tableProblems(`${table}\nA stray sentence.\n| 3 | 4 |\n`)).toHaveLength(1);
    expect(tableProblems('| `a\\|b` | `c|d` |\n|---|---|\n| x | y |\n')).toEqual([]);
    const line = 'A sentence long enough to count as prose, said twice over here.';
    expect(duplicatedLines(`${line}\n\n${line}\n`)).toHaveLength(1);
    expect(duplicatedLines('```\n' + `${line}\n${line}\n` + '```\n')).toEqual([]);
  });
});
