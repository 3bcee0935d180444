import { AREAS, type Services } from './registry.js';
import type { WireFn } from '../modules/area.js';
import type { ForcedExitSaver, WiringContext, Wired } from '../modules/wiring.js';
import type { Metrics } from '../telemetry/metrics.js';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- each area's wire function has its own services and uses
type AnyWire = WireFn<any, any>;

/** Makes every listed area's metric groups on `metrics` (AreaModule.metrics); returns it. */
export function withAreaMetrics(metrics: Metrics): Metrics {
  for (const g of AREAS.flatMap((a) => a.metrics ?? [])) metrics.group(g);
  return metrics;
}

/** Loads every area's wire function (each area imports its clients here, not when the area list is read). */
export async function loadWirings(): Promise<AnyWire[]> {
  const loaded = await Promise.all(AREAS.map((a) => a.wiring?.()));
  return loaded.filter((w): w is AnyWire => w !== undefined);
}

/**
 * Every area's services and their shutdown rungs, in area-list order: each wire function gets the
 * services the areas before it returned (the faces it declares it uses), so the combined object is
 * built up in one pass. This file names no area: the list is app/registry.ts.
 */
export function wireServices(w: WiringContext, wirings: readonly AnyWire[]): Wired<Services> & { registered: (bootId: string) => void; forcedExitSavers: ForcedExitSaver[] } {
  const services: Record<string, unknown> = { metrics: withAreaMetrics(w.metrics) };
  const parts = wirings.map((wire) => {
    const part = wire(w, services as never);
    Object.assign(services, part.services);
    return part;
  });
  return {
    services: services as unknown as Services,
    rungs: parts.flatMap((p) => p.rungs),
    prepare: async () => {
      for (const p of parts) await p.prepare?.();
    },
    registered: (bootId) => {
      for (const p of parts) p.registered?.(bootId);
    },
    forcedExitSavers: parts.flatMap((p) => (p.forcedExit ? [p.forcedExit] : [])),
  };
}
