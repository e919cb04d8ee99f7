// The overview (#/, the landing page): this process's last hour from GET /v1/history, drawn
// with uPlot (vendor/, loaded as a classic script: window.uPlot), one card per question an
// operator asks first: are commits normal, are aborts rising, is anything left in doubt or
// heuristic, how long do requests take, is anything getting older in doubt, is recovery keeping
// up, are the pools exhausted. Each card shows the latest figure and, for rates, how many in
// the window; the charts are refreshed every sample.

import { get } from './api.js';
import { age, h, replace, time } from './dom.js';
import { failed, session } from './session.js';

const COLORS = {
  green: '#1d7a46', red: '#b3261e', orange: '#c26a00', purple: '#5b3cc4', blue: '#2856c7',
  grey: '#687385', teal: '#0f7c86', pink: '#b0306a', brown: '#7a5230',
};

const ABORT_CLASSES = [
  ['abortable', COLORS.red], ['retriable', COLORS.orange], ['fenced', COLORS.purple],
  ['invalid_configuration', COLORS.brown], ['internal', COLORS.pink], ['other', COLORS.grey],
];

// CHARTS: id, title, the series (name in the history, label, colour, dashed), the unit of the
// figures, and whether the series are rates (the card then says how many in the window).
const CHARTS = [
  { id: 'commits', title: 'Commits', unit: '/s', rate: true,
    series: [['commits_per_second', 'committed', COLORS.green]] },
  { id: 'aborts', title: 'Aborts by class', unit: '/s', rate: true,
    series: ABORT_CLASSES.map(([c, color]) => [`aborts_${c}_per_second`, c, color]) },
  { id: 'attention', title: 'Left in doubt (202) and heuristic', unit: '/s', rate: true,
    series: [['in_doubt_per_second', 'in doubt', COLORS.orange], ['heuristic_per_second', 'heuristic', COLORS.red]] },
  { id: 'latency', title: 'Latency (total)', unit: 'ms', scale: 1000,
    series: [['latency_p50_seconds', 'p50', COLORS.blue], ['latency_p99_seconds', 'p99', COLORS.purple]] },
  { id: 'indoubt', title: 'Not final in the log', unit: '', gauge: true,
    series: [['not_final', 'not final', COLORS.orange], ['heuristic', 'heuristic', COLORS.red]] },
  { id: 'oldest', title: 'Oldest not final', unit: 's', gauge: true,
    series: [['oldest_not_final_age_seconds', 'age', COLORS.orange]] },
  { id: 'recovery', title: 'Recovery', unit: '/s', rate: true,
    series: [['recovery_passes_per_second', 'passes', COLORS.blue], ['recovery_resolved_per_second', 'resolved', COLORS.green],
      ['recovery_failures_per_second', 'failed passes', COLORS.red]] },
  { id: 'kafka', title: 'Kafka transactional ids', unit: '', gauge: true,
    series: [['kafka_ids_leased', 'leased', COLORS.blue], ['kafka_ids_quarantined', 'quarantined', COLORS.orange],
      ['kafka_ids_hanging', 'hanging', COLORS.red], ['kafka_ids_size', 'pool size', COLORS.grey, true]] },
  { id: 'db', title: 'Database connections', unit: '', gauge: true,
    series: [['db_connections_acquired', 'acquired', COLORS.teal], ['db_connections_max', 'bound', COLORS.grey, true]] },
];

// view holds the overview's charts while it is shown; timer refreshes them.
let view = null;

function fmt(v, unit) {
  if (v === null || v === undefined || Number.isNaN(v)) return '—';
  if (unit === 's') return v < 60 ? `${v < 10 ? v.toFixed(1) : v.toFixed(0)}s` : age(v);
  const a = Math.abs(v);
  if (Number.isInteger(v)) return unit === '/s' ? `${v}/s` : unit ? `${v} ${unit}` : String(v);
  const s = a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : a >= 1 ? v.toFixed(2) : a === 0 ? '0' : v.toFixed(3);
  return unit === '/s' ? `${s}/s` : unit ? `${s} ${unit}` : s;
}

function last(col) {
  for (let i = col.length - 1; i >= 0; i--) if (col[i] !== null) return col[i];
  return null;
}

