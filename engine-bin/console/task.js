// One task: its spec (masked by the API: the console never asks for secrets), state, next
// fires, recent executions, and the actions the caller's role allows.

import { allows, call, get, query, taskPath } from './api.js';
import {
  badge, clear, duration, excerpt, execLink, h, inZone, scheduleText, section, statusBadge, table, when,
} from './dom.js';
import { act } from './views.js';

// A time typed by a person: ISO text, or a duration before now (`2h`, `1d`).
function instant(text) {
  const m = /^\s*(\d+)\s*([smhd])\s*$/.exec(text);
  if (m) return Date.now() - Number(m[1]) * { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3 }[m[2]];
  if (/^\s*now\s*$/.test(text)) return Date.now();
  const t = Date.parse(text);
  if (Number.isNaN(t)) throw new Error(`\`${text}\` is neither a date nor a duration before now`);
  return t;
}

export function task(root, { params, role, go }) {
  const ns = params.get('ns');
  const id = params.get('id');
  const path = taskPath(ns, id);
  const title = h('h1', {}, `${ns}/${id}`);
  const actions = h('p', { class: 'actions' });
  const body = h('div', { class: 'grid' });
  root.append(h('p', {}, h('a', { href: '#/tasks' }, '← Tasks')), title, actions, body);

  function buttons(view) {
    clear(actions);
    if (allows(role, 'admin')) {
      actions.append(h('a', { href: `#/edit/${encodeURIComponent(ns)}/${encodeURIComponent(id)}`, class: 'button', id: 'edit-task' }, 'Edit'));
    }
    const label = `${ns}/${id}`;
    const b = (name, text, needed, spec, cls) => (allows(role, needed)
      ? h('button', { type: 'button', class: cls, 'data-action': name, onclick: () => act(spec) }, text) : null);
    actions.append(
      view.status === 'PAUSED'
        ? b('resume', 'Resume', 'operate', {
          title: 'Resume task', text: `${label} fires again on its schedule.`,
          run: () => call(`${path}/resume`, { method: 'POST' }), done: () => `Resumed ${label}.`, then: refresh,
        })
        : b('pause', 'Pause', 'operate', {
          title: 'Pause task', text: `${label} stops firing until resumed. A running execution goes on.`,
          run: () => call(`${path}/pause`, { method: 'POST' }), done: () => `Paused ${label}.`, then: refresh,
        }),
      b('trigger', 'Trigger', 'operate', {
        title: 'Trigger task', text: `Run ${label} now, outside its schedule. Leave the payload empty to use the spec's.`,
        fields: [{ name: 'payload', label: 'Payload (JSON, optional)', multiline: true }],
        run: (v) => call(`${path}/trigger`, { method: 'POST', body: v.payload.trim() ? { payload: JSON.parse(v.payload) } : {} }),
        done: (r) => `Triggered ${label}: execution ${r.body.execution_id}.`, then: refresh,
      }),
      b('kill', 'Kill', 'operate', {
        title: 'Kill executions', text: `Stop every waiting, retrying or running execution of ${label}.`,
        run: () => call(`${path}/kill`, { method: 'POST' }),
        done: (r) => `Killed ${r.body.killed.map((k) => `${k.execution_id} (${k.state})`).join(', ')}.`, then: refresh,
      }, 'danger'),
      b('backfill', 'Backfill', 'operate', {
        title: 'Backfill', text: `Run each fire of ${label} in a past range once, oldest first. Times: a date (2026-01-31T00:00Z) or a duration before now (6h).`,
        fields: [{ name: 'from', label: 'From', value: '1h' }, { name: 'to', label: 'To', value: 'now' }],
        run: (v) => call(`${path}/backfill`, { method: 'POST', body: { from: instant(v.from), to: instant(v.to) } }),
        done: (r) => `Backfill enqueued ${r.body.execution_ids.length} fire(s).`, then: refresh,
      }),
      b('delete', 'Delete', 'admin', {
        title: 'Delete task', text: `Delete ${label}. Its history stays; it never fires again.`,
        run: () => call(path, { method: 'DELETE' }), done: () => `Deleted ${label}.`, then: () => go('#/tasks'),
      }, 'danger'));
  }

  async function refresh() {
    const [view, page] = await Promise.all([
      get(path),
      get(`/executions${query({ task: `${ns}/${id}`, limit: 20 })}`),
    ]);
    buttons(view);
    const invalid = view.status === 'INVALID';
    const spec = view.spec || {};
    // depends_on names a parent as ns/id or id (in the task's own namespace).
    const deps = (Array.isArray(spec.depends_on) ? spec.depends_on : [])
      .map((d) => ({ ...d, task: String(d.task || '').includes('/') ? d.task : `${view.namespace}/${d.task}` }));
    const shards = spec.fanout && spec.fanout.shards;
    const broadcast = spec.fanout && spec.fanout.broadcast;
    const state = h('dl', { class: 'facts' },
      h('dt', {}, 'Status'), h('dd', { id: 'status' }, statusBadge(view),
        view.namespace_paused ? h('span', { class: 'muted' }, ` (namespace ${view.namespace} paused)`) : null),
      view.throttled ? [h('dt', {}, 'Throttled'), h('dd', { id: 'throttled', class: 'err' },
        `${view.throttled.failures} of its last ${view.throttled.executions} executions failed, so 1 fire in ${view.throttled.dispatch_every} is dispatched until they succeed again. Since `,
        when(view.throttled.since))] : null,
      h('dt', {}, 'Schedule'), h('dd', { id: 'schedule' }, scheduleText(view.schedule_text)),
      h('dt', {}, 'Next fire'), h('dd', {}, when(view.next_fire)),
      h('dt', {}, 'Last fire'), h('dd', {}, when(view.last_fire)),
      h('dt', {}, 'Last outcome'), h('dd', {}, view.last_outcome ? badge(view.last_outcome) : 'never ran'),
      view.last_error ? [h('dt', {}, 'Last error'), h('dd', { class: 'err' }, view.last_error)] : null,
      deps.length ? [h('dt', {}, 'Runs after'), h('dd', { id: 'depends-on' }, deps.map((d, i) => [i ? ', ' : '', h('a', { href: `#/task/${d.task}` }, d.task), ` (on ${d.on || 'success'})`]))] : null,
      shards ? [h('dt', {}, 'Fan-out'), h('dd', {}, `${shards} shards per fire`)] : null,
      broadcast ? [h('dt', {}, 'Fan-out'), h('dd', {}, 'broadcast: one execution per live worker of the queue, per fire')] : null);
    const errors = view.errors && view.errors.length
      ? section(invalid ? 'Invalid spec' : 'Problems', h('ul', { class: 'warnings' }, view.errors.map((e) => h('li', {}, e))))
      : null;
    // A cron task fires by its own zone's clock: its fires are shown in that zone too.
    const taskZone = spec.schedule && spec.schedule.timezone;
    const fires = view.upcoming_fires && view.upcoming_fires.length
      ? h('ol', { class: 'fires', id: 'upcoming' }, view.upcoming_fires.map((t) => h('li', {}, when(t),
        taskZone ? h('small', { class: 'zoned', title: "the task's schedule zone" }, inZone(t, taskZone)) : null)))
      : h('p', { class: 'empty' }, view.status === 'PAUSED' ? 'Paused: no fire.' : 'No fire ahead.');
    const throttledNote = view.throttled
      ? h('p', { class: 'warn' }, `Throttled: 1 of every ${view.throttled.dispatch_every} of these fires is dispatched, the others are skipped.`) : null;
    const row = (a) => [
      [execLink(a.execution_id),
        a.shard_total ? h('span', { class: 'muted', title: `fan-out ${a.fanout_id}` }, ` shard ${a.shard_index + 1}/${a.shard_total}`) : null,
        a.target_worker ? h('span', { class: 'muted', title: 'the worker this broadcast execution is addressed to' }, ` on ${a.target_worker}`) : null,
        a.run_id ? h('span', { class: 'muted', title: `run ${a.run_id}` }, ` run …${a.run_id.slice(-8)}`) : null],
      String(a.attempt),
      badge(a.outcome),
      when(a.due),
      a.lateness_ms === undefined ? '–' : duration(a.lateness_ms),
      a.duration_ms === undefined ? '–' : duration(a.duration_ms),
      a.error ? h('span', { class: 'err', title: a.error }, a.error) : '',
      a.output ? excerpt(a.output) : '',
    ];
    // The executions of one fanned-out fire (shards, or a broadcast's one per worker) under
    // a row for the fire itself, in the order the fires first appear on the page.
    const groups = [];
    const byFire = new Map();
    for (const a of page.items) {
      if (!a.fanout_id) { groups.push([a]); continue; }
      if (!byFire.has(a.fanout_id)) { byFire.set(a.fanout_id, []); groups.push(byFire.get(a.fanout_id)); }
      byFire.get(a.fanout_id).push(a);
    }
    const fireRow = (items) => {
      const latest = new Map();
      for (const a of items) if (!latest.has(a.execution_id)) latest.set(a.execution_id, a);
      const ends = {};
      for (const a of latest.values()) ends[a.outcome] = (ends[a.outcome] || 0) + 1;
      const total = items[0].shard_total;
      const kind = items.some((a) => a.target_worker) ? `broadcast to ${total} worker${total === 1 ? '' : 's'}`
        : total ? `${total} shards` : 'broadcast to no live worker';
      const tally = Object.entries(ends).map(([o, n]) => `${n} ${o}`).join(', ');
      return h('tr', { class: 'fire' }, h('td', { colspan: 8 },
        h('code', { class: 'id', title: items[0].fanout_id }, `fire …${items[0].fanout_id.slice(-8)}`),
        ` ${kind}; due `, when(items[0].due), `: ${tally}`));
    };
    const rows = groups.flatMap((g) => (g[0].fanout_id
      ? [fireRow(g), ...g.map((a) => h('tr', { class: 'child' }, row(a).map((c) => h('td', {}, c))))]
      : [row(g[0])]));
    clear(body).append(...[
      errors,
      section('State', state),
      section('Next fires', throttledNote, fires),
      section('Recent executions', table(['Execution', 'Attempt', 'Outcome', 'Due', 'Lateness', 'Took', 'Error', 'Output'], rows, 'No execution recorded yet.')),
      section('Spec', h('p', { class: 'muted' }, 'Secrets show as ***.'), h('pre', { class: 'spec' }, JSON.stringify(view.spec, null, 2))),
    ].filter(Boolean));
  }
  return { refresh };
}
