// A task written on the page, with the CLI's validation: `Check` is a dry run of the same
// `POST /tasks` that `ax task put` makes (every problem listed with its path, the next fires
// shown), `Register` writes it. Editing starts from the registered spec with its version
// raised by one, since a put replaces a spec only with a higher version. The page does not
// refresh while open: the text being written is the user's.

import { allows, call, get, taskPath } from './api.js';
import { clear, h, inZone, notice, section, when } from './dom.js';

const TEMPLATE = {
  namespace: 'default',
  id: 'my-task',
  handler: 'log',
  schedule: { every: '1m' },
  payload: { message: 'hello' },
};

export function editor(root, { params, role, go }) {
  const ns = params.get('ns');
  const id = params.get('id');
  const editing = Boolean(ns && id);
  const text = h('textarea', { id: 'spec-editor', rows: 20, spellcheck: 'false', 'aria-label': 'Task spec (JSON)' });
  const result = h('div', { id: 'editor-result' });
  const admin = allows(role, 'admin');
  const put = async (dryRun) => {
    let spec;
    try {
      spec = JSON.parse(text.value);
    } catch (e) {
      clear(result).append(h('p', { class: 'err' }, `Not JSON: ${e.message}`));
      return;
    }
    try {
      const r = await call(`/tasks${dryRun ? '?dry_run=true' : ''}`, { method: 'POST', body: spec });
      const b = r.body;
      // A cron task fires by its own zone's clock: its fires read in that zone too.
      const zone = spec.schedule && spec.schedule.timezone;
      const fires = b.next_fires.length
        ? h('ol', { class: 'fires', id: 'editor-fires' }, b.next_fires.map((t) => h('li', {}, when(t),
          zone ? h('small', { class: 'zoned', title: "the task's schedule zone" }, inZone(t, zone)) : null)))
        : h('p', { class: 'empty' }, 'No fire ahead.');
      const said = dryRun ? `Valid: ${b.namespace}/${b.id} would fire next at:` : b.unchanged
        ? `Unchanged: ${b.namespace}/${b.id} is registered with this spec already.` : `Registered ${b.namespace}/${b.id}.`;
      clear(result).append(h('p', { class: 'ok' }, said), fires);
      if (!dryRun) {
        notice(said);
        go(`#/task/${encodeURIComponent(b.namespace)}/${encodeURIComponent(b.id)}`);
      }
    } catch (e) {
      // Every problem with its path, as `ax task put` prints them.
      const problems = e.errors && e.errors.length ? e.errors : [e.message];
      clear(result).append(h('p', { class: 'err' }, e.errors && e.errors.length ? 'Not registered: fix these and check again.' : `Not registered: ${e}`),
        h('ul', { class: 'warnings', id: 'editor-errors' }, problems.map((p) => h('li', {}, p))));
    }
  };
  root.append(
    h('p', {}, h('a', { href: editing ? `#/task/${encodeURIComponent(ns)}/${encodeURIComponent(id)}` : '#/tasks' }, editing ? `← ${ns}/${id}` : '← Tasks')),
    h('h1', {}, editing ? `Edit ${ns}/${id}` : 'New task'),
    h('p', { class: 'muted' }, 'The spec as JSON, as for `ax task put` (see the task reference in docs/tasks.md). Check validates it and shows the next fires without writing anything.'),
    admin
      ? section('Spec', text,
        h('p', { class: 'actions' },
          h('button', { type: 'button', 'data-action': 'check', onclick: () => put(true) }, 'Check'),
          h('button', { type: 'button', 'data-action': 'register', onclick: () => put(false) }, 'Register')),
        result)
      : h('p', { class: 'warn' }, 'Writing a task needs an admin token (the same role as `ax task put`).'));
  let loaded = false;
  async function refresh() {
    if (loaded || !admin) return;
    loaded = true;
    if (!editing) {
      text.value = JSON.stringify(TEMPLATE, null, 2);
      return;
    }
    // An admin edits the spec as stored; the masked one (`***`) would be refused when put back.
    const view = await get(`${taskPath(ns, id)}${admin ? '?show_secrets=true' : ''}`);
    const spec = { ...view.spec };
    spec.version = (Number(spec.version) || 1) + 1;
    text.value = JSON.stringify(spec, null, 2);
  }
  return { refresh };
}
