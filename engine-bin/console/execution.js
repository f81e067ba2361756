// One execution: its story (each event in the order it happened), its attempts with the
// worker that ran each, their errors and output, and its dead letter. Reached from every
// execution id on the page and from the search box, which also takes the start or the end
// of an id: a fragment is resolved through the API's bounded search, and several matches
// are listed rather than guessed between.

import { ApiError, get, query } from './api.js';
import { badge, clear, duration, excerpt, execLink, h, notice, section, table, when } from './dom.js';
import { taskLink } from './views.js';

const WHOLE_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function execution(root, { params }) {
  const text = (params.get('id') || '').trim();
  const title = h('h1', {}, 'Execution ', h('code', { class: 'id', id: 'execution-id' }, text));
  const copy = h('button', { type: 'button', id: 'copy-id', title: 'Copy the whole id', onclick: () => copyId(text) }, 'Copy id');
  const body = h('div', { class: 'grid' });
  root.append(title, h('p', { class: 'actions' }, copy), body);
  async function refresh() {
    if (!WHOLE_ID.test(text)) {
      copy.hidden = true;
      return resolve(text, body);
    }
    let story;
    try {
      story = await get(`/executions/${encodeURIComponent(text)}`);
    } catch (e) {
      if (!(e instanceof ApiError) || e.status !== 404) throw e;
      clear(body).append(section('Not found', h('p', { class: 'empty', id: 'not-found' }, e.message)));
      return;
    }
    clear(body).append(...[facts(story), section('Story', storyList(story)), attempts(story),
      story.fire ? fire(story.fire) : null].filter(Boolean));
  }
  return { refresh };
}

async function copyId(id) {
  try {
    await navigator.clipboard.writeText(id);
    notice(`Copied ${id}.`, 'ok');
  } catch {
    notice(`Could not copy; the id is ${id}`, 'ok');
  }
}

// A fragment: one match opens it (replacing the fragment in the history), several are listed.
async function resolve(text, body) {
  const found = await get(`/executions/find${query({ id: text })}`);
  if (found.matches.length === 1 && !found.more) {
    location.replace(`#/execution/${found.matches[0].execution_id}`);
    return;
  }
  const rows = found.matches.map((m) => [execLink(m.execution_id, true), taskLink(m.namespace, m.task_id), when(m.due)]);
  const none = found.complete
    ? `No execution id starts or ends with “${found.fragment}” in the execution history.`
    : `No execution id starts or ends with “${found.fragment}” among the newest attempts of the history; give the whole id.`;
  clear(body).append(section(rows.length ? `${found.more ? 'More than ' : ''}${rows.length} executions match` : 'Not found',
    rows.length ? h('p', {}, 'The start or the end of an id can name several executions; pick one.') : null,
    h('div', { id: 'candidates' }, table(['Execution', 'Task', 'Due'], rows, none))));
}

// How an execution started, in words: the schedule, an upstream task, or who asked.
function originText(origin) {
  if (!origin) return 'the schedule (recorded before origins were kept)';
  const by = origin.actor ? ` by ${origin.actor}` : '';
  switch (origin.kind) {
    case 'schedule': return 'the schedule';
    case 'parent': return 'its upstream task\'s success';
    case 'manual': return `a run now${by}${origin.payload_bytes === undefined ? '' : `, with its own payload (${origin.payload_bytes} bytes)`}`;
    case 'backfill': return `a backfill${by}`;
    case 'requeue': return `a requeue of a dead letter${by}`;
    default: return origin.kind;
  }
}

function facts(story) {
  const workers = [...new Set(story.attempts.map((a) => a.worker).filter(Boolean))];
  if (story.waiting && !workers.includes(story.waiting.worker)) workers.push(story.waiting.worker);
  const last = story.attempts[story.attempts.length - 1];
  return section('Execution', h('dl', { class: 'facts' },
    h('dt', {}, 'Task'), h('dd', {}, taskLink(story.namespace, story.task_id)),
    h('dt', {}, 'Outcome'), h('dd', { id: 'outcome' }, badge(story.outcome || 'unknown')),
    h('dt', {}, 'Queue'), h('dd', {}, story.queue || '–'),
    h('dt', {}, 'Started by'), h('dd', { id: 'origin' }, originText(story.origin)),
    story.origin && story.origin.payload !== undefined
      ? [h('dt', {}, 'Payload'), h('dd', {}, h('code', {}, JSON.stringify(story.origin.payload)))] : null,
    story.origin && story.origin.requeue_of
      ? [h('dt', {}, 'Requeue of'), h('dd', { id: 'requeue-of' }, execLink(story.origin.requeue_of, true))] : null,
    h('dt', {}, 'Due'), h('dd', {}, when(story.due)),
    h('dt', {}, 'Enqueued'), h('dd', {}, when(story.enqueued)),
    h('dt', {}, 'Attempts'), h('dd', {}, String(story.attempts.length + (story.waiting ? 1 : 0))),
    h('dt', {}, workers.length === 1 ? 'Worker' : 'Workers'), h('dd', { id: 'workers' }, workers.join(', ') || '–'),
    last && last.error ? [h('dt', {}, 'Error'), h('dd', { class: 'err', id: 'error' }, last.error)] : null,
    story.dead_letter ? [h('dt', {}, 'Dead letter'), h('dd', {}, 'since ', when(story.dead_letter.dead_at))] : null,
    story.requeued_as ? [h('dt', {}, 'Requeued as'), h('dd', { id: 'requeued-as' }, execLink(story.requeued_as, true))] : null,
    story.complete ? null : [h('dt', {}, 'Note'), h('dd', { class: 'warn' }, 'The search for its attempts stopped at its bound: later attempts may be missing.')]));
}

