// One transaction (#/txn/<id>): its SQL gids, Kafka ids and offsets, the event history, the
// evidence behind a heuristic state (and what the in-doubt view finds on the participants),
// and the operator actions, each confirmed in a dialog and sent to the API, which records them
// with the caller's name.

import { APIError, get, post } from './api.js';
import { badge, dl, h, replace, table, time } from './dom.js';
import { banner, canAdmin, describe, failed, session } from './session.js';

// ACTIONS are the operator actions offered per state; the server decides whether each is
// allowed and records refusals too.
const ACTIONS = {
  active: ['retry', 'abort'],
  prepared: ['retry', 'abort'],
  committing: ['retry'],
  heuristic: ['resolve'],
  heuristic_mixed: ['resolve'],
};

const EXPLAIN = {
  retry: 'Runs the recovery rules for this transaction now: active is rolled back (presumed abort), prepared follows Kafka\'s answer to EndTxn(commit), committing commits the SQL side.',
  abort: 'Aborts it on both sides, only where that cannot break atomicity (before prepared, while it waits for its caller\'s decision, or when Kafka has already aborted it). Otherwise the server refuses and says why; the refusal is recorded too.',
  resolve: 'Records your decision as the final state. SQL gids still prepared are committed or rolled back following it; participants already finished are left as they are. Repair the data first.',
};

const TITLES = { retry: 'Retry', abort: 'Abort', resolve: 'Resolve…' };

function kv(detail) {
  if (!detail || typeof detail !== 'object') return '';
  return h('dl', { class: 'detail' }, Object.entries(detail).map(([k, v]) => [
    h('dt', {}, k), h('dd', {}, typeof v === 'object' && v !== null ? JSON.stringify(v) : String(v))]));
}

function eventsTable(events) {
  if (!events.length) return h('p', { class: 'muted' }, 'No events.');
  return table(['Time', 'State', 'Action', 'By', 'Detail'], events.map((ev) => {
    const d = ev.detail || {};
    return [
      h('td', { class: 'time' }, time(ev.created_at)),
      h('td', { class: 'state' }, badge(ev.state, 'state')),
      h('td', { class: 'action' }, d.action ? h('strong', {}, d.action + (d.result ? ` → ${d.result}` : '')) : ''),
      h('td', { class: 'by' }, d.by || ''),
      h('td', {}, kv(d)),
    ];
  }), (i) => ({ class: events[i].detail && events[i].detail.action ? 'admin-event' : '' }));
}

// evidence is what the in-doubt view found for this transaction on the participants, and the
// events that explain a heuristic state.
function evidence(t, entry, events) {
  const parts = [];
  if (t.error) {
    parts.push(h('h3', {}, 'Error'), dl([
      ['Participant', t.error.participant], ['Class', t.error.class], ['Message', t.error.message], ['SQLSTATE', t.error.sqlstate],
    ], { id: 'txn-error' }));
  }
  if (t.state === 'heuristic' || t.state === 'heuristic_mixed') {
    const why = events.filter((ev) => ev.state === t.state && !(ev.detail && ev.detail.action));
    if (why.length) parts.push(h('h3', {}, `How it became ${t.state}`), eventsTable(why));
  }
  if (entry) {
    parts.push(h('h3', {}, 'Found on the participants now'),
      h('p', { class: 'hint', id: 'txn-hint' }, entry.hint),
      dl([
        ['Found in', (entry.sources || []).join(', ')],
        ['Recovery attempts', entry.log ? String(entry.log.attempts) : ''],
        ['Last error', entry.log ? entry.log.last_error : ''],
        ['Next attempt', entry.log ? time(entry.log.next_attempt_at) : ''],
        ['Actions that apply', (entry.actions || []).join(', ') || 'none'],
      ]));
    if (entry.postgres && entry.postgres.length) {
      parts.push(table(['Database', 'Prepared gid (pg_prepared_xacts)', 'Prepared at'],
        entry.postgres.map((p) => [h('td', {}, p.database), h('td', { class: 'gid' }, p.gid), h('td', {}, time(p.prepared_at))])));
    }
    if (entry.kafka) {
      const k = entry.kafka;
      parts.push(dl([
        ['Kafka transaction', `${k.transactional_id} (producer ${k.producer_id}, epoch ${k.producer_epoch})`],
        ['Kafka state', k.state], ['Started', time(k.started_at)], ['Owner', k.owner], ['Quarantined', k.quarantined ? 'yes' : 'no'],
      ], { id: 'txn-kafka-open' }));
    }
  } else if (!['committed', 'aborted'].includes(t.state)) {
    parts.push(h('p', { class: 'muted' }, 'Not in the in-doubt view now (in flight, or young in another instance).'));
  }
  return parts;
}

