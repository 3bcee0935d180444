// The doctor's public face: the checks, the runner and the service that builds a check's context.
export { CHECKS } from './catalogue.js';
export { Doctor, type DoctorDeps } from './doctor.js';
export type { CheckResult, CheckStatus, DoctorCheck, DoctorContext } from './check.js';
export { STATUSES as STATUS_LIST } from './check.js';
export { runDoctor, exitCode, renderReport, type DoctorReport } from './runner.js';
export { doctorOptions, resolveDoctorOptions, DOCTOR_OPTIONS, type DoctorOptions } from './options.js';
