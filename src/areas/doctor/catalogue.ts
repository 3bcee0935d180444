import type { DoctorCheck } from './check.js';
import { sameBackends } from './checks/backends.js';
import { deadReplicasCheck } from './checks/replicas.js';
import { configDrift } from './checks/drift.js';
import { redisEviction, redisPersistence, redisTopology } from './checks/redis.js';
import { clockSkew, cronTimezones } from './checks/clock.js';
import { connectionBudgetCheck, poolBudget } from './checks/pool.js';
import { autovacuum, autovacuumServer, diskHeadroom, xidAge } from './checks/postgres.js';
import { opsRetentionTables, retentionOrder } from './checks/retention.js';
import { oauthConfig, refreshBreaker, refreshMargin, tokenExpiry } from './checks/refresh.js';
import { envIsolation } from './checks/environment.js';
import { backupAge, backupPermissions, restoreDrill } from './checks/backups.js';
import { imageStore } from './checks/images.js';
import { adminToken, backendTls, dataDirPermissions, sqlConsoleRole } from './checks/security.js';

/** Every check, in the order they print. A new check is one file in `checks/` and one entry here. */
export const CHECKS: readonly DoctorCheck[] = [
  sameBackends,
  deadReplicasCheck,
  configDrift,
  redisEviction,
  redisPersistence,
  redisTopology,
  clockSkew,
  cronTimezones,
  poolBudget,
  connectionBudgetCheck,
  autovacuumServer,
  autovacuum,
  xidAge,
  diskHeadroom,
  retentionOrder,
  opsRetentionTables,
  refreshMargin,
  tokenExpiry,
  refreshBreaker,
  oauthConfig,
  envIsolation,
  backupAge,
  restoreDrill,
  backupPermissions,
  imageStore,
  adminToken,
  sqlConsoleRole,
  dataDirPermissions,
  backendTls,
];
