// What the views share: the session (the caller, the server's status), the banner, and the
// handling of a failed API call.

import { APIError } from './api.js';
import { h, replace } from './dom.js';

// session is what the console knows about the server and the caller (GET /v1/status).
// refresh re-reads the status; unauthorized asks for a token again (app.js sets both).
export const session = { status: null, caller: null, refresh: async () => true, unauthorized: () => {} };

// canAdmin: the caller's token may run the operator actions.
export function canAdmin() {
  const roles = (session.caller && session.caller.roles) || [];
  return roles.includes('admin');
}

// banner shows the outcome of the last action (kind "ok" or "error"); no text hides it.
export function banner(kind, text) {
  const el = document.getElementById('banner');
  if (!text) {
    el.hidden = true;
    replace(el);
    return;
  }
  el.className = kind;
  el.hidden = false;
  replace(el, h('span', { id: 'banner-text' }, text),
    h('button', { type: 'button', class: 'link', 'aria-label': 'Dismiss', onclick: () => banner() }, '×'));
}

// describe is an API error as one line: status, class and the server's message.
export function describe(err) {
  if (err instanceof APIError) return `${err.status} ${err.class || 'error'}: ${err.message}`;
  return String(err && err.message ? err.message : err);
}

// failed shows an error in place of a view; 401 asks for a token again.
export function failed(err, where) {
  if (err instanceof APIError && err.status === 401) {
    session.unauthorized(err);
    return;
  }
  replace(where, h('p', { class: 'error', id: 'view-error' }, describe(err)));
}
