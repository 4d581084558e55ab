// The status page: polls the admin API every two seconds and shows every profile, its
// endpoints, the answer rates (averaged over the last minute), failovers, drains, the
// last reload's errors and the recent changes. Times are UTC. Everything shown comes from the API
// of the server that served this file; the token, when one is needed, stays in this tab's
// sessionStorage. Text is only ever set with textContent, so no name can become markup.
"use strict";

const POLL_MS = 2000;
// Rates are averaged over this long: one poll's rate flickers to "no answers" between
// bursts of queries, which misleads more than it tells.
const RATE_WINDOW_MS = 60000;
const PAGE_SIZE = 100;
const EVENTS_KEPT = 200;
// How long to wait before asking again for an API this server does not have (an older
// server answers 404 until it is upgraded).
const ABSENT_RETRY_MS = 30000;
const TOKEN_KEY = "steerdns.admin-token";
const FIRST_RENDER_MARK = "steerdns:first-render";
const STATUSES = ["online", "checking", "degraded", "disabled", "stopped", "unmonitored"];
const EVENT_KINDS = {
  status: "status",
  drain: "drained",
  undrain: "undrained",
  weight: "weight set",
  weight_cleared: "weight cleared",
  bias: "bias set",
  bias_cleared: "bias cleared",
  override_dropped: "override dropped",
};

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  running: false,
  timer: null,
  poll: 0,
  filter: { q: "", status: "", offset: 0 },
  list: null,
  stats: null,
  // name -> the totals read for it over the rate window, oldest first.
  samples: new Map(),
  // name -> { queries, answers: {endpoint: per second} } or null before two readings.
  rates: new Map(),
  // How many seconds the rates shown span (up to the window), null before two readings.
  span: null,
  server: { samples: [], rate: null },
  reload: { result: null, absent: false, retryAt: 0 },
  // The token's role ("read" or "write"), asked once per token; a read token is offered
  // no button that changes state.
  role: null,
  expanded: new Set(),
  details: new Map(),
  events: { list: [], next: 0, absent: false, retryAt: 0 },
  rendered: false,
};

const $ = (id) => document.getElementById(id);

class AuthError extends Error {}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(path, method = "GET") {
  const headers = {};
  if (state.token) headers.Authorization = "Bearer " + state.token;
  let r;
  try {
    r = await fetch(path, { method, headers, cache: "no-store" });
  } catch (e) {
    throw new ApiError(0, "cannot reach the admin API");
  }
  if (r.status === 401) throw new AuthError("token required");
  if (!r.ok) {
    let message = r.status + " " + r.statusText;
    try {
      const body = await r.json();
      if (body && body.error) message = body.error;
    } catch (e) {
      // Not JSON: keep the status line.
    }
    throw new ApiError(r.status, message);
  }
  return r.json();
}

function listQuery() {
  const p = new URLSearchParams();
  p.set("q", state.filter.q);
  if (state.filter.status) p.set("status", state.filter.status);
  p.set("offset", String(state.filter.offset));
  p.set("limit", String(PAGE_SIZE));
  return p.toString();
}

const profilePath = (name) => "/api/v1/profiles/" + encodeURIComponent(name);

// ---------------------------------------------------------------------------------------
// Polling
// ---------------------------------------------------------------------------------------

async function poll() {
  clearTimeout(state.timer);
  const mine = ++state.poll;
  try {
    const query = listQuery();
    const [list, stats] = await Promise.all([
      api("/api/v1/profiles?" + query),
      api("/api/v1/stats?" + query),
    ]);
    if (mine !== state.poll) return;
    if (list.total > 0 && state.filter.offset >= list.total) {
      // The list shrank under the page (a reload, a narrower filter): show its last page.
      state.filter.offset = Math.floor((list.total - 1) / PAGE_SIZE) * PAGE_SIZE;
      saveFilter();
      poll();
      return;
    }
    const onPage = new Set(list.profiles.map((p) => p.name));
    const details = await Promise.all(
      [...state.expanded].filter((n) => onPage.has(n)).map(fetchDetails),
    );
    const events = await fetchEvents();
    const reload = await fetchReload();
    if (state.role === null) state.role = await fetchRole();
    if (mine !== state.poll) return;
    state.list = list;
    if (reload) state.reload.result = reload;
    takeStats(stats, performance.now());
    for (const [name, d] of details) {
      if (d) state.details.set(name, d);
      else state.expanded.delete(name);
    }
    if (events) takeEvents(events);
    show("live");
    render();
    setConn("Live · updated " + utc(new Date()), false);
  } catch (e) {
    if (mine !== state.poll) return;
    if (e instanceof AuthError) {
      askForToken(state.token ? "The saved token was not accepted." : "");
      return;
    }
    setConn(e.message + "; retrying", true);
    if (state.list) show("live");
  }
  schedule();
}

