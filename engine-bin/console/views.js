// The list views: overview, tasks, dead letters, audit. Each view builds its fixed parts
// (filters, headings) once and returns `refresh`, which the poller calls; refresh only
// replaces the data parts, so focus and typed filters survive an update.

import { allows, call, get, query, taskPath } from './api.js';
import {
  badge, clear, confirmDialog, duration, execLink, h, lineChart, notice, percentile, scheduleText, section, statusBadge,
  table, when,
} from './dom.js';

const FAILED = ['retrying', 'failed', 'timed_out', 'panicked', 'dead_lettered'];
const STATUSES = ['WAITING', 'SCHEDULED', 'RUNNING', 'RETRYING', 'SUCCESS', 'FAILED', 'PAUSED', 'KILLED', 'INVALID'];

export function taskLink(ns, id) {
  return h('a', { href: `#/task/${encodeURIComponent(ns)}/${encodeURIComponent(id)}` }, `${ns}/${id}`);
}

// Runs an API action after confirmation and reports the result; `then` runs on success.
export async function act({ title, text, fields, run, done, then }) {
  const values = await confirmDialog(title, text, fields);
  if (!values) return;
  try {
    const result = await run(values);
    notice(done(result), 'ok');
    if (then) await then();
  } catch (e) {
    notice(`${title} refused: ${e}`, 'error');
  }
}

// Attempts of the last hour from the history, a few pages at most (each page scans a
// bounded part of the stream).
async function lastHour() {
  const items = [];
  let next;
  for (let i = 0; i < 5; i++) {
    const { body } = await call(`/executions${query({ since: '1h', limit: 1000, continue: next })}`);
    items.push(...body.items);
    next = body.continue;
    if (!next) break;
  }
  return items;
}

// Depth samples per queue across polls, for the inflow estimate.
const depthSamples = new Map();

export function overview(root) {
  // One card a row: each but the warnings holds a table, and the charts need the width.
  const body = h('div', { class: 'stack' });
  root.append(h('h1', {}, 'Overview'), body);
  async function refresh() {
    const [status, attempts] = await Promise.all([get('/status'), lastHour()]);
    const now = Date.now();
    clear(body);
    body.append(warnings(status), leader(status, now), queues(status, attempts, now), fires(attempts, now));
  }
  return { refresh };
}

function warnings(status) {
  const w = [];
  if (status.shards) {
    // Sharded scheduling: no leader key; what matters is that every shard has an owner.
    const unowned = status.shards.total - status.shards.owners.length;
    if (unowned > 0) w.push(`${unowned} of ${status.shards.total} shards have no owner: their tasks do not fire until a scheduler replica takes them.`);
  } else if (!status.leader) {
    w.push('No leader: nothing fires until a scheduler replica wins the election.');
  }
  for (const r of status.redis_warnings || []) w.push(`Redis: ${r}`);
  if (status.clock && Math.abs(status.clock.skew_ms) > status.clock.max_skew_ms) {
    w.push(`Clock skew: the answering host is ${duration(status.clock.skew_ms)} ${status.clock.skew_ms > 0 ? 'ahead of' : 'behind'} etcd (limit ${duration(status.clock.max_skew_ms)}); a replica this far off refuses to lead. Fix NTP.`);
  }
  if (status.etcd_db && status.etcd_db.quota_bytes && status.etcd_db.bytes / status.etcd_db.quota_bytes > 0.8) {
    w.push(`etcd database at ${Math.round((100 * status.etcd_db.bytes) / status.etcd_db.quota_bytes)}% of its quota.`);
  }
  for (const p of status.paused_namespaces || []) w.push(`Namespace ${p.namespace} is paused (by ${p.paused_by}).`);
  const skewHelp = 'How far the clock of the replica answering this page is from etcd’s. The leader times every fire by its own clock, so a replica further off than the limit (scheduler.max_clock_skew) refuses to lead.';
  const clock = status.clock
    ? h('p', { class: 'muted', id: 'clock', title: skewHelp }, `Clock against etcd: ${status.clock.skew_ms >= 0 ? '+' : '−'}${duration(Math.abs(status.clock.skew_ms))} (limit ${duration(status.clock.max_skew_ms)}): how far this replica’s clock is from etcd’s; past the limit a replica refuses to lead.`)
    : h('p', { class: 'muted', id: 'clock', title: skewHelp }, 'Clock against etcd: not measured.');
  return section('Warnings',
    w.length ? h('ul', { class: 'warnings', id: 'warnings' }, w.map((t) => h('li', {}, t))) : h('p', { class: 'ok', id: 'warnings' }, `None: ${status.shards ? 'every shard owned' : 'leader elected'}, Redis persistent, clocks in step.`),
    clock);
}