// windowTotal is how many events a rate series counts over the window: the sum of rate times
// the interval's length.
function windowTotal(times, col) {
  let n = 0;
  for (let i = 0; i < col.length; i++) {
    if (col[i] === null) continue;
    const secs = i > 0 ? times[i] - times[i - 1] : 0;
    n += col[i] * (secs > 0 ? secs : 0);
  }
  return Math.round(n);
}

function chartData(spec, hist) {
  const k = spec.scale || 1;
  return [hist.times, ...spec.series.map(([name]) => (hist.series[name] || []).map((v) => (v === null ? null : v * k)))];
}

// utcDate is uPlot's Date for a timestamp in UTC: its ticks fall on UTC's whole minutes and
// hours, as every table of the console is in UTC.
const utcDate = (ts) => window.uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC');

// tickLabels formats the time axis's ticks as UTC on a 24-hour clock, HH:MM, or HH:MM:SS when
// the ticks are less than a minute apart. The date is not repeated on the axis: the overview
// says it once, over the charts (windowText).
function tickLabels(u, splits, axisIdx, space, incr) {
  return splits.map((v) => new Date(v * 1000).toISOString().slice(11, incr < 60 ? 19 : 16));
}

// TICK_STEPS are the time axis's tick spacings, in seconds: whole seconds at least (the
// samples are seconds apart), then minutes and hours.
const TICK_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

// windowText is the window the charts cover, in UTC: its date once, and its first and last
// sample's time ("2026-01-02 15:04:05Z – 16:04:05Z", the end dated too when it is another day).
function windowText(times) {
  if (!times.length) return '';
  const from = time(new Date(times[0] * 1000).toISOString());
  const to = time(new Date(times[times.length - 1] * 1000).toISOString());
  return `${from} – ${to.slice(0, 10) === from.slice(0, 10) ? to.slice(11) : to}`;
}

function chartOpts(spec, width) {
  return {
    width, height: 170,
    tzDate: utcDate,
    legend: { show: false },
    cursor: { drag: { x: false, y: false } },
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
    // What the time axis shows, kept on the card (data-x-ticks, data-x-splits) for the tests:
    // the axis is drawn on a canvas.
    hooks: { drawAxes: [(u) => {
      const card = u.root.closest('.card.chart');
      if (!card || !u.axes[0]._values) return;
      card.dataset.xTicks = JSON.stringify(u.axes[0]._values);
      card.dataset.xSplits = JSON.stringify(u.axes[0]._splits);
    }] },
    axes: [
      { stroke: '#687385', grid: { stroke: '#eef0f4' }, ticks: { stroke: '#dfe3ea' }, size: 30, incrs: TICK_STEPS, values: tickLabels },
      { stroke: '#687385', grid: { stroke: '#eef0f4' }, ticks: { stroke: '#dfe3ea' }, size: 54,
        values: (u, vals) => vals.map((v) => (spec.unit === 's' ? fmt(v, 's') : String(Number(v.toPrecision(3))))) },
    ],
    series: [{}, ...spec.series.map(([, label, color, dashed]) => ({
      label, stroke: color, width: 2, dash: dashed ? [6, 4] : undefined,
      fill: spec.series.length === 1 ? color + '22' : undefined, points: { show: false },
      value: (u, v) => fmt(v, spec.unit),
    }))],
  };
}

// headline is a card's figures: the latest value of each series and, for rates, how many in
// the window.
function headline(spec, hist) {
  const items = spec.series.map(([name, label, color, dashed]) => {
    if (dashed) {
      const v = last(hist.series[name] || []);
      return v === null ? null : h('span', { class: 'fig bound muted', dataset: { series: name, last: String(v) } }, h('span', { class: 'swatch dashed' }), `${label} ${fmt(v, spec.unit)}`);
    }
    const col = hist.series[name] || [];
    const v = last(col);
    const total = spec.rate ? windowTotal(hist.times, col) : null;
    if (spec.id === 'aborts' && !total && v === 0) return null; // classes that did not happen
    const shown = spec.unit === 'ms' ? (v === null ? null : v * 1000) : v;
    return h('span', { class: 'fig', dataset: { series: name, last: v === null ? '' : String(v), total: total === null ? '' : String(total) } },
      h('span', { class: 'swatch', dataset: { color } }), `${label} `,
      h('strong', {}, fmt(shown, spec.unit)),
      spec.rate ? h('span', { class: 'muted' }, ` · ${total} in ${age(hist.window_covered)}`) : '');
  }).filter(Boolean);
  return items.length ? items : h('span', { class: 'muted' }, 'none');
}