// findEntry looks the transaction up in the in-doubt view (the first 1000 entries).
async function findEntry(t) {
  if (t.state === 'committed' || t.state === 'aborted') return null;
  try {
    const page = await get('/v1/transactions?state=in-doubt&limit=1000');
    return (page.transactions || []).find((e) => e.log && e.id === t.id) || null;
  } catch {
    return null; // the evidence section says it is not there; the rest of the page stands
  }
}

// confirmAction opens the confirmation dialog; it resolves to the request body, or null when
// the operator cancels.
function confirmAction(action, t) {
  const dialog = document.getElementById('confirm');
  const reason = h('textarea', { id: 'confirm-reason', rows: 3, cols: 60, maxlength: 2000,
    placeholder: action === 'resolve' ? 'Required: why this outcome is right (ticket, what you checked)' : 'Optional: why' });
  const outcomes = action === 'resolve' ? h('fieldset', { id: 'confirm-outcome' }, h('legend', {}, 'Outcome'),
    ['committed', 'aborted'].map((o) => h('label', {}, h('input', { type: 'radio', name: 'outcome', value: o }), ` ${o} `))) : '';
  const ok = h('button', { type: 'submit', id: 'confirm-ok', class: action === 'retry' ? '' : 'danger' }, `${TITLES[action].replace('…', '')} ${t.id}`);
  const cancel = h('button', { type: 'button', id: 'confirm-cancel' }, 'Cancel');
  const valid = () => {
    if (action !== 'resolve') return true;
    return reason.value.trim() !== '' && dialog.querySelector('input[name=outcome]:checked') !== null;
  };
  const update = () => { ok.disabled = !valid(); };
  const form = h('form', { method: 'dialog', oninput: update, onchange: update },
    h('h2', { id: 'confirm-title' }, `${TITLES[action].replace('…', '')} transaction ${t.id}?`),
    h('p', {}, EXPLAIN[action]),
    h('p', { class: 'muted' }, `State now: ${t.state}. The action is recorded in the event history as "${session.caller.name}".`),
    outcomes, h('label', { for: 'confirm-reason' }, 'Reason'), reason,
    h('div', { class: 'buttons' }, cancel, ok));
  replace(dialog, form);
  update();
  return new Promise((resolve) => {
    let result = null;
    cancel.addEventListener('click', () => dialog.close());
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      if (!valid()) return;
      result = {};
      if (reason.value.trim()) result.reason = reason.value;
      if (action === 'resolve') result.outcome = dialog.querySelector('input[name=outcome]:checked').value;
      dialog.close();
    });
    // The close event is dispatched after close() returns, in a task of its own: the close of
    // an earlier use of this dialog (a cancel just before this one opened) can arrive now, while
    // the dialog is open again with this form. It is not this use's answer.
    const onClose = () => {
      if (dialog.open || !dialog.contains(form)) return;
      dialog.removeEventListener('close', onClose);
      resolve(result);
    };
    dialog.addEventListener('close', onClose);
    dialog.showModal();
    reason.focus();
  });
}

