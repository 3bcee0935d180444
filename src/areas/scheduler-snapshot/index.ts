/** The scheduler-snapshot area's public face: other areas import only this file. */
export { enqueueSnapshotEvent } from './store/snapshot-events.js';