const TERM_HELP = 'How long this replica has led: a term starts when it wins the election and ends when it stops renewing its lease.';

function leader(status, now) {
  const owned = new Map();
  for (const o of (status.shards && status.shards.owners) || []) owned.set(o.owner, (owned.get(o.owner) || 0) + 1);
  // Where each replica runs (to find the process to look at, or kill) and whether it is
  // heard from: `stale` once it missed a heartbeat, `gone` once its registration expired.
  const state = (r) => r.state === 'gone'
    ? h('span', { class: 'replica-state' }, badge('gone', 'failed'), r.gone_at ? [' since ', when(r.gone_at)] : null)
    : r.state === 'stale'
      ? h('span', { class: 'replica-state' }, badge('stale', 'failed'), ` no heartbeat for ${duration(r.heartbeat_age_ms || 0)}`)
      : h('span', { class: 'replica-state' }, badge('live', 'succeeded'));
  const rows = status.replicas.map((r) => [
    h('span', {}, r.id, r.id === status.leader ? badge('leader', 'leader') : null,
      owned.get(r.id) ? badge(`${owned.get(r.id)} shards`, 'leader') : null),
    r.roles.join(', '),
    [r.host || '–', r.pid === undefined ? '' : ` · pid ${r.pid}`],
    r.address ? h('code', {}, r.address) : '–',
    state(r),
    r.version,
    r.heartbeat_age_ms === undefined ? '–' : `${duration(r.heartbeat_age_ms)} ago`,
    when(r.started_at),
  ]);
  const silentLeader = status.replicas.find((r) => r.id === status.leader && r.state && r.state !== 'live');
  const who = status.shards
    ? h('p', {}, 'Shards: ', h('strong', { id: 'shards' }, `${status.shards.owners.length} of ${status.shards.total} owned`),
      ' (each scheduled by one replica at a time)')
    : h('p', {}, 'Leader: ', h('strong', { id: 'leader' }, status.leader || 'none'),
      status.leader_since ? [' since ', when(status.leader_since), ' (',
        h('abbr', { id: 'term', title: TERM_HELP }, 'term'), ` ${duration(now - status.leader_since)})`] : null);
  return section('Cluster',
    who,
    status.shards ? null : h('p', { class: 'muted' }, 'Term: how long the leader has led since it won the election. Only the leader fires tasks; when it stops renewing its lease another replica takes over and a new term starts.'),
    silentLeader ? h('p', { class: 'warn', id: 'leader-silent' }, `The leader ${silentLeader.id} is ${silentLeader.state}: another replica takes over when its lease expires.`) : null,
    table(['Replica', 'Roles', 'Host', 'Address', 'State', 'Version', 'Heartbeat', 'Started'], rows, 'No replica registered.'));
}

function queues(status, attempts, now) {
  const window = 5 * 60e3;
  const out = new Map();
  for (const a of attempts) {
    if (a.queue && a.finished && now - a.finished <= window) out.set(a.queue, (out.get(a.queue) || 0) + 1);
  }
  const rows = status.queues.map((q) => {
    const outRate = (out.get(q.name) || 0) / 5;
    // What came in = what went out + what the queue grew by, over the sampled window.
    const samples = (depthSamples.get(q.name) || []).filter((x) => now - x[0] <= window);
    samples.push([now, q.depth]);
    depthSamples.set(q.name, samples);
    const [t0, d0] = samples[0];
    const grew = now > t0 ? ((q.depth - d0) / (now - t0)) * 60e3 : 0;
    const inRate = Math.max(0, outRate + grew);
    return [
      h('span', {}, h('a', { href: `#/queue/${encodeURIComponent(q.name)}`, 'data-queue': q.name }, q.name), q.paused ? badge('paused', 'paused') : null),
      String(q.depth),
      q.oldest_age_ms === undefined ? '–' : duration(q.oldest_age_ms),
      inRate.toFixed(1),
      outRate.toFixed(1),
      q.dlq_size ? h('a', { href: `#/dlq?queue=${encodeURIComponent(q.name)}`, class: 'bad' }, String(q.dlq_size)) : '0',
    ];
  });
  return section('Queues',
    table(['Queue', 'Depth', 'Oldest', 'In /min', 'Out /min', 'DLQ'], rows, 'No queue.'),
    h('p', { class: 'muted' }, `Dead letters in all: ${status.dlq_size}. Rates over the last 5 minutes: out from the history, in = out + the depth's growth.`));
}