async function act(main, action, t) {
  const body = await confirmAction(action, t);
  if (body === null) return;
  try {
    const after = await post(`/v1/transactions/${encodeURIComponent(t.id)}/${action}`, body);
    banner('ok', `${action}: transaction ${t.id} is now ${after.state}.`);
  } catch (err) {
    if (err instanceof APIError && err.status === 401) {
      failed(err, main);
      return;
    }
    const what = err instanceof APIError && err.status === 409 ? 'refused' : 'failed';
    banner('error', `${action} ${what}: ${describe(err)}`);
  }
  session.refresh();
  txnView(main, t.id);
}

// waitingNote says, for a transaction waiting for its caller's decision (shown as prepared,
// waiting), until when it waits and what happens then; '' for any other.
function waitingNote(t) {
  if (!t.waiting) return '';
  const by = t.decide_by;
  const reached = by && Date.parse(by) <= Date.now();
  return h('p', { class: `hint${reached ? ' warn' : ''}`, id: 'txn-waiting' }, reached
    ? `Deadline reached (decide_by ${time(by)}) without its caller's decision: recovery aborts it (presumed abort).`
    : `Waiting for its caller's commit or rollback until ${time(by)}: not in doubt. Without a decision by then, recovery aborts it (presumed abort); an operator may abort it now.`);
}

function actionBar(main, t, entry) {
  // A transaction waiting for its caller is not in doubt: abort only (retry is refused).
  const actions = t.waiting ? ['abort'] : ACTIONS[t.state] || [];
  if (!actions.length) return h('p', { class: 'muted', id: 'no-actions' }, `${t.state}: no operator action applies.`);
  const admin = canAdmin();
  const expected = entry ? entry.actions || [] : null;
  return h('div', { class: 'actions-bar', id: 'actions' },
    actions.map((a) => h('button', {
      type: 'button', dataset: { action: a }, class: a === 'retry' ? '' : 'danger', disabled: !admin,
      title: !admin ? 'needs a token with the admin role' : expected && !expected.includes(a) ? `The in-doubt view expects ${a} to be refused: ${entry.hint}` : EXPLAIN[a],
      onclick: () => act(main, a, t),
    }, TITLES[a])),
    admin ? '' : h('span', { class: 'muted', id: 'read-only' }, ` Read-only: the token "${session.caller.name}" lacks the admin role the actions need.`),
    admin && expected && actions.some((a) => !expected.includes(a))
      ? h('span', { class: 'muted', id: 'expect-refusal' }, ` The in-doubt view expects ${actions.filter((a) => !expected.includes(a)).join(' and ')} to be refused (see Evidence); the server decides and records the attempt.`)
      : '');
}

// txnView renders one transaction.
export async function txnView(main, id) {
  replace(main, h('p', { class: 'muted' }, 'Loading…'));
  let t;
  try {
    t = await get('/v1/transactions/' + encodeURIComponent(id));
  } catch (err) {
    failed(err, main);
    return;
  }
  const entry = await findEntry(t);
  const events = t.events || [];
  const k = t.kafka;
  replace(main,
    h('p', {}, h('a', { href: '#/in-doubt' }, '← In doubt'), ' · ', h('a', { href: '#/list?state=all' }, 'All transactions')),
    h('h1', {}, 'Transaction ', h('span', { id: 'txn-id' }, t.id), ' ', h('span', { id: 'txn-state' }, badge(t.state, 'state')),
      t.waiting ? [' ', badge('waiting', 'issue')] : ''),
    waitingNote(t),
    actionBar(main, t, entry),
    h('section', { class: 'grid' },
      h('div', { class: 'card' }, h('h2', {}, 'Log'), dl([
        ['Global id (gid)', t.gid], ['Instance', t.instance], ['Created', time(t.created_at)], ['Last change', time(t.updated_at)],
        ['Prepared', time(t.prepared_at)], ['Decide by', time(t.decide_by)], ['Finished', time(t.finished_at)],
      ], { id: 'txn-log' })),
      h('div', { class: 'card', id: 'txn-sql' }, h('h2', {}, 'PostgreSQL'),
        t.sql_gids && t.sql_gids.length ? table(['Database', 'Prepared gid'], t.sql_gids.map((g) => [h('td', {}, g.database), h('td', { class: 'gid' }, g.gid)]))
          : h('p', { class: 'muted' }, 'No SQL gid logged.'),
        t.sql && t.sql.length ? table(['#', 'Database', 'Rows affected'], t.sql.map((r, i) => [h('td', {}, String(i)), h('td', {}, r.database), h('td', { class: 'num' }, String(r.rows_affected))])) : ''),
      kafkaCard(t),
      offsetsCard(t.kafka_offsets)),
    evidenceCard(t, entry, events),
    h('section', { class: 'card', id: 'events' }, h('h2', {}, 'Event history'), eventsTable(events)));
}