function schedule() {
  clearTimeout(state.timer);
  // A hidden tab does not poll; it catches up when shown again.
  if (state.running && !document.hidden) state.timer = setTimeout(poll, POLL_MS);
}

async function fetchDetails(name) {
  try {
    return [name, await api(profilePath(name))];
  } catch (e) {
    // Gone with a reload: collapse it.
    if (e instanceof ApiError && e.status === 404) return [name, null];
    throw e;
  }
}

async function fetchEvents() {
  const ev = state.events;
  if (ev.absent && Date.now() < ev.retryAt) return null;
  try {
    const r = await api("/api/v1/events?since=" + encodeURIComponent(ev.next));
    ev.absent = false;
    return r;
  } catch (e) {
    if (e instanceof ApiError && (e.status === 404 || e.status === 405)) {
      ev.absent = true;
      ev.retryAt = Date.now() + ABSENT_RETRY_MS;
      return null;
    }
    if (e instanceof AuthError) throw e;
    // Events are extra: the rest of the page still updates without them.
    return null;
  }
}

/// "read" or "write"; "write" from a server that does not say (before token roles).
async function fetchRole() {
  try {
    return (await api("/api/v1/whoami")).role || "write";
  } catch (e) {
    if (e instanceof AuthError) throw e;
    return "write";
  }
}

async function fetchReload() {
  const r = state.reload;
  if (r.absent && Date.now() < r.retryAt) return null;
  try {
    const result = await api("/api/v1/reload");
    r.absent = false;
    return result;
  } catch (e) {
    if (e instanceof AuthError) throw e;
    if (e instanceof ApiError && (e.status === 404 || e.status === 405)) {
      r.absent = true;
      r.retryAt = Date.now() + ABSENT_RETRY_MS;
    }
    return null;
  }
}

/// Adds a reading to `list` (oldest first) and drops those older than the window, so that
/// the first and the last span at most the window.
function remember(list, sample) {
  const last = list[list.length - 1];
  // Totals that went backwards (another server behind the address): start over.
  if (last && sample.queries < last.queries) list.length = 0;
  list.push(sample);
  while (list.length > 2 && list[0].t < sample.t - RATE_WINDOW_MS - POLL_MS / 4) list.shift();
  return list;
}

function takeStats(stats, now) {
  const rates = new Map();
  const samples = new Map();
  let span = null;
  for (const p of stats.profiles) {
    const list = remember(state.samples.get(p.name) || [], { t: now, queries: p.queries, answers: p.answers });
    rates.set(p.name, list.length > 1 ? rate(list[0], list[list.length - 1]) : null);
    if (list.length > 1) span = Math.max(span ?? 0, (now - list[0].t) / 1000);
    samples.set(p.name, list);
  }
  // Only the profiles on the page are kept: the map stays as small as the page.
  state.samples = samples;
  state.rates = rates;
  const server = remember(state.server.samples, { t: now, queries: stats.queries });
  state.server.rate = server.length > 1 ? (stats.queries - server[0].queries) / ((now - server[0].t) / 1000) : null;
  if (server.length > 1) span = Math.max(span ?? 0, (now - server[0].t) / 1000);
  state.span = span;
  state.stats = stats;
}

/// Rates between two readings.
function rate(before, now) {
  const dt = (now.t - before.t) / 1000;
  if (dt <= 0) return null;
  const answers = {};
  let total = 0;
  for (const [ep, n] of Object.entries(now.answers)) {
    const d = n - (before.answers[ep] ?? n);
    answers[ep] = Math.max(0, d) / dt;
    total += answers[ep];
  }
  return { queries: (now.queries - before.queries) / dt, answers, total };
}

