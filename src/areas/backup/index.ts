/** The backup area's public face: other areas and the composition root import only this file. */
export { Backups } from './store/backups.js';