// The events in the order they happened: the fire, the enqueue, each attempt from its
// enqueue to its end (and the retry it scheduled), the attempt waiting for its completion,
// the dead letter.
function storyList(story) {
  const ev = [];
  const add = (at, text, cls) => ev.push(h('li', { class: cls || '' }, when(at), h('span', { class: 'what' }, text)));
  if (story.due !== undefined) add(story.due, !story.origin || story.origin.kind === 'schedule' ? 'fire due' : `asked: ${originText(story.origin)}`);
  if (story.enqueued !== undefined) add(story.enqueued, `enqueued on queue ${story.queue}`);
  story.attempts.forEach((a, i) => {
    const next = story.attempts[i + 1];
    if (a.attempt > 1 && a.enqueued !== undefined) add(a.enqueued, `attempt ${a.attempt} enqueued (retry)`);
    if (a.started !== undefined) add(a.started, `attempt ${a.attempt} started on ${a.worker || 'a worker'}${a.lateness_ms === undefined ? '' : `, ${duration(a.lateness_ms)} after due`}`);
    add(a.finished, `attempt ${a.attempt} ${a.outcome}${a.duration_ms === undefined ? '' : ` after ${duration(a.duration_ms)}`}${a.error ? `: ${a.error}` : ''}`,
      a.error ? 'err' : '');
    // A retry killed before it was due never came: no due line for it.
    if (a.retry_at !== undefined && !(next && next.started === undefined)) add(a.retry_at, `attempt ${a.attempt + 1} due (retry)`);
  });
  const w = story.waiting;
  if (w) {
    add(w.started, `attempt ${w.attempt} started on ${w.worker}; accepted, waiting for its completion`);
    if (w.progress) add(w.progress.at, `progress${w.progress.percent === undefined ? '' : ` ${w.progress.percent}%`}${w.progress.message ? `: ${w.progress.message}` : ''}`);
    if (w.deadline !== undefined) add(w.deadline, 'the completion or the next progress report is due by then');
  }
  if (story.dead_letter) add(story.dead_letter.dead_at, `dead-lettered: ${story.dead_letter.last_error}`, 'err');
  return ev.length ? h('ol', { class: 'story', id: 'story' }, ev) : h('p', { class: 'empty' }, 'Nothing recorded yet.');
}

function attempts(story) {
  const rows = story.attempts.map((a) => [
    String(a.attempt),
    a.worker || '–',
    when(a.started),
    a.lateness_ms === undefined ? '–' : duration(a.lateness_ms),
    a.duration_ms === undefined ? '–' : duration(a.duration_ms),
    badge(a.outcome),
    a.error ? h('span', { class: 'err', title: a.error }, a.error) : '',
    a.output ? excerpt(a.output) : '',
  ]);
  return section('Attempts', table(['#', 'Worker', 'Started', 'Lateness', 'Took', 'Outcome', 'Error', 'Output'], rows,
    story.waiting ? 'The first attempt has not ended yet.' : 'No attempt recorded.'));
}

function fire(f) {
  const rows = f.executions.map((a) => [
    execLink(a.execution_id),
    a.target_worker ? `on ${a.target_worker}` : a.shard_total ? `shard ${a.shard_index + 1}/${a.shard_total}` : '–',
    badge(a.outcome),
  ]);
  return section(`Its fire: ${f.total} executions`,
    h('p', { class: 'muted' }, 'Fan-out ', h('code', { class: 'id', title: f.fanout_id }, f.fanout_id)),
    table(['Execution', 'Piece', 'Outcome'], rows, 'No other execution of the fire recorded.'));
}
