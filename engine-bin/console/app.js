// The console's shell: hash routes (a URL for every view), the token, the caller's role,
// the execution search, and polling. Views come from views.js, task.js and execution.js;
// this file owns when they refresh.

import { ApiError, get, setToken, token } from './api.js';
import { clear, clock, h, notice, setZone, zone } from './dom.js';
import { editor } from './editor.js';
import { execution } from './execution.js';
import { queue } from './queue.js';
import { task } from './task.js';
import { audit, dlq, overview, tasks } from './views.js';

const POLL_MS = 5000;
const VIEWS = { overview, tasks, dlq, audit, task, execution, queue, editor };

let role = null;
let current = null;
let timer = null;
let busy = false;

// `#/task/ns/id?x=y` as a view name and its parameters.
function parse(hash) {
  const [path, q] = (hash.replace(/^#\/?/, '') || 'overview').split('?');
  const parts = path.split('/').map(decodeURIComponent);
  const params = new URLSearchParams(q || '');
  if (parts[0] === 'task' && parts.length === 3) {
    params.set('ns', parts[1]);
    params.set('id', parts[2]);
    return { name: 'task', params };
  }
  if (parts[0] === 'queue' && parts.length === 2) {
    params.set('name', parts[1]);
    return { name: 'queue', params };
  }
  if (parts[0] === 'new-task') return { name: 'editor', params };
  if (parts[0] === 'edit' && parts.length === 3) {
    params.set('ns', parts[1]);
    params.set('id', parts[2]);
    return { name: 'editor', params };
  }
  if (parts[0] === 'execution' && parts.length === 2) {
    params.set('id', parts[1]);
    return { name: 'execution', params };
  }
  return { name: VIEWS[parts[0]] ? parts[0] : 'overview', params };
}

function go(hash) {
  if (location.hash === hash) show();
  else location.hash = hash;
}

async function whoami() {
  const el = document.getElementById('whoami');
  try {
    const me = await get('/whoami');
    role = me.role;
    el.textContent = `${me.name} · ${me.role}`;
    el.className = 'who ok';
    return true;
  } catch (e) {
    role = null;
    el.textContent = e instanceof ApiError && e.status === 401 ? 'enter a token' : `${e}`;
    el.className = 'who bad';
    return false;
  }
}

async function refresh() {
  if (!current || busy) return;
  // A modal dialog is open: the user is deciding about what they see, so leave it alone.
  if (document.getElementById('confirm').open) return;
  busy = true;
  // The view this refresh is for: the user may navigate away while it waits for the API.
  const view = current;
  try {
    await view.refresh();
    if (view !== current) return;
    document.getElementById('updated').textContent = `Updated ${clock(Date.now())} · refreshes every ${POLL_MS / 1000}s`;
    view.root.classList.remove('stale');
  } catch (e) {
    if (view !== current) return;
    view.root.classList.add('stale');
    notice(`Could not load: ${e}`, 'error');
  } finally {
    busy = false;
  }
}

async function show() {
  clearInterval(timer);
  const { name, params } = parse(location.hash);
  for (const a of document.querySelectorAll('[data-nav]')) {
    const under = { task: 'tasks', editor: 'tasks', queue: 'overview' }[name];
    if (a.dataset.nav === name || a.dataset.nav === under) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const root = clear(document.getElementById('view'));
  document.title = `ax · ${name}`;
  if (!(await whoami())) {
    current = null;
    root.append(h('h1', {}, 'Sign in'),
      h('p', {}, 'This API needs a token. Enter it above: a read token is enough to look; actions need operate or admin.'));
    document.getElementById('token-input').focus();
    return;
  }
  const view = VIEWS[name](root, { params, role, go });
  current = { ...view, root };
  await refresh();
  timer = setInterval(refresh, POLL_MS);
}

function setup() {
  const form = document.getElementById('token-form');
  const input = document.getElementById('token-input');
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    setToken(input.value.trim());
    input.value = '';
    show();
  });
  document.getElementById('token-clear').addEventListener('click', () => {
    setToken('');
    show();
  });
  input.placeholder = token() ? 'token set for this tab' : 'API token (kept for this tab only)';
  const zones = document.getElementById('zone');
  zones.value = zone();
  zones.addEventListener('change', () => {
    setZone(zones.value);
    show();
  });
  const find = document.getElementById('find-input');
  document.getElementById('find-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const id = find.value.trim();
    if (!id) return;
    find.value = '';
    go(`#/execution/${encodeURIComponent(id)}`);
  });
  window.addEventListener('hashchange', () => {
    show();
    document.getElementById('view').focus({ preventScroll: true });
  });
  show();
}

setup();