// A first attempt the schedule (or an upstream task) started: the runs whose lateness says
// how well ax keeps time, as scheduler_schedule_latency_seconds counts them. A run by hand, a
// backfill or a requeue is due when asked for and kept out.
const scheduled = (a) => a.attempt === 1 && (!a.origin || a.origin.kind === 'schedule' || a.origin.kind === 'parent');

function fires(attempts, now) {
  const firsts = attempts.filter(scheduled);
  const failures = attempts.filter((a) => FAILED.includes(a.outcome));
  const bucket = 5 * 60e3;
  const start = now - 3600e3;
  const buckets = new Map();
  for (const a of firsts) {
    if (a.lateness_ms === undefined || a.started === undefined) continue;
    const b = start + Math.floor((a.started - start) / bucket) * bucket + bucket / 2;
    if (!buckets.has(b)) buckets.set(b, []);
    buckets.get(b).push(a.lateness_ms);
  }
  const keys = [...buckets.keys()].sort((a, b) => a - b);
  const p50 = [], p99 = [];
  for (const k of keys) {
    const v = buckets.get(k).sort((a, b) => a - b);
    p50.push([k, percentile(v, 50)]);
    p99.push([k, percentile(v, 99)]);
  }
  const all = firsts.map((a) => a.lateness_ms || 0).sort((a, b) => a - b);
  // Throughput: attempts that ended per 5 minutes, succeeded and failed.
  const done = new Map();
  for (const a of attempts) {
    if (a.finished === undefined || a.finished < start) continue;
    const b = start + Math.floor((a.finished - start) / bucket) * bucket + bucket / 2;
    const c = done.get(b) || { ok: 0, bad: 0 };
    if (FAILED.includes(a.outcome)) c.bad += 1;
    else c.ok += 1;
    done.set(b, c);
  }
  const doneKeys = [...done.keys()].sort((a, b) => a - b);
  const per5m = (y) => `${Math.round(y)}`;
  const throughput = doneKeys.length
    ? h('figure', { id: 'throughput-chart' }, lineChart([
      { name: 'succeeded', cls: 'p50', points: doneKeys.map((k) => [k, done.get(k).ok]) },
      { name: 'failed', cls: 'p99', points: doneKeys.map((k) => [k, done.get(k).bad]) },
    ], start, now, 'Attempts ended per 5 minutes, succeeded and failed', per5m),
    h('figcaption', {}, h('span', { class: 'key p50' }, 'succeeded'), ' ', h('span', { class: 'key p99' }, 'failed'), ' attempts ended per 5 minutes (throughput)'))
    : null;
  const recentFailures = failures.slice(0, 10).map((a) => [
    taskLink(a.namespace, a.task_id), execLink(a.execution_id), badge(a.outcome), when(a.finished), h('span', { class: 'err', title: a.error || '' }, a.error || ''),
  ]);
  return section('Last hour',
    h('p', { class: 'stats' },
      h('span', {}, h('strong', { id: 'fires-count' }, String(firsts.length)), ' fires'),
      h('span', {}, h('strong', { id: 'failures-count', class: failures.length ? 'bad' : '' }, String(failures.length)), ' failed attempts'),
      h('span', {}, 'lateness p50 ', h('strong', {}, duration(percentile(all, 50)))),
      h('span', {}, 'p99 ', h('strong', {}, duration(percentile(all, 99))))),
    keys.length
      ? h('div', { class: 'charts' }, h('figure', { id: 'lateness-chart' }, lineChart([{ name: 'p99', cls: 'p99', points: p99 }, { name: 'p50', cls: 'p50', points: p50 }], start, now, 'Fire lateness per 5 minutes, p50 and p99'),
        h('figcaption', {}, h('span', { class: 'key p50' }, 'p50'), ' ', h('span', { class: 'key p99' }, 'p99'), ' lateness of scheduled first attempts (start − due; runs by hand, backfills and requeues left out, as in scheduler_schedule_latency_seconds), per 5 minutes')), throughput)
      : h('p', { class: 'empty' }, 'No fire in the last hour.'),
    h('h3', {}, 'Recent failures'),
    table(['Task', 'Execution', 'Outcome', 'When', 'Error'], recentFailures, 'No failure in the last hour.'));
}

