import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { RouteDeps } from '../../modules/area.js';
import type { DoctorServices } from './wiring.js';
import { STATUS_LIST } from './index.js';
import { json, route } from '../../http/contract.js';

const time = z.iso.datetime({ offset: true });
const status = z.enum(STATUS_LIST);
const Check = z.object({
  name: z.string(),
  group: z.string(),
  status,
  measured: z.string().meta({ description: 'what the check found' }),
  fix: z.string().meta({ description: 'what to do about it' }),
});
const DoctorReport = z
  .object({
    status: status.meta({ description: 'the worst status of any check' }),
    mode: z.enum(['embedded', 'cluster']),
    instance_id: z.string(),
    checked_at: time,
    checks: z.array(Check.meta({ id: 'DoctorCheck' })),
    recorded: z.array(Check.extend({ checked_at: time, instance_id: z.string() })).meta({ description: 'the newest results the scheduled doctor job stored, whichever replica ran it' }),
  })
  .meta({ id: 'DoctorReport' });

/**
 * `GET /api/v1/doctor`: every check that applies, run now against the live deployment by the
 * replica that answers (the same report as `relay-jobs doctor --json`), with `recorded`: the
 * newest results the scheduled `doctor` job stored, whichever replica ran it.
 */
export function registerDoctorRoutes(api: FastifyInstance, deps: Pick<RouteDeps<DoctorServices>, 'metrics' | 'services'>): void {
  route(
    api,
    { method: 'GET', path: '/doctor', operationId: 'runDoctor', summary: 'Run every self-check now (the report of `relay-jobs doctor --json`)', tag: 'doctor', responses: { 200: json(DoctorReport) } },
    async () => {
      const { doctor } = deps.services;
      const report = await doctor.run();
      for (const c of report.checks) for (const s of STATUS_LIST) deps.metrics.doctorCheck.set({ check: c.name, status: s }, c.status === s ? 1 : 0);
      return { ...report, recorded: await doctor.facts.lastResults() };
    },
  );
}