function cardOf(spec) {
  return h('section', { class: 'card chart', id: `chart-${spec.id}`, 'aria-label': spec.title },
    h('h2', {}, spec.title), h('div', { class: 'figs' }), h('div', { class: 'plot' }));
}

function render(hist) {
  hist.window_covered = hist.times.length > 1 ? hist.times[hist.times.length - 1] - hist.times[0] + (hist.interval_seconds || 0) : hist.interval_seconds || 0;
  const empty = document.getElementById('overview-empty');
  if (empty) empty.hidden = hist.times.length > 0;
  const win = document.getElementById('overview-window');
  if (win) replace(win, hist.times.length ? `Times in UTC · ${windowText(hist.times)}` : '');
  for (const spec of CHARTS) {
    const card = document.getElementById(`chart-${spec.id}`);
    if (!card) continue;
    replace(card.querySelector('.figs'), headline(spec, hist));
    card.querySelectorAll('.swatch').forEach((s) => { s.style.background = s.dataset.color; });
    const data = chartData(spec, hist);
    const plot = card.querySelector('.plot');
    const width = Math.max(240, plot.clientWidth || 360);
    if (!view.charts[spec.id]) {
      view.charts[spec.id] = new window.uPlot(chartOpts(spec, width), data, plot);
    } else {
      view.charts[spec.id].setData(data);
    }
  }
  const st = session.status;
  const links = document.getElementById('overview-links');
  if (links && st) {
    const hanging = (st.in_doubt.by_issue && st.in_doubt.by_issue.hanging) || 0;
    replace(links,
      h('a', { href: '#/in-doubt', id: 'overview-in-doubt', class: st.in_doubt.count ? 'warn' : '' },
        `In doubt now: ${st.in_doubt.count}` + (st.in_doubt.count ? ` (oldest ${age(st.in_doubt.oldest_age_seconds)})` : '')),
      h('a', { href: '#/hanging', id: 'overview-hanging', class: hanging ? 'warn' : '' }, `Hanging Kafka transactions: ${hanging}`),
      h('a', { href: '#/list?state=all' }, 'All transactions'));
  }
  const meta = document.getElementById('overview-meta');
  if (meta) {
    replace(meta, `Instance ${hist.instance} · a sample every ${hist.interval_seconds}s, ${hist.times.length} samples (last ${age(hist.window_covered)}) · in memory, this process only: `,
      h('a', { href: '/metrics' }, '/metrics'), ' and the Grafana dashboard (deploy/grafana) keep the long history of every instance.');
  }
  document.getElementById('overview').dataset.samples = String(hist.times.length);
}

async function refresh(main) {
  let hist;
  try {
    hist = await get('/v1/history');
  } catch (err) {
    stop();
    failed(err, main);
    return;
  }
  if (!view || !document.getElementById('overview')) return; // another view is shown now
  render(hist);
  if (!view.timer) view.timer = setInterval(() => { if (!document.hidden) refresh(main); }, Math.max(2, hist.interval_seconds || 5) * 1000);
}

function stop() {
  if (!view) return;
  if (view.timer) clearInterval(view.timer);
  Object.values(view.charts).forEach((c) => c.destroy());
  window.removeEventListener('resize', view.resize);
  view = null;
}

// overviewView renders the overview; leaveOverview stops its refresh (the router calls it on
// every other view).
export function overviewView(main) {
  stop();
  view = { charts: {}, timer: null, resize: () => {
    if (!view) return;
    for (const spec of CHARTS) {
      const c = view.charts[spec.id];
      const plot = document.querySelector(`#chart-${spec.id} .plot`);
      if (c && plot) c.setSize({ width: Math.max(240, plot.clientWidth), height: 170 });
    }
  } };
  window.addEventListener('resize', view.resize);
  replace(main,
    h('div', { id: 'overview' },
      h('div', { class: 'overview-head' }, h('h1', {}, 'Overview'), h('nav', { id: 'overview-links', class: 'links' })),
      h('p', { id: 'overview-empty', class: 'muted' }, 'Collecting: the first sample comes one interval after the start.'),
      h('p', { id: 'overview-window', class: 'muted' }),
      h('div', { class: 'charts' }, CHARTS.map(cardOf)),
      h('p', { id: 'overview-meta', class: 'muted' })));
  refresh(main);
}

export const leaveOverview = stop;