// Tasks: filters in the URL (#/tasks?namespace=..&status=..), pages by continue token.
export function tasks(root, { params, go, role }) {
  const f = {
    namespace: params.get('namespace') || '',
    status: params.get('status') || '',
    label: params.get('label') || '',
    search: params.get('search') || '',
  };
  const pages = [undefined];
  let page = 0;
  const input = (name, label, placeholder) => h('label', {}, label,
    h('input', { name, type: 'search', value: f[name], placeholder, spellcheck: 'false' }));
  const status = h('select', { name: 'status' }, h('option', { value: '' }, 'any'),
    STATUSES.map((st) => h('option', { value: st, selected: st === f.status }, st)));
  const form = h('form', { class: 'filters', role: 'search' },
    input('search', 'Id contains', 'text'),
    input('namespace', 'Namespace', 'all'),
    h('label', {}, 'Status', status),
    input('label', 'Label', 'key or key=value'),
    h('button', { type: 'submit' }, 'Filter'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const el of form.querySelectorAll('input,select')) if (el.value) q.set(el.name, el.value);
    go(`#/tasks${q.toString() ? `?${q}` : ''}`);
  });
  const body = h('div', {});
  const prev = h('button', { type: 'button', disabled: true, onclick: () => { page -= 1; refresh(); } }, '← Previous');
  const next = h('button', { type: 'button', disabled: true, onclick: () => { page += 1; refresh(); } }, 'Next →');
  const where = h('span', { class: 'muted' });
  root.append(h('h1', {}, 'Tasks'),
    allows(role, 'admin') ? h('p', { class: 'actions' }, h('a', { href: '#/new-task', class: 'button', id: 'new-task' }, 'New task')) : null,
    form, body, h('p', { class: 'pager' }, prev, where, next));
  async function refresh() {
    const { body: items, next: token } = await call(`/tasks${query({ ...f, limit: 50, continue: pages[page] })}`);
    pages[page + 1] = token || undefined;
    prev.disabled = page === 0;
    next.disabled = !token;
    where.textContent = ` page ${page + 1} `;
    const now = Date.now();
    const rows = items.map((t) => {
      const invalid = t.status === 'INVALID';
      const cells = [
        taskLink(t.namespace, t.id),
        invalid ? h('span', { class: 'muted' }, 'invalid spec') : scheduleText(t.schedule_text),
        statusBadge(t),
        when(t.next_fire, now),
        when(t.last_fire, now),
        t.last_outcome ? badge(t.last_outcome) : h('span', { class: 'muted' }, 'never ran'),
      ];
      const row = h('tr', { class: invalid ? 'invalid' : '' }, cells.map((c) => h('td', {}, c)));
      if (!invalid) return row;
      return [row, h('tr', { class: 'invalid errors' }, h('td', { colspan: 6 },
        h('ul', {}, (t.errors || []).map((e) => h('li', {}, e)))))];
    }).flat();
    clear(body).append(table(['Task', 'Schedule', 'Status', 'Next fire', 'Last fire', 'Last outcome'], rows, 'No task matches.'));
  }
  return { refresh };
}

// Dead letters: per execution, its attempts and their errors (from the execution's story).
export function dlq(root, { params, role }) {
  const queue = params.get('queue') || '';
  const body = h('div', {});
  const operate = allows(role, 'operate');
  const tools = h('p', { class: 'actions' },
    operate ? h('button', { type: 'button', 'data-action': 'requeue-all', onclick: () => act({
      title: 'Requeue all dead letters',
      text: `Put every dead letter${queue ? ` of queue ${queue}` : ''} back on its queue to run again.`,
      run: () => call('/dlq/requeue', { method: 'POST', body: queue ? { all: true, queue } : { all: true } }),
      done: (r) => `Requeued ${r.body.count} dead letter(s).`,
      then: refresh,
    }) }, 'Requeue all') : null,
    allows(role, 'admin') ? h('button', { type: 'button', class: 'danger', 'data-action': 'purge', onclick: () => act({
      title: 'Purge dead letters',
      text: `Delete every dead letter${queue ? ` of queue ${queue}` : ''} for good. They cannot be requeued afterwards.`,
      run: () => call(`/dlq/purge${query({ queue })}`, { method: 'POST' }),
      done: (r) => `Purged ${r.body.count} dead letter(s).`,
      then: refresh,
    }) }, 'Purge') : null);
  root.append(h('h1', {}, queue ? `Dead letters of ${queue}` : 'Dead letters'), tools, body);
  async function refresh() {
    const items = await get(`/dlq${query({ queue, limit: 100 })}`);
    const rows = items.map((d) => {
      // Every attempt's error in full, and what the execution ran with.
      const errors = d.errors && d.errors.length ? d.errors : [{ attempt: d.attempts, error: d.last_error }];
      const attempts = [
        h('ol', { class: 'attempts' }, errors.map((e) => h('li', {}, `#${e.attempt} failed: ${e.error}`))),
        d.payload !== undefined ? h('details', { class: 'payload' }, h('summary', {}, 'Payload'),
          h('pre', { class: 'spec' }, JSON.stringify(d.payload, null, 2))) : null,
        d.raw ? h('details', { class: 'payload' }, h('summary', {}, 'Stored text (undecodable)'), h('pre', { class: 'spec' }, d.raw)) : null,
      ];
      return [
        taskLink(d.namespace, d.task_id),
        execLink(d.execution_id),
        h('a', { href: `#/queue/${encodeURIComponent(d.queue)}` }, d.queue),
        String(d.attempts),
        when(d.dead_at),
        h('div', {}, attempts),
        operate ? h('button', { type: 'button', 'data-action': 'requeue', onclick: () => act({
          title: 'Requeue dead letter',
          text: `Put execution ${d.execution_id} of ${d.namespace}/${d.task_id} back on queue ${d.queue}.`,
          run: () => call('/dlq/requeue', { method: 'POST', body: { ids: [d.execution_id] } }),
          done: (r) => `Requeued ${r.body.count} dead letter(s).`,
          then: refresh,
        }) }, 'Requeue') : null,
      ];
    });
    const heads = ['Task', 'Execution', 'Queue', 'Attempts', 'Dead since', 'Errors per attempt, payload'];
    if (operate) heads.push('');
    clear(body).append(table(heads, rows, 'No dead letter.'));
  }
  return { refresh };
}

