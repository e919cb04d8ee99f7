// The list view (#/in-doubt, #/list?state=…&older_than=…&limit=…): the in-doubt view of the
// API (GET /v1/transactions?state=in-doubt, the log reconciled with pg_prepared_xacts and Kafka)
// or the log's rows in every state (all) or in one, paged with the API's cursor.

import { get } from './api.js';
import { age, badge, h, replace, table, time } from './dom.js';
import { failed } from './session.js';

const STATES = ['in-doubt', 'all', 'active', 'prepared', 'committing', 'committed', 'aborted', 'heuristic', 'heuristic_mixed'];
const LIMITS = ['10', '25', '50', '100'];

// pages keeps the cursors of the pages seen, per filter, so that "Previous" can go back:
// cursors[i] is the `after` of page i (page 0 has none).
let pages = { key: '', cursors: [''], index: 0 };

function txnLink(id) {
  return h('a', { href: '#/txn/' + encodeURIComponent(id), class: 'txn-link' }, id);
}

// clip is a long text cut to its cell's width with an ellipsis (style.css), whole in its title.
function clip(text) {
  return h('span', { class: 'clip', title: text }, text);
}

// listTable marks a list's table: its error and hint columns take the width the others leave,
// the hint all of it when no row has an error.
function listTable(el) {
  el.classList.add('list');
  if (!el.querySelector('td.last-error .clip')) el.classList.add('no-errors');
  return el;
}

// entryKey names an in-doubt entry: its id, or kafka:<transactional id>, or hanging:….
function entryKey(e) {
  if (e.id) return e.id;
  if (e.kafka) return 'kafka:' + e.kafka.transactional_id;
  if (e.hanging) return `hanging:${e.hanging.transactional_id}/${e.hanging.topic}/${e.hanging.partition}`;
  return e.gid || '';
}

// stateCell is an entry's state; a transaction waiting for its caller (issue waiting, not in
// doubt) says until when.
function stateCell(e) {
  const by = e.log && e.log.decide_by;
  if (e.issue !== 'waiting' || !by) return badge(e.state, 'state');
  return h('span', { class: 'waiting-until', title: `waiting for its caller's commit or rollback until ${time(by)}; then recovery aborts it` },
    badge(e.state, 'state'), ` until ${time(by)}`);
}

function inDoubtTable(entries) {
  const rows = entries.map((e) => {
    const log = e.log || null;
    const what = log ? txnLink(e.id)
      : e.kafka ? h('span', { title: 'Kafka transactional id' }, e.kafka.transactional_id)
        : e.hanging ? h('span', { title: 'Kafka transactional id' }, `${e.hanging.transactional_id} ${e.hanging.topic}/${e.hanging.partition}`)
          : h('span', { title: 'prepared gid without a log row' }, e.gid || e.id);
    return [
      h('td', { class: 'id' }, what),
      h('td', { class: 'issue' }, badge(e.issue, 'issue')),
      h('td', { class: 'state' }, stateCell(e)),
      h('td', { class: 'instance' }, e.instance || (e.kafka && e.kafka.owner) || ''),
      h('td', { class: 'age num', title: `since ${time(e.since)}` }, age(e.age_seconds)),
      h('td', { class: 'attempts num' }, log ? String(log.attempts) : ''),
      h('td', { class: 'last-error' }, log && log.last_error ? clip(log.last_error) : ''),
      h('td', { class: 'sources' }, (e.sources || []).join(', ')),
      h('td', { class: 'actions' }, (e.actions || []).join(', ')),
      h('td', { class: 'what' }, h('span', { class: 'clip', title: e.hint }, e.hint)),
    ];
  });
  return listTable(table(['Transaction', 'Issue', 'State', 'Instance', 'Age', 'Attempts', 'Last error', 'Found in', 'Actions', 'What happens'],
    rows, (i) => ({ dataset: { key: entryKey(entries[i]) }, class: 'entry' })));
}

function stateTable(txns) {
  const now = Date.now();
  const rows = txns.map((t) => [
    h('td', { class: 'id' }, txnLink(t.id)),
    h('td', { class: 'state' }, badge(t.state, 'state')),
    h('td', { class: 'instance' }, t.instance || ''),
    h('td', { class: 'age num', title: `last change ${time(t.updated_at)}` }, age((now - Date.parse(t.updated_at)) / 1000)),
    h('td', { class: 'created time' }, time(t.created_at)),
    h('td', { class: 'last-error' }, t.error ? clip(`${t.error.participant}: ${t.error.message}`) : ''),
  ]);
  return listTable(table(['Transaction', 'State', 'Instance', 'Since last change', 'Created', 'Error'], rows,
    (i) => ({ dataset: { key: txns[i].id }, class: 'entry' })));
}

