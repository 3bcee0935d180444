import { jobsFor } from '../../modules/define-job.js';
import type { ChangeStreamServices } from './wiring.js';

const defineJob = jobsFor<ChangeStreamServices>();

/**
 * change_stream: on every replica the publisher runs on its own loop (woken by the outbox's
 * notifications, else every `change_stream.poll_interval`; one replica publishes at a time); each
 * round (every 30 s) runs one publish pass and fails while the oldest unpublished event is at or
 * past `change_stream.lag_bound` (Redis refusing XADD, say), so the job's health reads `failing`.
 */
export const changeStreamJob = defineJob({
  name: 'change_stream',
  description: 'Publishes the change_events outbox to the gateway change stream (Redis Stream; seq only in embedded mode)',
  scope: 'instance',
  defaults: { enabled: true, every: '30s', timeout: '30s' },
  needs: ['changePublisher', 'changeEvents'],
  loops: ['change_stream'],
  onStart({ changePublisher }) {
    changePublisher.start();
  },
  onStop: ({ changePublisher }, by) => changePublisher.stop(by),
  async run(_ctx, { changePublisher }, _o, config) {
    const r = await changePublisher.publishPending();
    const note = `published ${r.published}, backlog ${r.backlog}, lag ${r.lagSeconds.toFixed(1)}s${r.busy ? ', another replica publishing' : ''}`;
    if (r.lagSeconds * 1000 >= config.change_stream.lag_bound)
      throw new Error(`change stream lag ${r.lagSeconds.toFixed(1)}s is at or past change_stream.lag_bound (${config.change_stream.lag_bound / 1000}s): ${note}`);
    return { items: r.published, note };
  },
});