/// "last 60 s": how long the rates shown are averaged over (less just after the page
/// opened).
function windowLabel() {
  if (state.span === null) return "";
  return "last " + Math.min(RATE_WINDOW_MS / 1000, Math.round(state.span)) + " s";
}

function takeEvents(r) {
  const ev = state.events;
  const seen = new Set(ev.list.map((e) => e.seq));
  for (const e of r.events || []) if (!seen.has(e.seq)) ev.list.push(e);
  ev.list.sort((a, b) => b.seq - a.seq);
  ev.list.length = Math.min(ev.list.length, EVENTS_KEPT);
  if (r.next !== undefined && r.next !== null) ev.next = r.next;
}

// ---------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------

function show(what) {
  document.body.dataset.state = what;
  $("login").hidden = what !== "login";
  $("layout").hidden = what !== "live";
  $("forget-token").hidden = !state.token;
  $("read-only").hidden = state.role !== "read";
}

function setConn(text, bad) {
  const c = $("conn");
  c.textContent = text;
  c.classList.toggle("bad", bad);
}

function render() {
  const list = state.list;
  renderSummary(list);
  renderReload();
  renderPager(list);
  setText($("rate-window"), state.span === null ? "" : "(" + windowLabel() + ")");
  const table = $("profiles");
  sync(table, "tbody", list.profiles, (p) => p.name, createProfile, updateProfile);
  $("empty").hidden = list.profiles.length > 0;
  renderEvents();
  if (!state.rendered) {
    state.rendered = true;
    performance.mark(FIRST_RENDER_MARK);
  }
}

function renderSummary(list) {
  const s = $("summary");
  s.replaceChildren();
  const matching = Object.values(list.statuses).reduce((a, b) => a + b, 0);
  const filtered = state.filter.q !== "";
  s.append(text("strong", fmtInt(matching)), " " + (filtered ? "matching " : "") + (matching === 1 ? "profile" : "profiles"));
  for (const st of STATUSES) {
    const n = list.statuses[st];
    if (n) s.append(" · ", dot(st), fmtInt(n) + " " + st);
  }
  const r = state.server.rate;
  s.append(" · " + (r === null ? "…" : fmtRate(r)) + " queries/s" + (r === null ? "" : " (" + windowLabel() + ")"));
  s.dataset.generation = list.generation;
}

/// A banner while the last reload was rejected: its trigger, time and located errors.
function renderReload() {
  const banner = $("reload-banner");
  const r = state.reload.result;
  if (!r || r.ok) {
    if (!banner.hidden) {
      banner.hidden = true;
      banner.replaceChildren();
    }
    return;
  }
  const key = r.time + " " + r.trigger;
  if (!banner.hidden && banner.dataset.key === key) return;
  banner.dataset.key = key;
  const when = text("time", utc(new Date(r.time), true));
  when.dateTime = r.time;
  const head = el("p");
  head.append(text("strong", "Reload rejected"), " (" + r.trigger + ", ", when,
    "): the running configuration (generation " + r.generation + ") stays. Fix these and reload:");
  const list = el("ul");
  for (const e of r.errors) list.append(text("li", e));
  banner.replaceChildren(head, list);
  banner.hidden = false;
}

function renderPager(list) {
  const { offset } = state.filter;
  const last = Math.min(offset + list.profiles.length, list.total);
  const range = $("range");
  range.textContent = list.total === 0 ? "0 of 0" : fmtInt(offset + 1) + "–" + fmtInt(last) + " of " + fmtInt(list.total);
  range.dataset.total = list.total;
  range.dataset.offset = offset;
  $("prev").disabled = offset === 0;
  $("next").disabled = offset + PAGE_SIZE >= list.total;
}

/// Makes `parent`'s `tag` children one per item, in order, keyed by `key`: existing
/// elements are updated in place, so focus, selection and open rows survive a poll.
function sync(parent, tag, items, key, create, update) {
  const old = new Map();
  for (const el of parent.querySelectorAll(":scope > " + tag)) old.set(el.dataset.key, el);
  let before = parent.querySelector(":scope > " + tag);
  for (const item of items) {
    const k = key(item);
    let el = old.get(k);
    if (el) old.delete(k);
    else {
      el = create(item);
      el.dataset.key = k;
    }
    update(el, item);
    if (el !== before) parent.insertBefore(el, before);
    else before = el.nextElementSibling;
  }
  for (const el of old.values()) el.remove();
}

