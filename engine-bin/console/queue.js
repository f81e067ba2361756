// One queue, as an operator decides about it: what runs now (and on which worker), what
// waits in the order workers take it, and the pending retries by due time; pause and resume
// for the whole queue, kill for one execution. Lists are the first 50 of each kind, with the
// totals, so a long backlog costs the page what a short one does.

import { allows, call, get, query } from './api.js';
import { badge, clear, execLink, h, section, table, when } from './dom.js';
import { act, taskLink } from './views.js';

const SHOWN = 50;

export function queue(root, { params, role }) {
  const name = params.get('name');
  const path = `/queues/${encodeURIComponent(name)}`;
  const title = h('h1', {}, `Queue ${name}`);
  const actions = h('p', { class: 'actions' });
  const body = h('div', {});
  root.append(h('p', {}, h('a', { href: '#/overview' }, '← Overview')), title, actions, body);
  const operate = allows(role, 'operate');

  const kill = (e) => (operate ? h('button', { type: 'button', class: 'danger', 'data-action': 'kill', onclick: () => act({
    title: 'Kill execution', text: `Stop execution ${e.execution_id} of ${e.namespace}/${e.task_id}: it ends killed, without retry.`,
    run: () => call(`/executions/${encodeURIComponent(e.execution_id)}/kill`, { method: 'POST' }),
    done: () => `Killed ${e.execution_id}.`, then: refresh,
  }) }, 'Kill') : null);
  const rows = (list, cells) => list.map((e) => {
    const row = [execLink(e.execution_id), taskLink(e.namespace, e.task_id), String(e.attempt), ...cells(e)];
    if (operate) row.push(kill(e));
    return row;
  });
  const heads = (more) => ['Execution', 'Task', 'Attempt', ...more, ...(operate ? [''] : [])];
  const more = (shown, total) => (total > shown ? h('p', { class: 'muted' }, `The first ${shown} of ${total}.`) : null);

  // The title and the buttons are rebuilt only when the queue's state changes: rebuilt on
  // every refresh, a click landing while they are replaced would find no button.
  let shown = null;
  async function refresh() {
    const q = await get(`${path}${query({ limit: SHOWN })}`);
    if (shown !== q.paused) {
      shown = q.paused;
      clear(title).append(...[`Queue ${q.name}`, q.paused ? badge('paused', 'paused') : null].filter(Boolean));
      clear(actions).append(...[operate ? (q.paused
        ? h('button', { type: 'button', 'data-action': 'resume-queue', onclick: () => act({
          title: 'Resume queue', text: `Workers take from queue ${q.name} again.`,
          run: () => call(`${path}/resume`, { method: 'POST' }), done: () => `Resumed queue ${q.name}.`, then: refresh,
        }) }, 'Resume')
        : h('button', { type: 'button', 'data-action': 'pause-queue', onclick: () => act({
          title: 'Pause queue', text: `Workers take nothing from queue ${q.name} until it is resumed; executions wait, running ones go on.`,
          run: () => call(`${path}/pause`, { method: 'POST' }), done: () => `Paused queue ${q.name}.`, then: refresh,
        }) }, 'Pause')) : null,
      h('a', { href: `#/dlq?queue=${encodeURIComponent(q.name)}` }, 'Dead letters')].filter(Boolean));
    }
    clear(body).append(
      section(`Running (${q.running.length})`,
        table(heads(['Worker', 'Enqueued']), rows(q.running, (e) => [e.worker || '–', when(e.enqueued_at)]), 'Nothing runs now.')),
      section(`Waiting (${q.waiting_total})`,
        table(heads(['Priority', 'Due', 'Enqueued']), rows(q.waiting, (e) => [String(e.priority), when(e.fire_at), when(e.enqueued_at)]),
          q.paused ? 'Nothing waits. The queue is paused: what arrives waits here.' : 'Nothing waits.'),
        more(q.waiting.length, q.waiting_total)),
      section(`Retrying (${q.retrying_total})`,
        table(heads(['Retry due', 'Due']), rows(q.retrying, (e) => [when(e.retry_at), when(e.fire_at)]), 'No retry pending.'),
        more(q.retrying.length, q.retrying_total)));
    body.id = 'queue-contents';
  }
  return { refresh };
}
