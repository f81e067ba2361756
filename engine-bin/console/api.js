// The console's only way to the server: /api/v1 with the token the user entered.
// The token lives in sessionStorage (this tab only, gone when it closes) and leaves only as
// an Authorization header to this origin.

const KEY = 'ax.token';

export function token() {
  return sessionStorage.getItem(KEY) || '';
}

export function setToken(value) {
  if (value) sessionStorage.setItem(KEY, value);
  else sessionStorage.removeItem(KEY);
}

// An answer that is not 2xx: the API's error code and message, as the API wrote them.
export class ApiError extends Error {
  constructor(status, code, message, errors = []) {
    super(message);
    this.status = status;
    this.code = code;
    // Every problem of a refused input, each with its path (`schedule.every: ...`).
    this.errors = errors;
  }
  toString() {
    return `${this.status} ${this.code}: ${this.message}`;
  }
}

// Calls /api/v1{path}; resolves to {body, next} (next: the X-Ax-Continue page token).
export async function call(path, { method = 'GET', body } = {}) {
  const headers = { Accept: 'application/json' };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(`/api/v1${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
      credentials: 'omit',
    });
  } catch (e) {
    throw new ApiError(0, 'unreachable', `the server did not answer: ${e.message}`);
  }
  const text = await response.text();
  let parsed = null;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = text;
    }
  }
  if (!response.ok) {
    const err = parsed && parsed.error ? parsed.error : {};
    const detail = Array.isArray(err.errors) && err.errors.length ? ` (${err.errors.join('; ')})` : '';
    throw new ApiError(response.status, err.code || 'error', (err.message || String(parsed || response.statusText)) + detail,
      Array.isArray(err.errors) ? err.errors : []);
  }
  return { body: parsed, next: response.headers.get('x-ax-continue') };
}

export async function get(path) {
  return (await call(path)).body;
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

export function taskPath(ns, id) {
  return `/tasks/${encodeURIComponent(ns)}/${encodeURIComponent(id)}`;
}

const RANK = { read: 0, operate: 1, admin: 2 };

// Whether `role` includes `needed`.
export function allows(role, needed) {
  return role in RANK && RANK[role] >= RANK[needed];
}