function createProfile(p) {
  const body = document.createElement("tbody");
  body.className = "profile";
  const row = body.insertRow();
  row.className = "summary-row";
  const toggle = row.insertCell();
  toggle.className = "col-toggle";
  const button = el("button", "toggle");
  button.type = "button";
  button.setAttribute("aria-expanded", "false");
  button.setAttribute("aria-label", "Show endpoints of " + p.name);
  button.addEventListener("click", () => toggleProfile(p.name));
  toggle.append(button);
  const name = row.insertCell();
  name.className = "name";
  const link = el("button", "name-button");
  link.type = "button";
  link.textContent = p.name;
  link.addEventListener("click", () => toggleProfile(p.name));
  name.append(link);
  for (const cls of ["routing", "status", "counts", "num qps", "split"]) row.insertCell().className = cls;
  return body;
}

function updateProfile(body, p) {
  const row = body.rows[0];
  const open = state.expanded.has(p.name);
  body.classList.toggle("open", open);
  row.querySelector(".toggle").setAttribute("aria-expanded", String(open));
  setText(row.cells[2], p.routing);
  setBadge(row.cells[3], p.status);
  if (p.failover) {
    const badge = span("failover", text("span", "failover", "badge st-failover"), text("span", "serving backup", "failover-note"));
    badge.title = "preferred: " + p.failover.preferred.join(", ") + " (not serving); answering: " + p.failover.serving.join(", ");
    row.cells[3].append(badge);
  }
  row.cells[3].dataset.failover = p.failover ? "yes" : "";
  const counts = row.cells[4];
  counts.replaceChildren();
  for (const st of STATUSES) {
    const n = p.endpoints[st];
    if (n) counts.append(span("count", dot(st), n + " " + st));
  }
  // Run-time overrides: a drained endpoint keeps its probe status above, so say it here.
  const overrides = p.overrides || [];
  const drained = overrides.filter((o) => o.drained).map((o) => o.endpoint);
  const weighted = overrides.filter((o) => o.weight_override !== null && o.weight_override !== undefined);
  // The count does not wrap; the names may (they can be long, and the table must fit).
  if (drained.length) {
    counts.append(span("count drained", text("span", drained.length + " drained", "nowrap"), " (" + drained.join(", ") + ")"));
  }
  if (weighted.length) {
    const which = weighted.map((o) => o.endpoint + " → " + o.weight_override).join(", ");
    counts.append(span("count override", text("span", weighted.length + " weight set", "nowrap"), " (" + which + ")"));
  }
  const biased = overrides.filter((o) => o.bias_override !== null && o.bias_override !== undefined);
  if (biased.length) {
    const which = biased.map((o) => o.endpoint + " → " + o.bias_override).join(", ");
    counts.append(span("count override", text("span", biased.length + " bias set", "nowrap"), " (" + which + ")"));
  }
  const r = state.rates.get(p.name);
  setText(row.cells[5], r ? fmtRate(r.queries) : "…");
  renderSplit(row.cells[6], p.name, r);
  let detail = body.rows[1];
  if (!open) {
    if (detail) detail.remove();
    return;
  }
  if (!detail) {
    detail = body.insertRow();
    detail.className = "detail-row";
    const cell = detail.insertCell();
    cell.colSpan = 7;
  }
  renderDetail(detail.cells[0], p.name);
}

/// The order endpoints are coloured in: their names sorted, the same in the bar and in
/// the endpoint table.
function endpointColours(name) {
  const list = state.samples.get(name);
  const names = list && list.length ? Object.keys(list[list.length - 1].answers).sort() : [];
  return new Map(names.map((n, i) => [n, "c" + (i % 8)]));
}

