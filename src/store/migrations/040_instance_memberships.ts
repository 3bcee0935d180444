/**
 * Memberships (coordination/memberships.ts): the named groups of live replicas that areas declare.
 * `instances.memberships` lists those this replica is a member of; every beat reads the live
 * members of each declared one. It replaces migration 015's boolean column of the one group there
 * was, which no code reads any more; the column stays so that replicas of the previous release keep
 * registering and beating during a rolling deploy (a later migration may drop it).
 */
export const sql = `
ALTER TABLE instances ADD COLUMN memberships text[] NOT NULL DEFAULT '{}';
`;
