/**
 * Each replica's process figures (RSS, heap used, event-loop lag p99, CPU %), written by its
 * heartbeat in the same one statement as the beat (`process_at` is that beat's database time).
 * ops_metrics reads them for every live replica whose figures are fresh.
 */
export const sql = `
ALTER TABLE instances ADD COLUMN process jsonb, ADD COLUMN process_at timestamptz;
`;
