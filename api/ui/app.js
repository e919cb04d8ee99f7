// The console's entry point: the session (token and caller), the health strip, the banner, the
// search box and the router: #/ the overview, #/in-doubt the in-doubt list, #/list?state=…
// every transaction by state and age, #/hanging the hanging Kafka transactions, #/txn/<id>
// one transaction.

import { APIError, clearToken, get, setToken, token } from './api.js';
import { age, h, replace, time } from './dom.js';
import { hangingView } from './hanging.js';
import { listView } from './list.js';
import { leaveOverview, overviewView } from './overview.js';
import { searchSubmit } from './search.js';
import { banner, session } from './session.js';
import { txnView } from './txn.js';

const main = document.getElementById('main');

function showLogin(message) {
  renderWho();
  replace(document.getElementById('health'));
  const input = h('input', { type: 'password', id: 'token', name: 'token', autocomplete: 'off', spellcheck: 'false', required: true, size: 48 });
  const form = h('form', { id: 'login', class: 'card', onsubmit: async (ev) => {
    ev.preventDefault();
    setToken(input.value);
    input.value = '';
    if (await refreshStatus()) route();
  } },
  h('h1', {}, 'Sign in'),
  h('p', {}, 'This coordinator requires a bearer token (COORDINATOR_TOKENS). The token stays in this tab only and is sent in the Authorization header, never in a URL.'),
  message ? h('p', { class: 'error', id: 'login-error' }, message) : '',
  h('label', { for: 'token' }, 'Token '), input, ' ',
  h('button', { type: 'submit', id: 'login-submit' }, 'Sign in'));
  replace(main, form);
  input.focus();
}

function renderWho() {
  const el = document.getElementById('who');
  const c = session.caller;
  if (!c) {
    replace(el);
    return;
  }
  if (!c.auth) {
    replace(el, h('span', { class: 'muted', title: 'The API runs without tokens: every caller is anonymous and may do everything' }, 'open API (no tokens)'));
    return;
  }
  replace(el, 'Signed in as ', h('strong', { id: 'who-name' }, c.name), ` (${c.roles.join(', ')}) `,
    h('button', { type: 'button', id: 'sign-out', class: 'link', onclick: () => {
      clearToken();
      session.caller = null;
      banner();
      showLogin('');
    } }, 'Sign out'));
}

function renderHealth(st) {
  const el = document.getElementById('health');
  const instances = st.instances.map((i) => h('span', {
    class: `inst ${i.alive ? 'live' : 'expired'}`,
    title: `heartbeat ${age(i.heartbeat_age_seconds)} ago` + (i.lease_seconds ? `; lease ${age(i.lease_seconds)}` : '') + `; transactional ids ${i.txn_id_prefix}-${i.id}-0…${i.pool_size - 1}`,
  }, `${i.id}${i.self ? ' (this)' : ''} · ${age(i.heartbeat_age_seconds)}` + (i.alive ? '' : ' · not alive (lock free)')));
  const p = st.pools;
  const pools = [];
  if (p.log) pools.push(`log ${p.log.acquired}/${p.log.max}`);
  for (const [name, d] of Object.entries(p.databases || {}).sort()) pools.push(`${name} ${d.acquired}/${d.max}`);
  if (p.kafka) {
    pools.push(`kafka ids ${p.kafka.free} free, ${p.kafka.leased} leased, ${p.kafka.quarantined} quarantined` +
      (p.kafka.hanging ? `, ${p.kafka.hanging} hanging` : '') + ` of ${p.kafka.size}` + (p.kafka.low ? ' (low)' : ''));
  }
  const r = st.recovery;
  const d = st.in_doubt;
  const w = st.waiting || { count: 0 };
  const near = w.max && w.self >= 0.8 * w.max;
  replace(el,
    h('div', { class: 'item', id: 'health-instances' }, h('span', { class: 'label' }, 'Instances'), instances.length ? instances : '—'),
    h('div', { class: 'item', id: 'health-recovery' }, h('span', { class: 'label' }, 'Recovery'),
      `${r.passes} passes · ${r.failures} failed · ${r.resolved} resolved · ${r.orphans} orphans · ${r.taken_over} taken over`),
    h('div', { class: 'item', id: 'health-pools' }, h('span', { class: 'label' }, 'Pools'), pools.join(' · ')),
    h('div', { class: `item ${d.count ? 'warn' : ''}`, id: 'health-in-doubt' }, h('span', { class: 'label' }, 'In doubt'),
      h('a', { href: '#/in-doubt' }, `${d.count}`), d.count ? ` · oldest ${age(d.oldest_age_seconds)}` : ''),
    h('div', { class: `item ${near ? 'warn' : ''}`, id: 'health-waiting',
      title: 'Transactions waiting for their callers\' commit or rollback (not in doubt): every instance\'s; this instance\'s against COORDINATOR_MAX_WAITING' },
    h('span', { class: 'label' }, 'Waiting'), `${w.count}`,
    w.max ? ` · this instance ${w.self}/${w.max}` : '',
    w.oldest_decide_by ? ` · earliest deadline ${time(w.oldest_decide_by)}` +
      (w.deadline_in_seconds < 0 ? ' (reached: recovery aborts it)' : ` (in ${age(w.deadline_in_seconds)})`) : ''),
    st.warnings && st.warnings.length ? h('div', { class: 'item warn', title: st.warnings.join('\n') }, `${st.warnings.length} warning(s)`) : '');
}