function renderSplit(cell, name, r) {
  cell.replaceChildren();
  if (!r) {
    cell.append(text("span", "…", "muted"));
    return;
  }
  if (r.total === 0) {
    cell.append(text("span", "no answers", "muted"));
    return;
  }
  const colours = endpointColours(name);
  const bar = span("bar");
  const legend = span("legend");
  const parts = [];
  for (const [ep, colour] of colours) {
    const share = r.answers[ep] / r.total;
    if (!share) continue;
    const piece = span("piece " + colour);
    piece.style.width = (share * 100).toFixed(2) + "%";
    piece.title = ep + ": " + pct(share) + " (" + fmtRate(r.answers[ep]) + "/s)";
    bar.append(piece);
    parts.push(ep + " " + pct(share));
    legend.append(span("legend-item", span("swatch " + colour), ep + " " + pct(share)));
  }
  bar.setAttribute("role", "img");
  bar.setAttribute("aria-label", parts.join(", "));
  cell.append(bar, legend);
}

function renderDetail(cell, name) {
  const d = state.details.get(name);
  if (!d) {
    if (!cell.firstChild) cell.append(text("p", "Loading endpoints…", "muted"));
    return;
  }
  let table = cell.querySelector("table");
  if (!table) {
    cell.replaceChildren();
    table = el("table", "endpoints");
    const head = table.createTHead().insertRow();
    for (const h of ["Endpoint", "Target", "Status", "Last probe", "Last change", "Answers/s", ""]) {
      const th = document.createElement("th");
      th.textContent = h;
      head.append(th);
    }
    table.append(document.createElement("tbody"));
    cell.append(table);
  }
  const colours = endpointColours(name);
  const r = state.rates.get(name);
  const create = () => {
    const tr = document.createElement("tr");
    for (const cls of ["ep-name", "target", "status", "probe", "change", "num share", "action"]) tr.insertCell().className = cls;
    return tr;
  };
  const update = (tr, ep) => {
    const c = tr.cells;
    c[0].replaceChildren(span("swatch " + (colours.get(ep.name) || "none")), ep.name);
    setText(c[1], ep.target);
    setBadge(c[2], ep.status);
    if (ep.drained) c[2].append(" ", text("span", "drained", "badge drained"));
    if (ep.weight_override !== undefined && ep.weight_override !== null) {
      c[2].append(" ", text("span", "weight " + ep.weight_override, "badge override"));
    }
    if (ep.bias_override !== undefined && ep.bias_override !== null) {
      const was = " (configured " + ep.configured_bias + ")";
      c[2].append(" ", text("span", "bias " + ep.bias_override + was, "badge override"));
    }
    if (ep.load) c[2].append(" ", loadBadge(ep.load));
    renderProbe(c[3], ep);
    renderChange(c[4], ep.last_change);
    renderShare(c[5], ep.name, r);
    renderDrain(c[6], name, ep);
  };
  sync(table.tBodies[0], "tr", d.endpoints, (ep) => ep.name, create, update);
}

// An endpoint's load feedback: its effective share, and the load and utilisation read.
function loadBadge(l) {
  let t = "share " + l.share.toFixed(2);
  if (l.load !== null) t += " · load " + +l.load.toFixed(1) + "/" + l.capacity + " (" + pct(l.utilisation) + ")";
  if (l.stale) t += " · stale";
  if (l.above_high) t += " · above high";
  const b = text("span", t, "badge override");
  b.title = "load feedback (" + l.source + "): target share " + l.target.toFixed(2) + (l.error ? " — " + l.error : "");
  return b;
}

function renderProbe(cell, ep) {
  cell.replaceChildren();
  if (!ep.target || ep.target.startsWith("profile ")) {
    cell.append(text("span", "status of the nested profile", "muted"));
    return;
  }
  if (!ep.probed) {
    cell.append(text("span", ep.always_serve ? "not probed (always_serve)" : "not probed", "muted"));
    return;
  }
  const p = ep.last_probe;
  if (!p) {
    cell.append(text("span", "waiting for the first probe", "muted"));
    return;
  }
  cell.append(text("span", p.ok ? "ok" : p.result, p.ok ? "ok" : "fail"));
  if (p.reason) cell.append(" — " + p.reason);
  const when = text("span", " · " + ago(p.at) + " · " + p.duration_ms.toFixed(1) + " ms", "muted");
  when.title = p.at;
  cell.append(when);
}

function renderChange(cell, c) {
  cell.replaceChildren();
  if (!c) {
    cell.append(text("span", "none yet", "muted"));
    return;
  }
  cell.append(dot(c.from), c.from + " → ", dot(c.to), c.to);
  if (c.reason) cell.append(" — " + c.reason);
  const when = text("span", " · " + utc(new Date(c.at), true) + " (" + ago(c.at) + ")", "muted");
  when.title = c.at;
  cell.append(when);
}

