import { composeConfigSchema, type AreaConfigSections, type ConfigSchema } from '../config/schema.js';
import { loadConfigWith, type Config, type LoadOptions } from '../config/load.js';
import { printConfigWith } from '../config/print.js';
import { durationKeys, withDurationStrings as withDurationStringsOf } from '../config/duration-keys.js';
import type { AnyArea, ConfigOfAreas } from '../modules/area.js';
import { AREAS } from './registry.js';

/**
 * The whole configuration schema: the kernel's sections, then each listed area's (its `config`,
 * from its config.ts) in area-list order, then `jobs`. An area's section needs no edit here: the
 * area list is the one place that names it (docs/architecture.md, "Adding an area").
 */
export const configSchema: ConfigSchema = composeConfigSchema((AREAS as readonly AnyArea[]).map((a) => ({ name: a.name, sections: a.config ?? {} })));

// `Config` types the areas' sections by declaration merging in their config.ts (config/schema.ts,
// `AreaConfigSections`); this fails to compile unless those are exactly the listed areas' schemas
// (an area's config.ts merged in but the area not listed, or listed without its `config`).
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const sectionsMatch: Same<AreaConfigSections, ConfigOfAreas<typeof AREAS>> = true;
void sectionsMatch;

/** Dotted paths of the duration keys outside `jobs:` (e.g. `shutdown.grace`). */
export const DURATION_KEYS: readonly string[][] = durationKeys(configSchema);

/** The configuration (config/load.ts, `loadConfigWith`) under the composed schema. */
export function loadConfig(opts: LoadOptions = {}): Config {
  return loadConfigWith(configSchema, { ...opts, warn: (config) => (AREAS as readonly AnyArea[]).flatMap((a) => a.configWarnings?.(config) ?? []) });
}

/** `config check --print` (config/print.ts) under the composed schema. */
export function printConfig(cfg: Config): string {
  return printConfigWith(cfg, configSchema);
}

/** A copy of `tree` with every duration key (milliseconds) written as a duration string. */
export function withDurationStrings<T>(tree: T): T {
  return withDurationStringsOf(tree, configSchema);
}
