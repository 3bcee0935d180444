/** The admin area's public face: other areas and the composition root import only this file. */
export { readConsoleRole } from './store/sql-console.js';