// filterForm is the filters: state, minimum age, page size.
function filterForm(state, olderThan, limit) {
  const stateSel = h('select', { id: 'filter-state', name: 'state' },
    STATES.map((s) => h('option', { value: s, selected: s === state }, s === 'in-doubt' ? 'in doubt (reconciled)' : s === 'all' ? 'all states' : s)));
  const ageIn = h('input', { id: 'filter-age', name: 'older_than', value: olderThan, placeholder: 'e.g. 30s, 5m, 1h', size: 10,
    pattern: '^([0-9]{1,9}|([0-9]{1,12}(\\.[0-9]{1,9})?(ns|us|µs|ms|s|m|h))+)$', title: 'whole seconds, or a duration such as 30s, 5m, 1h30m' });
  const limits = LIMITS.includes(limit) ? LIMITS : [...LIMITS, limit].sort((a, b) => Number(a) - Number(b));
  const limitSel = h('select', { id: 'filter-limit', name: 'limit' }, limits.map((l) => h('option', { value: l, selected: l === limit }, l)));
  return h('form', { id: 'filters', class: 'filters', onsubmit: (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams({ state: stateSel.value, limit: limitSel.value });
    if (ageIn.value.trim()) q.set('older_than', ageIn.value.trim());
    const next = (stateSel.value === 'in-doubt' ? '#/in-doubt?' : '#/list?') + q.toString();
    if (location.hash === next) listView(document.getElementById('main'), q); // refresh
    else location.hash = next;
  } },
  h('label', {}, 'State ', stateSel), h('label', {}, 'Older than ', ageIn), h('label', {}, 'Per page ', limitSel),
  h('button', { type: 'submit', id: 'filter-apply' }, 'Apply'));
}

// listView renders the list for the filters in params.
export async function listView(main, params) {
  const state = params.get('state') || 'in-doubt';
  const olderThan = params.get('older_than') || '';
  // Any page size the API takes (1-1000) may be given in the fragment; the menu offers a few.
  let limit = params.get('limit') || '25';
  if (!/^[0-9]{1,4}$/.test(limit) || Number(limit) < 1 || Number(limit) > 1000) limit = '25';
  const key = `${state}|${olderThan}|${limit}`;
  if (pages.key !== key) pages = { key, cursors: [''], index: 0 };

  const body = h('div', { id: 'list-body' }, h('p', { class: 'muted' }, 'Loading…'));
  replace(main, h('h1', {}, state === 'in-doubt' ? 'In doubt' : state === 'all' ? 'All transactions' : `Transactions: ${state}`), filterForm(state, olderThan, limit), body);

  const q = new URLSearchParams({ limit });
  if (state !== 'all') q.set('state', state);
  if (olderThan) q.set('older_than', olderThan);
  const after = pages.cursors[pages.index];
  if (after) q.set('after', after);
  let page;
  try {
    page = await get('/v1/transactions?' + q.toString());
  } catch (err) {
    failed(err, body);
    return;
  }
  if (pages.key !== key) return; // the filters changed meanwhile
  const items = page.transactions || [];
  const nav = h('div', { class: 'pager' },
    h('button', { type: 'button', id: 'page-prev', disabled: pages.index === 0, onclick: () => {
      pages.index--;
      listView(main, params);
    } }, '← Previous'),
    h('span', { id: 'page-number' }, `Page ${pages.index + 1}`),
    h('button', { type: 'button', id: 'page-next', disabled: !page.next, onclick: () => {
      pages.cursors[pages.index + 1] = page.next;
      pages.index++;
      listView(main, params);
    } }, 'Next →'));
  replace(body,
    page.warnings && page.warnings.length ? h('ul', { class: 'warnings', id: 'list-warnings' }, page.warnings.map((w) => h('li', {}, `Partial view: ${w}`))) : '',
    items.length === 0 ? h('p', { id: 'list-empty', class: 'muted' }, state === 'in-doubt' ? 'Nothing is in doubt.' : 'No transactions.')
      : state === 'in-doubt' ? inDoubtTable(items) : stateTable(items),
    nav);
}
