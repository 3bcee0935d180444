import type { FastifyInstance } from 'fastify';
import type { RouteDeps } from '../../jobs/area.js';
import type { DoctorServices } from './wiring.js';
import { STATUS_LIST } from '../doctor/index.js';

/**
 * `GET /api/v1/doctor`: every check that applies, run now against the live deployment by the
 * replica that answers (the same report as `relay-jobs doctor --json`), with `recorded`: the
 * newest results the scheduled `doctor` job stored, whichever replica ran it.
 */
export function registerDoctorRoutes(api: FastifyInstance, deps: Pick<RouteDeps<DoctorServices>, 'metrics' | 'services'>): void {
  api.get('/doctor', async () => {
    const { doctor } = deps.services;
    const report = await doctor.run();
    for (const c of report.checks) for (const s of STATUS_LIST) deps.metrics.doctorCheck.set({ check: c.name, status: s }, c.status === s ? 1 : 0);
    return { ...report, recorded: await doctor.facts.lastResults() };
  });
}
