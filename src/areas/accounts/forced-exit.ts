import type { Logger } from '../../telemetry/logger.js';
import type { ForcedExitSaver } from '../../modules/wiring.js';
import type { Refresher } from './refresher.js';

/**
 * What a forced exit (a second signal) saves of token refresh: the replies to calls already sent
 * to the OAuth provider. With rotation the new refresh token exists only in them, so the exit
 * waits for them to be stored (bounded by cli/start.ts) and names at error level every account
 * whose reply it could not store: those must be re-authorized if the provider rotated the token.
 */
export function refreshForcedExit(refresher: Refresher, log: Logger): ForcedExitSaver {
  const lost = (ids: number[]) =>
    log.error(
      { account_ids: ids },
      `FORCED EXIT LOST REFRESH REPLIES for accounts ${ids.join(', ')}: their refresh calls were sent but not stored; if the provider rotated the refresh token, these accounts must be re-authorized`,
    );
  return {
    pending: () => refresher.callsInFlight().length > 0,
    async save(boundMs) {
      const calls = refresher.callsInFlight();
      log.error({ account_ids: calls, wait_ms: boundMs }, 'second signal: exiting without a clean drain once the refresh calls already sent are stored');
      const left = await refresher.settleCalls(boundMs);
      if (left.length) lost(left);
      else log.warn({ account_ids: calls }, 'forced exit: in-flight refresh results stored');
    },
    abandon() {
      const ids = refresher.callsInFlight();
      if (ids.length) lost(ids);
    },
  };
}