// The audit log, newest first, filtered by actor and age.
export function audit(root, { params, go }) {
  const actor = params.get('actor') || '';
  const since = params.get('since') || '';
  const action = params.get('action') || '';
  const form = h('form', { class: 'filters', role: 'search' },
    h('label', {}, 'Who', h('input', { name: 'actor', type: 'search', value: actor, placeholder: 'token name' })),
    h('label', {}, 'Action', h('input', { name: 'action', type: 'search', value: action, placeholder: 'e.g. trigger' })),
    h('label', {}, 'Since', h('input', { name: 'since', type: 'search', value: since, placeholder: 'e.g. 24h, 30m' })),
    h('button', { type: 'submit' }, 'Filter'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const el of form.querySelectorAll('input')) if (el.value) q.set(el.name, el.value);
    go(`#/audit${q.toString() ? `?${q}` : ''}`);
  });
  const body = h('div', {});
  root.append(h('h1', {}, 'Audit'), form, body);
  async function refresh() {
    const items = await get(`/audit${query({ actor, since: sinceMs(since), limit: 200 })}`);
    const rows = items.filter((r) => !action || r.action.includes(action)).map((r) => [
      when(r.at), r.actor, r.via, h('strong', {}, r.action), r.target || '–',
      r.detail ? auditDetail(r.detail) : '',
    ]);
    clear(body).append(table(['When', 'Who', 'Via', 'Action', 'Target', 'Detail'], rows, 'No record.'));
  }
  return { refresh };
}

// A value of an audit detail in one line: a string as it is, anything else as JSON.
function shown(v) {
  if (v === undefined) return '(none)';
  return typeof v === 'string' ? v : JSON.stringify(v);
}

// An audit record's detail in words: each changed field as `path: old → new` (the path as
// the server built it: it masked the secrets and quoted odd keys), a created or deleted spec
// folded away, lists as lists, any other field as `name: value`.
function auditDetail(detail) {
  if (typeof detail !== 'object' || detail === null) return h('span', { class: 'detail' }, shown(detail));
  const lines = [];
  for (const [k, v] of Object.entries(detail)) {
    if (k === 'changed' && v && typeof v === 'object') {
      for (const [path, c] of Object.entries(v)) {
        lines.push(h('li', {}, h('code', {}, path), ': ', shown(c && c.from), ' → ', shown(c && c.to)));
      }
    } else if ((k === 'created' || k === 'deleted') && v && typeof v === 'object') {
      lines.push(h('li', {}, h('details', {}, h('summary', {}, k === 'created' ? 'created with this spec' : 'deleted; its spec was'),
        h('pre', { class: 'spec' }, JSON.stringify(v, null, 2)))));
    } else if (Array.isArray(v)) {
      lines.push(h('li', {}, `${k} (${v.length}): `, v.map(shown).join(', ')));
    } else {
      lines.push(h('li', {}, `${k}: `, shown(v)));
    }
  }
  return h('ul', { class: 'detail' }, lines);
}

// `24h`, `30m`, `7d` before now, in ms since the epoch; anything else as written.
function sinceMs(text) {
  const m = /^\s*(\d+)\s*([smhd])\s*$/.exec(text);
  if (!m) return text;
  const unit = { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3 }[m[2]];
  return Date.now() - Number(m[1]) * unit;
}
