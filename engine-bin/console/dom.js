// DOM building without markup strings: every value goes in through textContent or an
// attribute, so nothing the API returns can become HTML (and the CSP forbids inline code
// anyway).

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

// Which zone absolute times are shown in: the viewer's choice, `local` (the browser's zone)
// or `utc`, kept for this browser. Every absolute time carries its zone, so a time is never
// read in the wrong one.
const ZONE_KEY = 'ax.zone';

export function zone() {
  return localStorage.getItem(ZONE_KEY) === 'utc' ? 'utc' : 'local';
}

export function setZone(value) {
  localStorage.setItem(ZONE_KEY, value === 'utc' ? 'utc' : 'local');
}

const p2 = (n) => String(n).padStart(2, '0');

// The browser's offset at `d` as `+08:00` (it changes with daylight saving time).
function offset(d) {
  const m = -d.getTimezoneOffset();
  return `${m < 0 ? '-' : '+'}${p2(Math.floor(Math.abs(m) / 60))}:${p2(Math.abs(m) % 60)}`;
}

// "2026-12-01 18:30:00 UTC" or "2026-12-02 02:30:00 +08:00", in the chosen zone.
export function absolute(ms) {
  if (ms === undefined || ms === null) return '–';
  const d = new Date(ms);
  if (zone() === 'utc') {
    return `${d.getUTCFullYear()}-${p2(d.getUTCMonth() + 1)}-${p2(d.getUTCDate())} ${p2(d.getUTCHours())}:${p2(d.getUTCMinutes())}:${p2(d.getUTCSeconds())} UTC`;
  }
  return `${d.getFullYear()}-${p2(d.getMonth() + 1)}-${p2(d.getDate())} ${p2(d.getHours())}:${p2(d.getMinutes())}:${p2(d.getSeconds())} ${offset(d)}`;
}

// "15:47:21 UTC": a time of day on the 24-hour clock, in the chosen zone.
export function clock(ms) {
  return absolute(ms).slice(11);
}

// "2026-12-02 02:30:00 Asia/Shanghai": `ms` in a named zone (a task's cron zone); null
// when the browser does not know the zone.
export function inZone(ms, timeZone) {
  try {
    const parts = {};
    const f = new Intl.DateTimeFormat('en-US', {
      timeZone, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit',
      hour: '2-digit', minute: '2-digit', second: '2-digit',
    });
    for (const x of f.formatToParts(new Date(ms))) parts[x.type] = x.value;
    return `${parts.year}-${parts.month}-${parts.day} ${parts.hour}:${parts.minute}:${parts.second} ${timeZone}`;
  } catch {
    return null;
  }
}

// A schedule in words as the API writes it, for the page: a cron expression it quotes
// (cron `15 30 2 * * *` UTC) as code without the quotes, and an instant it gives in UTC
// (once at 2030-01-01 00:00:00 UTC) in the chosen zone, as every other time.
const QUOTED = /(`[^`]*`)/;
const UTC_TEXT = /(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC)/;

export function scheduleText(text) {
  if (!text) return '–';
  return text.split(QUOTED).map((part, i) => {
    if (i % 2) return h('code', {}, part.slice(1, -1));
    return part.split(UTC_TEXT).map((bit, j) => {
      if (!(j % 2)) return bit;
      const ms = Date.parse(`${bit.slice(0, 10)}T${bit.slice(11, 19)}Z`);
      return h('time', { datetime: new Date(ms).toISOString(), title: new Date(ms).toISOString() }, absolute(ms));
    });
  });
}

export function duration(ms) {
  if (ms === undefined || ms === null) return '–';
  const a = Math.abs(ms);
  if (a < 1000) return `${Math.round(a)}ms`;
  if (a < 60e3) return `${(a / 1000).toFixed(a < 10e3 ? 1 : 0)}s`;
  if (a < 3600e3) return `${Math.floor(a / 60e3)}m ${Math.floor((a % 60e3) / 1000)}s`;
  if (a < 86400e3) return `${Math.floor(a / 3600e3)}h ${Math.floor((a % 3600e3) / 60e3)}m`;
  return `${Math.floor(a / 86400e3)}d ${Math.floor((a % 86400e3) / 3600e3)}h`;
}

// "in 3m 2s" / "5s ago".
export function relative(ms, now = Date.now()) {
  if (ms === undefined || ms === null) return '–';
  const d = ms - now;
  return d >= 0 ? `in ${duration(d)}` : `${duration(-d)} ago`;
}

// A time shown both ways: relative, with the absolute one beside it (and on hover).
export function when(ms) {
  if (ms === undefined || ms === null) return h('span', { class: 'muted' }, '–');
  return h('time', { datetime: new Date(ms).toISOString(), title: new Date(ms).toISOString() },
    relative(ms), h('small', { class: 'abs' }, absolute(ms)));
}

// An execution id as people tell ids apart: UUID v7 ids of the same minute share their
// start (the time), so the end is shown, the whole id is in the title, and the link opens
// the execution's page. `whole` shows the whole id (where ids are compared side by side).
export function execLink(id, whole = false) {
  return h('a', { class: 'id', href: `#/execution/${encodeURIComponent(id)}`, title: `${id} · open this execution`, 'data-execution': id },
    h('code', {}, whole ? id : `…${id.slice(-8)}`));
}

