import { z } from 'zod';
import { formatDuration, parseDuration } from './duration.js';
import { jobBase } from './schema.js';
import { isDurationSchema } from './duration-schema.js';

/**
 * Which config keys are durations, read from the schema itself, so that printing and the
 * "bare number" warning never drift from it. Durations are milliseconds inside the program and
 * written back in the config's own form (`20s`, `5m`) wherever a user sees them: a printed
 * `20000` pasted back into YAML, where a bare number means seconds, would be 5.5 hours.
 */
function unwrap(schema: z.ZodType): z.ZodType {
  let s = schema;
  while (s instanceof z.ZodDefault || s instanceof z.ZodPrefault || s instanceof z.ZodOptional) s = (s as z.ZodDefault | z.ZodPrefault | z.ZodOptional).def.innerType as z.ZodType;
  return s;
}

function paths(schema: z.ZodType, prefix: string[], out: string[][]): string[][] {
  const s = unwrap(schema);
  if (isDurationSchema(s)) out.push(prefix);
  else if (s instanceof z.ZodObject) for (const [k, v] of Object.entries(s.shape as Record<string, z.ZodType>)) paths(v, [...prefix, k], out);
  return out;
}

const known = new WeakMap<z.ZodType, readonly string[][]>();

/** Paths of the duration keys of a whole schema outside `jobs:` (e.g. `shutdown.grace`), walked once per schema. */
export function durationKeys(schema: z.ZodType): readonly string[][] {
  let keys = known.get(schema);
  if (!keys) known.set(schema, (keys = paths(schema, [], [])));
  return keys;
}
/** The common duration keys of every `jobs.<name>` section. */
export const JOB_DURATION_KEYS: readonly string[] = Object.entries(jobBase)
  .filter(([, v]) => isDurationSchema(unwrap(v)))
  .map(([k]) => k);

type Tree = Record<string, unknown>;

function get(tree: unknown, path: readonly string[]): unknown {
  let node = tree;
  for (const k of path) node = node && typeof node === 'object' ? (node as Tree)[k] : undefined;
  return node;
}

/** A copy of `tree` with every duration key of `schema` (milliseconds) written as a duration string. */
export function withDurationStrings<T>(tree: T, schema: z.ZodType): T {
  const copy = structuredClone(tree) as Tree;
  for (const path of durationKeys(schema)) {
    const parent = get(copy, path.slice(0, -1));
    const key = path[path.length - 1]!;
    if (parent && typeof parent === 'object' && typeof (parent as Tree)[key] === 'number') (parent as Tree)[key] = formatDuration((parent as Tree)[key] as number);
  }
  return copy as T;
}

function about(ms: number): string {
  if (ms >= 86_400_000) return `about ${(ms / 86_400_000).toFixed(1)} days`;
  if (ms >= 3_600_000) return `about ${(ms / 3_600_000).toFixed(1)} hours`;
  return `about ${(ms / 60_000).toFixed(1)} minutes`;
}

/**
 * A bare number means seconds; one that is a whole multiple of 1000 was most likely meant as
 * milliseconds (`grace: 20000`). Returns one warning per such key, naming its source.
 */
export function bareNumberWarnings(raw: Tree, from: (key: string) => string, schema: z.ZodType): string[] {
  const suspicious = (v: unknown): v is number => typeof v === 'number' && v >= 1000 && v % 1000 === 0;
  const warn = (key: string, v: number) =>
    `${key} (${from(key)}): the bare number ${v} means ${v} seconds (${about(parseDuration(v)!)}); if milliseconds were meant, write "${formatDuration(v)}" (or "${v}ms")`;
  const out: string[] = [];
  for (const path of durationKeys(schema)) {
    const v = get(raw, path);
    if (suspicious(v)) out.push(warn(path.join('.'), v));
  }
  const jobs = raw.jobs && typeof raw.jobs === 'object' ? (raw.jobs as Tree) : {};
  for (const [name, section] of Object.entries(jobs)) {
    for (const k of JOB_DURATION_KEYS) {
      const v = get(section, [k]);
      if (suspicious(v)) out.push(warn(`jobs.${name}.${k}`, v));
    }
  }
  return out;
}
