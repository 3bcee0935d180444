/** The probes area's public face: other areas and the composition root import only this file. */
export { MonitorWindows } from './store/monitor-windows.js';
export type { MonitorSelector, MonitorWindow } from './store/monitor-windows.js';
