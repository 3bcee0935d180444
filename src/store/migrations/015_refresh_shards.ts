/**
 * Refresh sharding (docs/coordination.md, "Refresh work shared"): `instances.refreshes` says
 * whether a replica runs `token_refresh`, so only those share the accounts' scheduled refreshes.
 */
export const sql = `
ALTER TABLE instances ADD COLUMN refreshes boolean NOT NULL DEFAULT false;
`;
