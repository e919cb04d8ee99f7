// Hanging Kafka transactions (#/hanging, GET /v1/kafka/hanging): a partition on which a
// transaction of this instance's ids is left open while Kafka's transaction coordinator
// completed it (a broker skipped the marker). For each: its ids and epochs, where it starts,
// Kafka's state of the id, the logged transactions whose records it holds, and what the
// recovery loop's repair does; then the repairs made since this process started (each is also
// in the event history of the transactions it decided).

import { get, post } from './api.js';
import { age, badge, h, replace, table, time } from './dom.js';
import { banner, canAdmin, describe, failed, session } from './session.js';

const REPAIR = {
  commit: 'writes the COMMIT marker',
  abort: 'writes the ABORT marker',
  wait: 'waits for the log\'s decision',
  operator: 'needs an operator',
  unknown: 'unknown (the log could not be read)',
};

function txnLinks(log) {
  if (!log || !log.length) return h('span', { class: 'muted' }, 'no logged transaction (never prepared: abort)');
  return log.map((t, i) => [i ? ', ' : '', h('a', { href: '#/txn/' + encodeURIComponent(t.id), class: 'txn-link' }, t.id),
    ' ', badge(t.state, 'state'), h('span', { class: 'muted' }, ` @${t.first_offset}`)]);
}

function where(x) {
  return `${x.topic}/${x.partition} from offset ${x.start_offset}`;
}

function hangingTable(entries) {
  return table(['Transactional id', 'Producer id · epoch', 'Partition', 'Found', 'Kafka says', 'The log says', 'Status', 'Repair'],
    entries.map((e) => [
      h('td', { class: 'id' }, e.transactional_id),
      h('td', { class: 'num producer' }, `${e.producer_id} · ${e.producer_epoch}`),
      h('td', { class: 'where' }, where(e)),
      h('td', { class: 'age num', title: `found ${time(e.found_at)}; last write ${time(e.last_write)}` }, age(e.age_seconds)),
      h('td', { class: 'kafka-state' }, e.kafka_state),
      h('td', { class: 'log' }, txnLinks(e.log)),
      h('td', { class: 'status' }, badge(e.status, 'hanging')),
      h('td', { class: 'repair' }, h('strong', { class: `repair-${e.repair}` }, REPAIR[e.repair] || e.repair),
        h('div', { class: 'muted note' }, e.repair_note), e.note && e.note !== e.repair_note ? h('div', { class: 'muted note' }, `last: ${e.note}`) : ''),
    ]), (i) => ({ class: 'entry', dataset: { key: `${entries[i].transactional_id}/${entries[i].topic}/${entries[i].partition}` } }));
}

function repairedTable(items) {
  return table(['Transactional id', 'Producer id · epoch', 'Partition', 'Marker written', 'Repaired', 'Hung for', 'Transactions decided'],
    items.map((r) => [
      h('td', { class: 'id' }, r.transactional_id),
      h('td', { class: 'num' }, `${r.producer_id} · ${r.producer_epoch}`),
      h('td', {}, where(r)),
      h('td', { class: 'marker' }, h('strong', {}, r.marker)),
      h('td', { class: 'time' }, time(r.repaired_at)),
      h('td', { class: 'num' }, age(r.age_seconds)),
      h('td', { class: 'log' }, txnLinks(r.log)),
    ]), (i) => ({ class: 'repaired', dataset: { key: `${items[i].transactional_id}/${items[i].topic}/${items[i].partition}` } }));
}

async function runPass(main) {
  try {
    const r = await post('/v1/recovery/run');
    if (r && r.error) banner('error', `Recovery pass ended with an error: ${r.error}`);
    else banner('ok', 'Recovery pass run: what it repaired is listed under "Repaired"; what still hangs says why.');
  } catch (err) {
    banner('error', `recovery pass failed: ${describe(err)}`);
  }
  session.refresh();
  hangingView(main);
}

// hangingView renders the page.
export async function hangingView(main) {
  replace(main, h('h1', {}, 'Hanging Kafka transactions'), h('p', { class: 'muted' }, 'Loading…'));
  let body;
  try {
    body = await get('/v1/kafka/hanging');
  } catch (err) {
    failed(err, main);
    return;
  }
  const admin = canAdmin();
  replace(main,
    h('h1', {}, 'Hanging Kafka transactions'),
    h('p', { class: 'hint' }, 'A broker can complete a transaction without writing its marker to a partition that had no leader at that moment (KAFKA-20734). The records stay open: read_committed consumers stop at them, and the id\'s next transaction would decide them with its own marker. The id is held out of the pool; the recovery loop writes the marker the coordinator log\'s decision asks for (COMMIT when the records\' transaction committed, ABORT otherwise). See docs/runbook.md, "KpgtxKafkaHangingTransactions".'),
    !body.kafka ? h('p', { class: 'muted', id: 'hanging-no-kafka' }, 'This coordinator has no Kafka brokers.') : '',
    body.warnings && body.warnings.length ? h('ul', { class: 'warnings' }, body.warnings.map((w) => h('li', {}, w))) : '',
    h('section', { class: 'card', id: 'hanging-now' }, h('h2', {}, `Hanging now (${body.hanging.length})`),
      body.hanging.length ? hangingTable(body.hanging) : h('p', { class: 'muted', id: 'hanging-empty' }, 'Nothing hangs.'),
      body.hanging.length ? h('div', { class: 'actions-bar' },
        h('button', { type: 'button', id: 'hanging-run', disabled: !admin, title: admin ? 'POST /v1/recovery/run' : 'needs a token with the admin role',
          onclick: () => runPass(main) }, 'Run a recovery pass now')) : ''),
    h('section', { class: 'card', id: 'hanging-repaired' }, h('h2', {}, `Repaired since this process started (${body.repaired_total})`),
      body.repaired.length ? repairedTable(body.repaired) : h('p', { class: 'muted' }, 'None.')));
}