function renderShare(cell, ep, r) {
  if (!r || !(ep in r.answers)) {
    setText(cell, "—");
    return;
  }
  const n = r.answers[ep];
  setText(cell, fmtRate(n) + (r.total > 0 ? " (" + pct(n / r.total) + ")" : ""));
}

function renderDrain(cell, profile, ep) {
  // Only servers whose API reports `drained` can drain (older ones show no button), and
  // only a write token may.
  if (typeof ep.drained !== "boolean" || state.role === "read") {
    cell.replaceChildren();
    return;
  }
  let b = cell.querySelector("button");
  if (!b) {
    b = el("button", "drain");
    b.type = "button";
    b.addEventListener("click", () => drain(profile, b.dataset.endpoint, b.dataset.action, b));
    cell.replaceChildren(b);
  }
  const action = ep.drained ? "undrain" : "drain";
  b.dataset.endpoint = ep.name;
  b.dataset.action = action;
  setText(b, ep.drained ? "Undrain" : "Drain");
  b.setAttribute("aria-label", (ep.drained ? "Undrain " : "Drain ") + ep.name + " of " + profile);
}

function renderEvents() {
  const ev = state.events;
  const note = $("events-note");
  if (ev.absent) {
    setText(note, "This server does not keep a list of changes; each endpoint's last change is in its row.");
  } else if (ev.list.length === 0) {
    setText(note, "No changes yet.");
  } else {
    setText(note, "");
  }
  const create = () => {
    const li = document.createElement("li");
    li.className = "event";
    return li;
  };
  const update = (li, e) => {
    if (li.childElementCount) return; // an event never changes
    const time = text("time", utc(new Date(e.time), true), "muted");
    time.dateTime = e.time;
    time.title = e.time;
    li.dataset.kind = e.kind;
    li.append(time, " ", text("span", EVENT_KINDS[e.kind] || e.kind, "kind"), " ");
    li.append(text("span", e.profile + (e.endpoint ? " / " + e.endpoint : ""), "where"));
    if (e.from !== undefined || e.to !== undefined) {
      const from = e.from ?? "—";
      const to = e.to ?? "—";
      li.append(" ");
      if (e.kind === "status") li.append(dot(String(from)));
      li.append(String(from) + " → ");
      if (e.kind === "status") li.append(dot(String(to)));
      li.append(String(to));
    }
    if (e.reason) li.append(" — " + e.reason);
    if (e.by) li.append(text("span", " by " + e.by, "muted"));
  };
  sync($("events"), "li", ev.list, (e) => String(e.seq), create, update);
}

// ---------------------------------------------------------------------------------------
// Actions
// ---------------------------------------------------------------------------------------

function toggleProfile(name) {
  if (state.expanded.has(name)) state.expanded.delete(name);
  else state.expanded.add(name);
  if (state.list) render();
  poll();
}

async function drain(profile, endpoint, action, button) {
  button.disabled = true;
  try {
    const path = profilePath(profile) + "/endpoints/" + encodeURIComponent(endpoint) + "/" + action;
    const r = await api(path, "POST");
    const d = state.details.get(profile);
    const ep = d && d.endpoints.find((e) => e.name === endpoint);
    if (ep) {
      ep.drained = r.drained;
      ep.weight_override = r.weight_override;
    }
    notice("");
    render();
  } catch (e) {
    if (e instanceof AuthError) {
      askForToken("The token was not accepted.");
      return;
    }
    notice("Could not " + action + " " + endpoint + " of " + profile + ": " + e.message);
  } finally {
    button.disabled = false;
  }
  poll();
}

function notice(message) {
  const n = $("notice");
  n.textContent = message;
  n.hidden = !message;
}

function askForToken(message) {
  state.running = false;
  clearTimeout(state.timer);
  state.poll++;
  if (state.token) {
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
  }
  show("login");
  setConn("Token required", false);
  const err = $("token-error");
  err.textContent = message;
  err.hidden = !message;
  $("token").focus();
}

