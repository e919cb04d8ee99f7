// DOM helpers. Text from the server is only ever set as text (textContent, attribute values),
// never parsed as HTML.

// h builds an element: h('td', {class: 'age'}, 'text', child, …). Attributes named on* with a
// function are listeners; false, null and undefined attributes and children are left out.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v);
    } else if (k === 'class') {
      el.className = v;
    } else if (k === 'dataset') {
      Object.assign(el.dataset, v);
    } else if (typeof v === 'boolean' || k === 'value') {
      el[k] = v;
    } else {
      el.setAttribute(k, String(v));
    }
  }
  put(el, children);
  return el;
}

function put(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

// replace empties el and fills it with children.
export function replace(el, ...children) {
  el.replaceChildren();
  put(el, children);
}

// age formats seconds as "42s", "3m 5s", "2h 10m", "3d 4h".
export function age(seconds) {
  if (seconds === undefined || seconds === null || Number.isNaN(seconds)) return '';
  let s = Math.max(0, Math.floor(Number(seconds)));
  if (s < 60) return `${s}s`;
  const d = Math.floor(s / 86400); s -= d * 86400;
  const hh = Math.floor(s / 3600); s -= hh * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d ${hh}h`;
  if (hh) return `${hh}h ${m}m`;
  return `${m}m ${s}s`;
}

// time formats an RFC 3339 time as "2026-01-02 15:04:05Z" (UTC), or with its milliseconds,
// "2026-01-02 15:04:05.678Z", when ms is set (Kafka's record timestamps are milliseconds).
export function time(t, ms) {
  if (!t) return '';
  const d = new Date(t);
  if (Number.isNaN(d.getTime())) return String(t);
  const s = d.toISOString().replace('T', ' ');
  return ms ? s : s.replace(/\.\d+Z$/, 'Z');
}

// badge is a state or issue label, coloured by its value.
export function badge(text, kind) {
  if (!text) return '';
  return h('span', { class: `badge ${kind || ''} v-${String(text).replace(/[^a-z_-]/gi, '')}` }, text);
}

// table builds a table from column headers and rows of cells; rowAttrs(i) gives each row's
// attributes.
export function table(headers, rows, rowAttrs) {
  return h('table', {},
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))),
    h('tbody', {}, rows.map((cells, i) => h('tr', rowAttrs ? rowAttrs(i) : {}, cells))));
}

// dl builds a definition list from [term, value] pairs, leaving out empty values.
export function dl(pairs, attrs) {
  return h('dl', attrs || {}, pairs.filter(([, v]) => v !== undefined && v !== null && v !== '')
    .map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}
