/**
 * Each replica's loop report (issue 49, point 3): what every long-running loop of the process has
 * been doing (ticks failing in a row and the last error's class, a tick running too long), written
 * by its heartbeat in the same one statement as the beat, so `heartbeat_at` is its time. Job
 * health reads it per live replica for the loops a job owns (`workers/loop-book.ts`).
 */
export const sql = `
ALTER TABLE instances ADD COLUMN loops jsonb;
`;