async function submitToken(ev) {
  ev.preventDefault();
  const input = $("token");
  const token = input.value.trim();
  if (!token) return;
  const button = $("token-submit");
  button.disabled = true;
  state.token = token;
  try {
    await api("/api/v1/profiles?limit=0");
    state.role = null;
    sessionStorage.setItem(TOKEN_KEY, token);
    input.value = "";
    $("token-error").hidden = true;
    start();
  } catch (e) {
    state.token = null;
    const err = $("token-error");
    err.textContent = e instanceof AuthError ? "That token was not accepted." : e.message;
    err.hidden = false;
  } finally {
    button.disabled = false;
  }
}

function forgetToken() {
  state.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  location.reload();
}

function start() {
  state.running = true;
  poll();
}

// ---------------------------------------------------------------------------------------
// Filter and pages (kept in the address's #fragment, so a reload or a shared link keeps them)
// ---------------------------------------------------------------------------------------

function loadFilter() {
  const p = new URLSearchParams(location.hash.slice(1));
  state.filter.q = p.get("q") || "";
  state.filter.status = STATUSES.includes(p.get("status")) ? p.get("status") : "";
  state.filter.offset = Math.max(0, parseInt(p.get("offset") || "0", 10) || 0);
  $("filter").value = state.filter.q;
  $("status-filter").value = state.filter.status;
}

function saveFilter() {
  const p = new URLSearchParams();
  if (state.filter.q) p.set("q", state.filter.q);
  if (state.filter.status) p.set("status", state.filter.status);
  if (state.filter.offset) p.set("offset", String(state.filter.offset));
  const hash = p.toString();
  history.replaceState(null, "", hash ? "#" + hash : location.pathname + location.search);
}

function setFilter(change) {
  Object.assign(state.filter, change);
  saveFilter();
  if (state.running) poll();
}

let typing = null;

function wire() {
  $("token-form").addEventListener("submit", submitToken);
  $("forget-token").addEventListener("click", forgetToken);
  // "input" as one types; "change" also covers a value cleared by a script or a tool.
  const typed = (e) => {
    clearTimeout(typing);
    const q = e.target.value.trim();
    if (q !== state.filter.q) typing = setTimeout(() => setFilter({ q, offset: 0 }), 200);
  };
  $("filter").addEventListener("input", typed);
  $("filter").addEventListener("change", typed);
  $("status-filter").addEventListener("change", (e) => setFilter({ status: e.target.value, offset: 0 }));
  $("prev").addEventListener("click", () => setFilter({ offset: Math.max(0, state.filter.offset - PAGE_SIZE) }));
  $("next").addEventListener("click", () => setFilter({ offset: state.filter.offset + PAGE_SIZE }));
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && state.running) poll();
  });
}

// ---------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------

function el(tag, cls) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  return e;
}

function text(tag, content, cls) {
  const e = el(tag, cls);
  e.textContent = content;
  return e;
}

function span(cls, ...children) {
  const e = el("span", cls);
  e.append(...children);
  return e;
}

function dot(status) {
  const d = el("span", "dot st-" + status);
  d.setAttribute("aria-hidden", "true");
  return d;
}

function setBadge(cell, status) {
  cell.replaceChildren(text("span", status, "badge st-" + status));
  cell.dataset.status = status;
}

function setText(node, t) {
  if (node.textContent !== t) node.textContent = t;
}

const intFormat = new Intl.NumberFormat();
const fmtInt = (n) => intFormat.format(n);

function fmtRate(r) {
  if (r === 0) return "0";
  if (r < 10) return r.toFixed(1);
  return fmtInt(Math.round(r));
}

const pct = (share) => Math.round(share * 100) + "%";

/// "04:05:06 UTC", or with `withDate` and a day other than today (UTC),
/// "2026-12-01 04:05:06 UTC": the logs' clock, 24-hour, whatever the browser's zone.
function utc(d, withDate) {
  const iso = d.toISOString();
  const today = new Date().toISOString().slice(0, 10);
  const day = withDate && iso.slice(0, 10) !== today ? iso.slice(0, 10) + " " : "";
  return day + iso.slice(11, 19) + " UTC";
}

function ago(iso) {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.floor(s / 60) + " min ago";
  if (s < 86400) return Math.floor(s / 3600) + " h ago";
  return Math.floor(s / 86400) + " d ago";
}

wire();
loadFilter();
start();
