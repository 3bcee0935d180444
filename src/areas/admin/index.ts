/** The admin area's public face: other areas and the composition root import only this file. */
export { consoleDatabaseUrl, consoleRoleSql, inspectConsoleRole, reachFindings, SECRET_COLUMNS, type ConsoleRoleReach } from './store/console-role.js';
