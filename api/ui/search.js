// The search box: opens a transaction by its id, or by its gid (<prefix>_<id>) or one of its SQL
// gids (<prefix>_<id>@<database>), as pg_prepared_xacts, the logs and the metrics name it. An id
// has no "_" (1-128 characters of [A-Za-z0-9._:-]), so the id of a gid is what follows its last
// "_"; the transaction found must carry that gid.

import { APIError, get } from './api.js';
import { banner, describe, failed } from './session.js';

const ID = /^[A-Za-z0-9.:-]{1,128}$/;

// candidate is the transaction id the text names, and the gid it must have (null: an id).
export function candidate(text) {
  const s = text.trim();
  if (ID.test(s)) return { id: s, gid: null };
  const i = s.lastIndexOf('_');
  if (i > 0) {
    const id = s.slice(i + 1).replace(/@[^@]*$/, '');
    if (ID.test(id)) return { id, gid: s };
  }
  return null;
}

function hasGID(t, gid) {
  return t.gid === gid || (t.sql_gids || []).some((g) => g.gid === gid);
}

// searchSubmit opens what the input names, or says why it cannot.
export async function searchSubmit(main, input) {
  const text = input.value.trim();
  if (!text) return;
  const c = candidate(text);
  if (!c) {
    banner('error', `"${text}" is neither a transaction id (1-128 characters of A-Z a-z 0-9 . : -) nor a gid (<prefix>_<id>, <prefix>_<id>@<database>).`);
    return;
  }
  let t;
  try {
    t = await get('/v1/transactions/' + encodeURIComponent(c.id));
  } catch (err) {
    if (err instanceof APIError && err.status === 401) {
      failed(err, main);
      return;
    }
    banner('error', err instanceof APIError && err.status === 404 ? `No transaction ${c.gid ? 'with gid' : 'with id'} "${text}".` : `search: ${describe(err)}`);
    return;
  }
  if (c.gid && !hasGID(t, c.gid)) {
    banner('error', `No transaction with gid "${text}" (transaction ${t.id} has gid ${t.gid}).`);
    return;
  }
  banner();
  input.value = '';
  const next = '#/txn/' + encodeURIComponent(t.id);
  if (location.hash === next) window.dispatchEvent(new HashChangeEvent('hashchange'));
  else location.hash = next;
}