// The start of a handler's answer (its status and body), whole in the title.
export function excerpt(output) {
  const text = `${output.status ?? ''} ${output.body ?? ''}${output.truncated ? ' …' : ''}`.trim();
  return h('code', { class: 'excerpt', title: text }, text);
}

export function badge(text, kind) {
  return h('span', { class: `badge ${kind || String(text).toLowerCase()}` }, text);
}

// A task's status as people need it: THROTTLED while its circuit breaker skips most fires
// (its own status, SCHEDULED, would hide that it mostly does not run), and why in the title.
export function statusBadge(view) {
  const th = view.throttled;
  if (th) {
    const b = badge('THROTTLED', 'throttled');
    b.title = `${th.failures} of its last ${th.executions} executions failed: 1 fire in ${th.dispatch_every} is dispatched until they succeed again`;
    return b;
  }
  const b = badge(view.status || '?');
  if (view.namespace_paused) b.title = `namespace ${view.namespace} is paused`;
  return b;
}

export function percentile(sorted, p) {
  if (!sorted.length) return null;
  const i = Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1);
  return sorted[Math.max(0, i)];
}

// A table from column heads and rows of cells; `empty` is shown when there are no rows.
export function table(heads, rows, empty = 'Nothing to show.', caption) {
  if (!rows.length) return h('p', { class: 'empty' }, empty);
  return h('div', { class: 'scroll' },
    h('table', {},
      caption ? h('caption', {}, caption) : null,
      h('thead', {}, h('tr', {}, heads.map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, rows.map((r) => (r instanceof Node ? r : h('tr', {}, r.map((c) => h('td', {}, c))))))));
}

export function section(title, ...body) {
  return h('section', { class: 'card' }, h('h2', {}, title), ...body);
}

let noticeTimer;

// The outcome of an action, read out by screen readers; errors stay until replaced.
export function notice(text, kind = 'ok') {
  const el = document.getElementById('notice');
  el.textContent = text;
  el.className = `notice ${kind}`;
  el.hidden = false;
  clearTimeout(noticeTimer);
  if (kind === 'ok') noticeTimer = setTimeout(() => { el.hidden = true; }, 8000);
}

// Asks before an action: resolves to the fields' values when confirmed, null otherwise.
// `fields`: [{name, label, value, multiline}].
export function confirmDialog(title, text, fields = []) {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  const box = clear(document.getElementById('confirm-fields'));
  const inputs = {};
  for (const f of fields) {
    const id = `confirm-field-${f.name}`;
    const input = f.multiline
      ? h('textarea', { id, name: f.name, rows: 4, spellcheck: 'false' })
      : h('input', { id, name: f.name, type: 'text', spellcheck: 'false' });
    input.value = f.value || '';
    inputs[f.name] = input;
    box.append(h('label', { for: id }, f.label), input);
  }
  return new Promise((resolve) => {
    dialog.returnValue = '';
    dialog.addEventListener('close', () => {
      if (dialog.returnValue !== 'ok') return resolve(null);
      const values = {};
      for (const [k, el] of Object.entries(inputs)) values[k] = el.value;
      resolve(values);
    }, { once: true });
    dialog.showModal();
    (fields.length ? inputs[fields[0].name] : document.getElementById('confirm-cancel')).focus();
  });
}

// A line chart of series over x in [x0, x1]: {name, cls, points: [[x, y]]}; `fmt` writes a
// y value (a duration in ms by default).
export function lineChart(series, x0, x1, label, fmt = duration) {
  const W = 600, H = 160, L = 56, R = 8, T = 10, B = 22;
  const ys = series.flatMap((sr) => sr.points.map((p) => p[1]));
  const ymax = Math.max(1, ...ys) * 1.1;
  const X = (x) => L + ((x - x0) / (x1 - x0 || 1)) * (W - L - R);
  const Y = (y) => T + (1 - y / ymax) * (H - T - B);
  const grid = [0, 0.5, 1].map((f) => {
    const y = ymax * f;
    return [
      s('line', { x1: L, x2: W - R, y1: Y(y), y2: Y(y), class: 'grid' }),
      s('text', { x: L - 4, y: Y(y) + 4, class: 'tick', 'text-anchor': 'end' }, fmt(y)),
    ];
  });
  const ticks = [x0, (x0 + x1) / 2, x1].map((x, i) => s('text', {
    x: X(x), y: H - 6, class: 'tick', 'text-anchor': ['start', 'middle', 'end'][i],
  }, i === 2 ? 'now' : `-${duration(x1 - x)}`));
  const lines = series.map((sr) => [
    s('polyline', { class: `line ${sr.cls}`, points: sr.points.map((p) => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(' ') }),
    sr.points.map((p) => s('circle', { class: `dot ${sr.cls}`, cx: X(p[0]).toFixed(1), cy: Y(p[1]).toFixed(1), r: 2.5 },
      s('title', {}, `${sr.name} ${fmt(p[1])} at ${absolute(p[0])}`))),
  ]);
  return s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': label },
    s('title', {}, label), grid, ticks, lines);
}
