// The console's only way to the server: fetch with the operator's bearer token.
//
// The token lives in this tab's sessionStorage (gone when the tab closes) and is sent only in
// the Authorization header: never in a URL (access logs, Referer, history) and never as a
// cookie (a browser attaches cookies to requests other sites make; it never attaches this).

const KEY = 'kpgtx.console.token';

export function token() {
  return sessionStorage.getItem(KEY) || '';
}

export function setToken(t) {
  sessionStorage.setItem(KEY, t.trim());
}

export function clearToken() {
  sessionStorage.removeItem(KEY);
}

// APIError is a non-2xx answer: status, and the API's error class and message when it sent
// them.
export class APIError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.class = e.class || '';
    this.field = e.field || '';
    this.body = body;
  }
}

// parse reads JSON keeping integers beyond 2^53 (Kafka producer ids can be) as their exact
// text rather than a rounded number.
function parse(text) {
  return JSON.parse(text, (key, value, ctx) => {
    if (typeof value === 'number' && !Number.isSafeInteger(value) && ctx && /^-?\d+$/.test(ctx.source || '')) {
      return ctx.source;
    }
    return value;
  });
}

// call sends one API request; body, when given, is sent as JSON. It resolves to the decoded
// answer and throws APIError for any status but 2xx.
export async function call(method, path, body) {
  const headers = { Accept: 'application/json' };
  const t = token();
  if (t) headers.Authorization = 'Bearer ' + t;
  const init = { method, headers, credentials: 'omit', cache: 'no-store', redirect: 'error', referrerPolicy: 'no-referrer' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  const text = await resp.text();
  let data = null;
  if ((resp.headers.get('Content-Type') || '').startsWith('application/json') && text) {
    data = parse(text);
  }
  if (!resp.ok) throw new APIError(resp.status, data);
  return data;
}

export const get = (path) => call('GET', path);
export const post = (path, body) => call('POST', path, body);
