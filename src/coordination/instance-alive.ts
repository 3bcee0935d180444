// The liveness tests are SQL text over kernel tables: they live with the one lease rule in
// store/liveness-sql.ts, which every lease's SQL is built from; coordination re-exports them.
export { instanceAliveSql, holderDeadSql } from '../store/liveness-sql.js';
