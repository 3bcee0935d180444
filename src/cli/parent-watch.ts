import { interval } from '../time/wall.js';
/**
 * A service started through a package-manager script (`npm start`) has the package manager as
 * its parent. When a process manager, a container runtime or `kill %1` stops that parent, the
 * signal may never reach the service: it is re-parented and would keep serving, unseen. So when
 * started by a script, the service polls its parent id and shuts down cleanly once it changes.
 * Started directly (`node dist/cli/main.js start`, systemd, a container's command) nothing is
 * watched: re-parenting is then a deliberate choice (nohup, a daemonising shell).
 */
export function startedByScript(env: NodeJS.ProcessEnv = process.env): boolean {
  return Boolean(env.npm_lifecycle_event);
}

/** Calls `onGone` once when the parent process exits. Returns a stop function. The timer never holds the process open. */
export function watchParent(onGone: (formerParent: number) => void, everyMs = 1000): () => void {
  const parent = process.ppid;
  const cancel = interval(
    () => {
      if (process.ppid === parent) return;
      cancel();
      onGone(parent);
    },
    everyMs,
    { unref: true },
  );
  return cancel;
}