// refreshStatus reads GET /v1/status: the caller and the health strip. It asks for a token
// when the server wants one, and resolves to whether the console may go on.
async function refreshStatus() {
  // An answer to a token the tab no longer holds (the caller signed out, or in as someone
  // else, while it was on its way) says nothing about the current caller: it is dropped, or a
  // late answer for an admin would show a viewer the admin's actions.
  const asked = token();
  try {
    const st = await get('/v1/status');
    if (token() !== asked) return session.caller !== null;
    session.status = st;
    session.caller = st.caller;
    renderWho();
    renderHealth(st);
    return true;
  } catch (err) {
    if (token() !== asked) return session.caller !== null;
    if (err instanceof APIError && err.status === 401) {
      const had = token() !== '';
      clearToken();
      session.caller = null;
      showLogin(had ? 'The token was not accepted.' : '');
      return false;
    }
    replace(document.getElementById('health'), h('div', { class: 'item error' }, `status: ${err.message}`));
    return session.caller !== null;
  }
}

// route renders the view the location's fragment names.
function route() {
  if (!session.caller) return;
  const hash = location.hash || '#/';
  const q = hash.indexOf('?');
  const path = q >= 0 ? hash.slice(0, q) : hash;
  const params = new URLSearchParams(q >= 0 ? hash.slice(q + 1) : '');
  const m = path.match(/^#\/txn\/(.+)$/);
  let view = 'overview';
  if (m) view = 'txn';
  else if (path === '#/in-doubt') view = 'in-doubt';
  else if (path === '#/' && params.get('state')) view = params.get('state') === 'in-doubt' ? 'in-doubt' : 'list'; // the old list links
  else if (path === '#/list') view = params.get('state') === 'in-doubt' ? 'in-doubt' : 'list';
  else if (path === '#/hanging') view = 'hanging';
  document.querySelectorAll('#nav a').forEach((a) => a.classList.toggle('current', a.dataset.view === view));
  if (view !== 'overview') leaveOverview();
  switch (view) {
    case 'txn': {
      let id;
      try {
        id = decodeURIComponent(m[1]);
      } catch {
        id = m[1];
      }
      txnView(main, id);
      return;
    }
    case 'in-doubt':
      if (!params.get('state')) params.set('state', 'in-doubt');
      listView(main, params);
      return;
    case 'list':
      if (!params.get('state')) params.set('state', 'all');
      listView(main, params);
      return;
    case 'hanging':
      hangingView(main);
      return;
    default:
      overviewView(main);
  }
}

async function boot() {
  session.refresh = refreshStatus;
  session.unauthorized = (err) => {
    clearToken();
    session.caller = null;
    showLogin('The server asks for a token' + (err.message ? `: ${err.message}` : '.'));
  };
  document.getElementById('search').addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (session.caller) searchSubmit(main, document.getElementById('search-input'));
  });
  window.addEventListener('hashchange', () => {
    banner();
    route();
  });
  if (await refreshStatus()) route();
  setInterval(() => {
    if (!document.hidden && session.caller) refreshStatus();
  }, 15000);
}

boot();