// kafkaCard shows the Kafka transaction's ids and the records it produced, where each landed.
// A transaction that commits a consumer group's offsets may produce no records: the card says
// so, and the offsets are in their own card.
function kafkaCard(t) {
  const k = t.kafka;
  const records = k && k.records ? k.records : [];
  const none = t.kafka_offsets
    ? 'No records: the Kafka transaction commits the consumer group\'s offsets only.'
    : 'No records logged.';
  return h('div', { class: `card${records.length ? ' wide' : ''}`, id: 'txn-kafka' }, h('h2', {}, 'Kafka'),
    !k ? h('p', { class: 'muted', id: 'kafka-ids' }, 'No Kafka ids logged.')
      : k.transactional_id ? dl([['Transactional id', k.transactional_id], ['Producer id', String(k.producer_id)], ['Producer epoch', String(k.producer_epoch)], ['Prepared state', k.prepared_state]], { id: 'kafka-ids' })
        : h('p', { class: 'muted', id: 'kafka-ids' }, 'No Kafka transaction was used.'),
    records.length
      ? h('table', { id: 'kafka-records' },
        h('thead', {}, h('tr', {}, ['Topic', 'Partition', 'Offset', 'Timestamp'].map((x) => h('th', {}, x)))),
        h('tbody', {}, records.map((r) => h('tr', {}, h('td', { class: 'topic' }, r.topic), h('td', { class: 'num' }, String(r.partition)),
          h('td', { class: 'num' }, String(r.offset)), h('td', { class: 'time' }, time(r.timestamp, true))))))
      : k || t.kafka_offsets ? h('p', { class: 'muted', id: 'kafka-records-empty' }, none) : '');
}

// evidenceCard is the Evidence section, or nothing when there is no evidence to show (a
// transaction that finished without an error).
function evidenceCard(t, entry, events) {
  const parts = evidence(t, entry, events);
  if (!parts.length) return '';
  return h('section', { class: 'card', id: 'evidence' }, h('h2', {}, 'Evidence'), parts);
}

// offsetsCard shows the consumer group's offsets the Kafka transaction commits (logged with
// prepared), or nothing when the transaction carries none.
function offsetsCard(o) {
  if (!o) return '';
  const fenced = o.generation_id !== undefined && o.generation_id !== null && o.generation_id >= 0;
  return h('div', { class: 'card wide', id: 'txn-offsets' }, h('h2', {}, 'Consumer group offsets'),
    dl([['Group', o.group_id], ['Generation', fenced ? String(o.generation_id) : 'unfenced'],
      ['Member', o.member_id || '—'], ['Instance id', o.group_instance_id || '—'],
      // O4: the member's batch before this one, which this one commits only after.
      ['Chained after', o.after ? h('a', { href: '#/txn/' + encodeURIComponent(o.after), class: 'txn-link', id: 'offsets-after' }, o.after) : '']],
    { id: 'offsets-group' }),
    table(['Topic', 'Partition', 'Next offset', 'Metadata'], (o.offsets || []).map((p) => [h('td', {}, p.topic),
      h('td', { class: 'num' }, String(p.partition)), h('td', { class: 'num' }, String(p.offset)), h('td', {}, p.metadata || '')])));
}
