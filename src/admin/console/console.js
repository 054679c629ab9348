// The operator console (docs/src/operations/console.md): renders the figures pushed on GET /console/stream (server-sent
// events named "status", one JSON object each) and, for operators, sends the operator actions through
// the admin API with the session cookie and the X-CSRF-Token header. Everything that comes from the
// data is set with textContent (never innerHTML), and the page is updated in place, so an open
// dialog or a focused button survives every update. Plain ES2020, no dependency, no build step.
"use strict";

// Every word the console shows, in one place, so that it can be translated later.
const L = {
  live: "live",
  connecting: "connecting…",
  reconnecting: "reconnecting…",
  disconnected: "disconnected, retrying…",
  stale: "no update for a while…",
  updated: "updated",
  signedOut: "Your session has ended.",
  signInAgain: "Sign in again",
  none: "–",
  waitingFirst: "Waiting for the first figures…",
  noRooms: "No rooms are configured.",
  // cluster / upstream / config
  store: "store", node: "node", nodes: "live nodes", up: "store up", lastSync: "last sync",
  yes: "yes", no: "no", down: "DOWN",
  healthyOf: (h, n) => `${h} of ${n} healthy`,
  healthy: "healthy", unhealthy: "unhealthy",
  generation: "generation", lastReload: "last reload", reloadFine: "fine", reloadFailed: "failed",
  // room card
  states: {
    open: "open", paused: "paused", sold_out: "sold out", queue_all: "queue-all", closed: "closed",
    prequeue: "pre-queue", scheduled: "scheduled", running: "running", ended: "ended",
  },
  shadow: (mode) => `${mode} mode`,
  admission: "admission",
  active: "active", ofCap: (cap) => `of ${cap}`, waiting: "waiting", waitingHint: "pre-queue included",
  admittedPerMin: "admitted / min", last30: "last 30 min", thisMinute: "this minute",
  waitEstimate: "wait estimate", approxMin: (n) => `≈ ${n} min`,
  pace: "pace", perMin: (n) => `${n} / min`, configured: (v) => `configured ${v}`,
  allow: "allow", percent: (n) => `${n} %`,
  event: "event", startsIn: "starts in", endsIn: "ends in", startsAt: "starts", endedAt: "ended",
  shuffle: "shuffled at start",
  verifiable: "verifiable draw, commitment",
  serving: "serving", queueNumber: "queue number", inLine: "in line", positionExpiry: "position expiry",
  autopilot: "autopilot", autopilotSteers: (s) => `steers ${s}`, originP95: "origin p95", target: "target",
  noInterval: "no interval yet",
  notice: "notice",
  overrides: "overrides", noOverrides: "no overrides",
  overrideNames: { paused: "paused", sold_out: "sold out", message: "notice", pace: "pace" },
  by: "by", at: "at", until: "until",
  // rate limits
  deniedLastMinute: "denied this minute", noLimits: "No rate-limit rules.",
  // audit
  viaCluster: "via cluster", noAudit: "No actions yet.",
  // actions: button labels, dialog titles and texts, confirm labels, results
  buttons: {
    pause: "Pause", resume: "Resume", admit: "Admit…", pace: "Pace…", serving: "Move serving…",
    message_set: "Notice…", message_clear: "Clear notice", sold_out_set: "Sold out",
    sold_out_clear: "Not sold out", overrides_clear: "Clear overrides",
  },
  confirm: {
    pause: { title: (r) => `Pause room ${r}?`, text: "Nobody new is let in until you resume. The line keeps its order and its pages say it is paused.", ok: "Pause" },
    resume: { title: (r) => `Resume room ${r}?`, text: "Admission restarts at the room's pace.", ok: "Resume" },
    admit: { title: (r) => `Admit visitors to ${r} now?`, text: "Let the next N waiting visitors in now, beyond the per-minute cap (fifo: the oldest; random: drawn).", ok: "Admit" },
    message_set: { title: (r) => `Set the notice of ${r}?`, text: "Shown on every page of the room and in its JSON answers.", ok: "Set notice" },
    message_clear: { title: (r) => `Clear the notice of ${r}?`, text: "The notice disappears from the room's pages.", ok: "Clear notice" },
    sold_out_set: { title: (r) => `Mark ${r} as sold out?`, text: "Nobody new is let in. Waiting visitors see the sold-out page and keep their place.", ok: "Mark sold out" },
    sold_out_clear: { title: (r) => `Mark ${r} as no longer sold out?`, text: "Admission goes back to the room's pace.", ok: "Not sold out" },
    pace: { title: (r) => `Override the pace of ${r}?`, text: "Replaces the configured pace until cleared or until it expires.", ok: "Set pace" },
    overrides_clear: { title: (r) => `Clear every override on ${r}?`, text: "Pause, sold out, notice and pace overrides all end; the room runs on its config again.", ok: "Clear all" },
    serving: { title: (r) => `Move the serving counter of ${r}?`, text: "Everyone whose number is at most the new serving number may enter.", ok: "Move counter" },
  },
  fields: {
    count: "Visitors to admit (1–100000)",
    message: "Notice (at most 500 characters)",
    charsLeft: (n) => `${n} characters left`,
    newUsers: "New users per minute",
    allowPct: "Allow percentage (0–100)",
    for: "For",
    forOptions: [["", "until cleared"], ["15m", "15 minutes"], ["30m", "30 minutes"], ["1h", "1 hour"], ["2h", "2 hours"]],
    incrementBy: "Move forward by",
    servingNow: (s, q) => `Serving now: ${s}, last number given: ${q}`,
  },
  done: (what, room) => `${what}: ${room}`,
  refused: (status) => `Refused (${status})`,
  failed: "Request failed",
  overridesNow: "overrides now",
  noOverridesNow: "no overrides now",
};

const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
const canAct = document.body.dataset.canAct === "true" && !!document.getElementById("tpl-actions");
const nf = new Intl.NumberFormat(navigator.language);
const nf1 = new Intl.NumberFormat(navigator.language, { maximumFractionDigits: 1 });
const timeFmt = new Intl.DateTimeFormat(navigator.language, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
const dateTimeFmt = new Intl.DateTimeFormat(navigator.language, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });

// ---- small helpers ----------------------------------------------------------------------------

const $ = (id) => document.getElementById(id);
const isNum = (v) => typeof v === "number" && Number.isFinite(v);
const num = (v) => (isNum(v) ? nf.format(v) : L.none);
const num1 = (v) => (isNum(v) ? nf1.format(v) : L.none);
const str = (v) => (v === null || v === undefined || v === "" ? L.none : String(v));

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function setText(e, text) {
  const t = String(text);
  if (e.textContent !== t) e.textContent = t;
}

function parseTime(v) {
  if (!v) return null;
  const t = Date.parse(v);
  return Number.isNaN(t) ? null : t;
}

// A time as the operator reads it: the clock time today, with the date otherwise.
function time(v) {
  const t = parseTime(v);
  if (t === null) return str(v);
  const d = new Date(t);
  return d.toDateString() === new Date().toDateString() ? timeFmt.format(d) : dateTimeFmt.format(d);
}

function ago(v) {
  const t = parseTime(v);
  if (t === null) return str(v);
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  return s < 90 ? `${s} s ago` : `${time(v)}`;
}

// 1:02:03 or 4:05 for a number of seconds.
function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  const pad = (n) => String(n).padStart(2, "0");
  if (h >= 48) return `${Math.floor(h / 24)} d ${h % 24} h`;
  return h > 0 ? `${h}:${pad(m)}:${pad(r)}` : `${m}:${pad(r)}`;
}

// A compact one-line rendering of a small JSON value (audit args, override details).
function compact(v) {
  if (v === null || v === undefined) return "";
  if (typeof v !== "object") return String(v);
  const keys = Object.keys(v);
  if (keys.length === 0) return "";
  return keys.map((k) => `${k}=${typeof v[k] === "object" && v[k] !== null ? JSON.stringify(v[k]) : v[k]}`).join(" ");
}

// ---- sparklines -------------------------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";

function sparkline(label) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 120 32");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  const title = document.createElementNS(SVG, "title");
  svg.appendChild(title);
  const area = document.createElementNS(SVG, "polygon");
  area.setAttribute("class", "spark-area");
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("class", "spark-line");
  line.setAttribute("vector-effect", "non-scaling-stroke");
  svg.append(area, line);
  svg._parts = { title, area, line, label, key: "" };
  return svg;
}

function drawSpark(svg, values) {
  const p = svg._parts;
  const vs = Array.isArray(values) ? values.map((v) => (isNum(v) ? v : 0)) : [];
  const key = vs.join(",");
  if (key === p.key) return;
  p.key = key;
  if (vs.length === 0) {
    p.line.setAttribute("points", "");
    p.area.setAttribute("points", "");
    p.title.textContent = `${p.label}: ${L.none}`;
    return;
  }
  const max = Math.max(1, ...vs);
  const step = vs.length > 1 ? 120 / (vs.length - 1) : 0;
  const pts = vs.map((v, i) => `${(i * step).toFixed(1)},${(30 - (v / max) * 28).toFixed(1)}`);
  p.line.setAttribute("points", pts.join(" "));
  p.area.setAttribute("points", `0,32 ${pts.join(" ")} ${((vs.length - 1) * step).toFixed(1)},32`);
  p.title.textContent = `${p.label}: max ${nf.format(Math.max(...vs))}, now ${nf.format(vs[vs.length - 1])}`;
  svg.setAttribute("aria-label", p.title.textContent);
}

// ---- the connection indicator -----------------------------------------------------------------

let lastData = 0;
let source = null;

function setLive(state, text) {
  const live = $("live");
  if (live.dataset.state !== state) live.dataset.state = state;
  setText($("live-text"), text);
}

function connect() {
  if (source) source.close();
  setLive("connecting", lastData ? L.reconnecting : L.connecting);
  source = new EventSource("/console/stream", { withCredentials: true });
  source.onopen = () => setLive("live", L.live);
  source.addEventListener("status", (ev) => {
    let data;
    try {
      data = JSON.parse(ev.data);
    } catch {
      return;
    }
    lastData = Date.now();
    setLive("live", L.live);
    render(data);
  });
  // The server ends the feed with this when the session ends (logout elsewhere, or the
  // operator removed by a reload): stop, and offer to sign in again.
  source.addEventListener("signed_out", () => {
    source.close();
    setLive("down", L.disconnected);
    showBanner(L.signedOut, true);
  });
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) {
      // The server refused the stream (the session may have ended): try again ourselves, and
      // offer to sign in again in case that is why.
      setLive("down", L.disconnected);
      checkSession();
      setTimeout(connect, 5000);
    } else {
      setLive("connecting", L.reconnecting);
    }
  };
}

async function checkSession() {
  try {
    const r = await fetch("/console", { credentials: "same-origin", cache: "no-store" });
    const text = await r.text();
    if (!text.includes('name="csrf-token"')) showBanner(L.signedOut, true);
  } catch {
    // the server is unreachable: the indicator says so already
  }
}

function showBanner(text, withLink) {
  const b = $("banner");
  b.textContent = text;
  if (withLink) {
    b.append(" ");
    const a = el("a", "", L.signInAgain);
    a.href = "/console";
    b.append(a);
  }
  b.hidden = false;
}

// ---- page-level boxes -------------------------------------------------------------------------

// A <dl> with the given [term, value, class] rows, replaced only when it changes.
function fillDl(dl, rows) {
  const key = JSON.stringify(rows);
  if (dl._key === key) return;
  dl._key = key;
  dl.replaceChildren();
  for (const [term, value, cls] of rows) {
    dl.append(el("dt", "", term));
    dl.append(el("dd", cls || "", value));
  }
}

function renderCluster(c) {
  if (!c) {
    fillDl($("cluster"), [[L.store, L.none]]);
    return;
  }
  fillDl($("cluster"), [
    [L.store, str(c.store)],
    [L.up, c.up === true ? L.yes : c.up === false ? L.down : L.none, c.up === false ? "bad" : c.up === true ? "ok" : ""],
    [L.node, str(c.node)],
    [L.nodes, num(c.nodes)],
    [L.lastSync, c.last_sync ? ago(c.last_sync) : L.none],
  ]);
}

function renderUpstream(u) {
  const peers = u && Array.isArray(u.peers) ? u.peers : [];
  const healthy = u && isNum(u.healthy) ? u.healthy : peers.filter((p) => p.healthy).length;
  const sum = $("upstream-summary");
  setText(sum, u ? L.healthyOf(num(healthy), num(peers.length)) : L.none);
  sum.className = "big " + (!u ? "" : healthy === 0 ? "bad" : healthy < peers.length ? "warn" : "ok");
  const ul = $("peers");
  const key = JSON.stringify(peers);
  if (ul._key === key) return;
  ul._key = key;
  ul.replaceChildren();
  for (const p of peers) {
    const li = el("li", p.healthy ? "ok" : "bad");
    li.append(el("span", "dot", ""), el("span", "addr", str(p.addr)), el("span", "muted", p.healthy ? L.healthy : L.unhealthy));
    ul.append(li);
  }
}

function renderConfig(d) {
  const err = d.last_reload_error;
  let errText = L.reloadFine;
  if (err) {
    if (typeof err === "string") errText = `${L.reloadFailed}: ${err}`;
    else errText = `${L.reloadFailed}${err.at ? " " + time(err.at) : ""}: ${str(err.message || err.error || JSON.stringify(err))}`;
  }
  fillDl($("config"), [
    [L.generation, num(d.generation)],
    [L.lastReload, errText, err ? "bad" : "ok"],
  ]);
}

function renderLimits(rules) {
  const ul = $("limits");
  const list = Array.isArray(rules) ? rules : [];
  if (list.length === 0) {
    if (ul._mode !== "empty") {
      ul._mode = "empty";
      ul._rows = new Map();
      ul.replaceChildren(el("li", "muted", L.noLimits));
    }
    return;
  }
  if (ul._mode !== "list") {
    ul._mode = "list";
    ul._rows = new Map();
    ul.replaceChildren();
  }
  const seen = new Set();
  for (const r of list) {
    const name = str(r.name);
    seen.add(name);
    let row = ul._rows.get(name);
    if (!row) {
      const li = el("li", "limit");
      const head = el("div", "limit-head");
      const nm = el("span", "limit-name", name);
      const policy = el("span", "muted limit-policy");
      head.append(nm, policy);
      const spark = sparkline(`${name}: denied per minute`);
      const last = el("span", "limit-last");
      li.append(head, spark, last);
      row = { li, policy, spark, last };
      ul._rows.set(name, row);
    }
    ul.append(row.li); // keeps the server's order
    setText(row.policy, r.policy ? String(r.policy) : "");
    const d = Array.isArray(r.denied_per_minute) ? r.denied_per_minute : [];
    drawSpark(row.spark, d);
    const now = d.length ? d[d.length - 1] : null;
    setText(row.last, `${num(now)} ${L.deniedLastMinute}`);
    row.last.classList.toggle("warn", isNum(now) && now > 0);
  }
  for (const [name, row] of ul._rows) {
    if (!seen.has(name)) {
      row.li.remove();
      ul._rows.delete(name);
    }
  }
}

function renderAudit(audit, clusterActions) {
  const rows = [];
  for (const a of Array.isArray(audit) ? audit : []) rows.push({ ...a, _t: parseTime(a.time) || 0, _via: false });
  for (const c of Array.isArray(clusterActions) ? clusterActions : []) {
    rows.push({ time: c.at, operator: c.by, room: c.room, action: c.summary || c.action, args: c.args, _t: parseTime(c.at) || 0, _via: true });
  }
  rows.sort((a, b) => b._t - a._t);
  const ol = $("audit");
  const key = JSON.stringify(rows);
  if (ol._key === key) return;
  ol._key = key;
  ol.replaceChildren();
  if (rows.length === 0) {
    ol.append(el("li", "muted", L.noAudit));
    return;
  }
  for (const r of rows.slice(0, 100)) {
    const li = el("li", r._via ? "via" : "");
    const t = el("time", "a-time", time(r.time));
    if (r.time) t.dateTime = String(r.time);
    const who = el("span", "a-who", str(r.operator));
    const what = el("span", "a-what");
    what.append(el("strong", "", str(r.action)), document.createTextNode(" "), el("span", "a-room", str(r.room)));
    li.append(t, who, what);
    if (r.source) li.append(el("span", "a-source muted", String(r.source)));
    if (r._via) li.append(el("span", "badge via", L.viaCluster));
    const args = compact(r.args);
    if (args) li.append(el("code", "a-args", args));
    ol.append(li);
  }
}

// ---- room cards -------------------------------------------------------------------------------

const cards = new Map(); // room name -> card parts
let rooms = new Map(); // room name -> the room's latest data

// One figure of a card: a label, a value, and an optional note under it.
function stat(parent, label, field) {
  const box = el("div", "stat");
  const lab = el("div", "stat-label", label);
  const val = el("div", "stat-value", L.none);
  if (field) val.dataset.field = field;
  const note = el("div", "stat-note");
  box.append(lab, val, note);
  parent.append(box);
  return { box, lab, val, note };
}

function buildCard(name) {
  const card = el("article", "card");
  card.dataset.room = name;
  const head = el("header", "card-head");
  const title = el("h3", "room-name", name);
  const pill = el("span", "pill");
  pill.dataset.field = "state";
  const tags = el("span", "tags");
  head.append(title, pill, tags);

  const eventLine = el("p", "event-line");
  eventLine.hidden = true;
  const notice = el("p", "notice");
  notice.setAttribute("role", "note");
  notice.hidden = true;

  const stats = el("div", "stats");
  const active = stat(stats, L.active, "active");
  const bar = el("div", "bar");
  bar.setAttribute("role", "progressbar");
  bar.setAttribute("aria-valuemin", "0");
  bar.setAttribute("aria-label", L.active);
  const barFill = el("span");
  bar.append(barFill);
  active.box.insertBefore(bar, active.note);
  const waiting = stat(stats, L.waiting, "waiting");
  const admitted = stat(stats, L.admittedPerMin, "admitted");
  const spark = sparkline(L.admittedPerMin);
  admitted.box.insertBefore(spark, admitted.note);
  const estimate = stat(stats, L.waitEstimate, "estimate");
  const pace = stat(stats, L.pace, "pace");
  const api = stat(stats, L.serving, "serving");
  const auto = stat(stats, L.autopilot, "autopilot");

  const ovr = el("ul", "overrides");
  ovr.setAttribute("aria-label", L.overrides);

  card.append(head, eventLine, notice, stats, ovr);

  let actions = null;
  if (canAct) {
    actions = $("tpl-actions").content.firstElementChild.cloneNode(true);
    for (const b of actions.querySelectorAll("[data-action]")) {
      b.textContent = L.buttons[b.dataset.action] || b.textContent;
      b.addEventListener("click", () => openAction(name, b.dataset.action, b));
    }
    actions.setAttribute("aria-label", `${name}: actions`);
    card.append(el("div", "grow"), actions);
  }
  return { card, pill, tags, eventLine, notice, active, bar, barFill, waiting, admitted, spark, estimate, pace, api, auto, ovr, actions, event: null };
}

// The room's state: what a visitor arriving now meets.
function roomState(r) {
  if (r.enabled === false) return "closed";
  if (r.paused) return "paused";
  if (r.sold_out) return "sold_out";
  if (r.queue_all) return "queue_all";
  if (r.event && r.event.state === "prequeue") return "prequeue";
  return "open";
}

// "p50 ≈ 4 min · p90 ≈ 9 min", whatever keys the estimate has (per lane too).
function estimateText(est) {
  if (est === null || est === undefined) return [L.none];
  if (isNum(est)) return [L.approxMin(num1(est))];
  if (typeof est !== "object") return [String(est)];
  // one line per plain figure ("p50 ≈ 4 min"), one line per group of figures ("vip: p50 ≈ 1 · p90 ≈ 2 min")
  const parts = [];
  const walk = (o, prefix) => {
    const flat = Object.entries(o).filter(([, v]) => isNum(v) || v === null);
    if (prefix && flat.length === Object.keys(o).length && flat.length > 0) {
      const figs = flat.map(([k, v], i) => `${k} ${isNum(v) ? (i === flat.length - 1 ? L.approxMin(num1(v)) : `≈ ${num1(v)}`) : L.none}`);
      parts.push(`${prefix}: ${figs.join(" · ")}`);
      return;
    }
    for (const [k, v] of Object.entries(o)) {
      const label = prefix ? `${prefix} ${k}` : k;
      if (isNum(v)) parts.push(`${label} ${L.approxMin(num1(v))}`);
      else if (v && typeof v === "object") walk(v, label);
      else parts.push(`${label} ${str(v)}`);
    }
  };
  walk(est, "");
  return parts.length ? parts : [L.none];
}

function overrideText(kind, o) {
  const parts = [L.overrideNames[kind] || kind];
  if (o && typeof o === "object") {
    const rest = {};
    for (const [k, v] of Object.entries(o)) {
      if (!["by", "at", "until", "text"].includes(k)) rest[k] = v;
    }
    if (kind === "pace") {
      if (isNum(rest.new_users_per_minute)) parts.push(L.perMin(num(rest.new_users_per_minute)));
      if (isNum(rest.allow_percentage)) parts.push(L.percent(num1(rest.allow_percentage)));
      delete rest.new_users_per_minute;
      delete rest.allow_percentage;
    }
    const more = compact(rest);
    if (more) parts.push(more);
    if (o.until) parts.push(`${L.until} ${time(o.until)}`);
    if (o.by) parts.push(`${L.by} ${o.by}`);
    if (o.at) parts.push(`${L.at} ${time(o.at)}`);
  }
  return parts.join(" · ");
}

function updateCard(c, r) {
  const state = roomState(r);
  setText(c.pill, L.states[state]);
  if (c.pill.dataset.state !== state) c.pill.dataset.state = state;
  c.card.dataset.state = state;

  // tags: admission and a mode other than enforce
  const tags = [];
  if (r.admission) tags.push([String(r.admission), "tag"]);
  if (r.mode && r.mode !== "enforce") tags.push([L.shadow(r.mode), "tag warn"]);
  const tkey = JSON.stringify(tags);
  if (c.tags._key !== tkey) {
    c.tags._key = tkey;
    c.tags.replaceChildren(...tags.map(([t, cls]) => el("span", cls, t)));
  }

  // the event and its countdown (ticked every second by tick())
  c.event = r.event && typeof r.event === "object" ? r.event : null;
  c.eventLine.hidden = !c.event;
  tickCard(c);

  // the notice
  const msg = r.overrides && r.overrides.message ? r.overrides.message.text : null;
  const text = msg !== null && msg !== undefined ? msg : r.message;
  c.notice.hidden = !text;
  if (text) setText(c.notice, String(text));

  const lottery = r.admission === "lottery";
  // active against the cap, waiting
  c.active.box.hidden = lottery;
  c.waiting.box.hidden = lottery;
  if (!lottery) {
    setText(c.active.val, num(r.active_users));
    setText(c.active.note, isNum(r.total_active_users) ? L.ofCap(num(r.total_active_users)) : "");
    const cap = isNum(r.total_active_users) && r.total_active_users > 0 ? r.total_active_users : null;
    const used = isNum(r.active_users) ? r.active_users : 0;
    const pct = cap ? Math.min(100, (used / cap) * 100) : 0;
    c.barFill.style.width = `${pct.toFixed(1)}%`;
    c.bar.classList.toggle("full", cap !== null && used >= cap);
    c.bar.setAttribute("aria-valuemax", String(cap || 0));
    c.bar.setAttribute("aria-valuenow", String(used));
    c.bar.hidden = !cap;
    setText(c.waiting.val, num(r.waiting_users));
    setText(c.waiting.note, L.waitingHint);
  }

  // admitted per minute
  const hist = r.history && Array.isArray(r.history.admitted_per_minute) ? r.history.admitted_per_minute : [];
  drawSpark(c.spark, hist);
  const nowMin = hist.length ? hist[hist.length - 1] : r.admitted_last_minute;
  setText(c.admitted.val, num(nowMin));
  setText(c.admitted.note, hist.length ? `${L.thisMinute} · ${L.last30}` : "");

  // wait estimate
  c.estimate.box.hidden = lottery && !r.wait_estimate_minutes;
  const est = estimateText(r.wait_estimate_minutes);
  setText(c.estimate.val, est.join("\n"));
  c.estimate.val.classList.toggle("multi", est.length > 1);

  // pace: capacity per minute, or the lottery's allow percentage
  if (lottery) {
    setText(c.pace.lab, L.allow);
    setText(c.pace.val, isNum(r.effective_allow_percentage) ? L.percent(num1(r.effective_allow_percentage)) : L.none);
    const conf = r.allow_percentage;
    setText(c.pace.note, isNum(conf) && conf !== r.effective_allow_percentage ? L.configured(L.percent(num1(conf))) : "");
  } else {
    setText(c.pace.lab, L.pace);
    setText(c.pace.val, isNum(r.effective_new_users_per_minute) ? L.perMin(num(r.effective_new_users_per_minute)) : L.none);
    const conf = r.new_users_per_minute;
    setText(c.pace.note, isNum(conf) && conf !== r.effective_new_users_per_minute ? L.configured(L.perMin(num(conf))) : "");
  }
  c.pace.val.classList.toggle("changed", lottery ? isNum(r.allow_percentage) && r.allow_percentage !== r.effective_allow_percentage : isNum(r.new_users_per_minute) && r.new_users_per_minute !== r.effective_new_users_per_minute);

  // the queue API's numbers
  const api = r.api && typeof r.api === "object" ? r.api : null;
  c.api.box.hidden = !api;
  if (api) {
    setText(c.api.val, num(api.serving_number));
    const inLine = isNum(api.queue_number) && isNum(api.serving_number) ? Math.max(0, api.queue_number - api.serving_number) : null;
    setText(c.api.note, `${L.queueNumber} ${num(api.queue_number)} · ${L.inLine} ${num(inLine)}`);
  }

  // autopilot: value against configured, origin p95 against target
  const ap = r.autopilot && typeof r.autopilot === "object" ? r.autopilot : null;
  c.auto.box.hidden = !ap;
  if (ap) {
    const unit = ap.steers === "allow_percentage" ? L.percent : L.perMin;
    c.auto.box.title = ap.steers ? L.autopilotSteers(String(ap.steers).replace(/_/g, " ")) : "";
    setText(c.auto.val, isNum(ap.value) ? unit(num1(ap.value)) : L.none);
    const li = ap.last_interval;
    const p95 = li && isNum(li.p95_ms) ? li.p95_ms : null;
    const target = isNum(ap.target_latency_ms) ? ap.target_latency_ms : null;
    const parts = [L.configured(isNum(ap.configured) ? unit(num1(ap.configured)) : L.none), p95 === null ? `${L.originP95} ${L.none}` : `${L.originP95} ${num(p95)} ms`, `${L.target} ${target === null ? L.none : num(target) + " ms"}`];
    if (!li) parts.push(L.noInterval);
    if (ap.reason) parts.push(String(ap.reason));
    setText(c.auto.note, parts.join(" · "));
    const over = p95 !== null && target !== null && p95 > target;
    c.auto.box.classList.toggle("over", over);
  }

  // active overrides
  const o = r.overrides && typeof r.overrides === "object" ? r.overrides : {};
  // `version` orders overrides across a cluster; it is no override itself.
  const lines = Object.keys(o).filter((k) => k !== "version" && o[k] !== null && typeof o[k] === "object").map((k) => [k, overrideText(k, o[k])]);
  const okey = JSON.stringify(lines);
  if (c.ovr._key !== okey) {
    c.ovr._key = okey;
    c.ovr.replaceChildren(...lines.map(([k, t]) => {
      const li = el("li", "override", t);
      li.dataset.override = k;
      return li;
    }));
    c.ovr.hidden = lines.length === 0;
  }

  // which buttons apply
  if (c.actions) {
    const show = (action, yes) => {
      const b = c.actions.querySelector(`[data-action="${action}"]`);
      if (b && b.hidden === !!yes) b.hidden = !yes;
    };
    show("pause", !r.paused);
    show("resume", !!r.paused);
    show("sold_out_set", !r.sold_out);
    show("sold_out_clear", !!r.sold_out);
    show("message_clear", !!text);
    show("serving", !!api);
    show("admit", !lottery);
    show("overrides_clear", lines.length > 0);
  }
}

function tickCard(c) {
  const e = c.event;
  if (!e) return;
  const parts = [`${L.event} ${str(e.name)}`, L.states[e.state] || str(e.state)];
  const now = Date.now();
  const start = parseTime(e.starts_at);
  const end = parseTime(e.ends_at);
  if ((e.state === "scheduled" || e.state === "prequeue") && start !== null) {
    parts.push(start > now ? `${L.startsIn} ${duration((start - now) / 1000)}` : `${L.startsAt} ${time(e.starts_at)}`);
  } else if (e.state === "running" && end !== null) {
    parts.push(end > now ? `${L.endsIn} ${duration((end - now) / 1000)}` : `${L.endedAt} ${time(e.ends_at)}`);
  } else if (e.state === "ended" && end !== null) {
    parts.push(`${L.endedAt} ${time(e.ends_at)}`);
  }
  if (e.shuffle_at_start && e.state !== "running" && e.state !== "ended") parts.push(L.shuffle);
  // A verifiable draw's commitment, once published: what visitors note before the start.
  if (e.draw && e.draw.kind === "verifiable" && typeof e.draw.commitment === "string") {
    parts.push(`${L.verifiable} ${str(e.draw.commitment).slice(0, 16)}…`);
  }
  setText(c.eventLine, parts.join(" · "));
  c.eventLine.dataset.state = String(e.state || "");
}

function renderRooms(list) {
  const box = $("rooms");
  const rs = Array.isArray(list) ? list : [];
  rooms = new Map(rs.filter((r) => r && r.name !== undefined).map((r) => [String(r.name), r]));
  const empty = box.querySelector(".empty");
  if (rs.length === 0) {
    if (empty) setText(empty, L.noRooms);
    else box.append(el("p", "empty muted", L.noRooms));
  } else if (empty) {
    empty.remove();
  }
  let i = 0;
  for (const [name, r] of rooms) {
    let c = cards.get(name);
    if (!c) {
      c = buildCard(name);
      cards.set(name, c);
    }
    // keep the server's order without moving cards that are already in place (focus stays)
    if (box.children[i] !== c.card) box.insertBefore(c.card, box.children[i] || null);
    updateCard(c, r);
    i++;
  }
  for (const [name, c] of cards) {
    if (!rooms.has(name)) {
      c.card.remove();
      cards.delete(name);
    }
  }
}

function render(d) {
  if (!d || typeof d !== "object") return;
  renderCluster(d.cluster);
  renderUpstream(d.upstream);
  renderConfig(d);
  renderRooms(d.rooms);
  renderLimits(d.rate_limits);
  renderAudit(d.audit, d.cluster_actions);
  const u = $("updated");
  u.dataset.time = d.time || new Date().toISOString();
  tick();
}

// Every second: the countdowns, and how old the figures are.
function tick() {
  for (const c of cards.values()) tickCard(c);
  const u = $("updated");
  if (lastData) {
    const s = Math.round((Date.now() - lastData) / 1000);
    setText(u, `${L.updated} ${timeFmt.format(new Date(lastData))}`);
    if (s > 6 && $("live").dataset.state === "live") setLive("stale", L.stale);
  }
}

// ---- actions ----------------------------------------------------------------------------------

// How each action is sent: method, path, and its body from the dialog's fields.
const ACTIONS = {
  pause: { method: "POST", path: (r) => `/rooms/${r}/pause` },
  resume: { method: "POST", path: (r) => `/rooms/${r}/resume` },
  admit: { method: "POST", path: (r, f) => `/rooms/${r}/admit?count=${encodeURIComponent(f.count.value)}` },
  message_set: { method: "PUT", path: (r) => `/rooms/${r}/message`, body: (f) => [f.message.value, "text/plain; charset=utf-8"] },
  message_clear: { method: "DELETE", path: (r) => `/rooms/${r}/message` },
  sold_out_set: { method: "PUT", path: (r) => `/rooms/${r}/sold-out` },
  sold_out_clear: { method: "DELETE", path: (r) => `/rooms/${r}/sold-out` },
  pace: {
    method: "PUT",
    path: (r) => `/rooms/${r}/overrides`,
    body: (f) => {
      const o = {};
      if (f.pace.name === "allow_percentage") o.allow_percentage = Number(f.pace.value);
      else o.new_users_per_minute = Number(f.pace.value);
      if (f.for.value) o.for = f.for.value;
      return [JSON.stringify(o), "application/json"];
    },
  },
  overrides_clear: { method: "DELETE", path: (r) => `/rooms/${r}/overrides` },
  serving: {
    method: "POST",
    path: (r) => `/rooms/${r}/serving`,
    body: (f) => [JSON.stringify({ increment_by: Number(f.increment.value) }), "application/json"],
  },
};

let pending = null; // { room, action, button, fields }

function field(label, input, note) {
  const wrap = el("div", "field");
  const id = `f-${input.name}`;
  input.id = id;
  const lab = el("label", "", label);
  lab.htmlFor = id;
  wrap.append(lab, input);
  if (note) wrap.append(note);
  return wrap;
}

function numberInput(name, min, max, value, step) {
  const i = el("input");
  i.type = "number";
  i.name = name;
  i.min = String(min);
  i.max = String(max);
  i.step = String(step || 1);
  i.required = true;
  i.inputMode = step && step < 1 ? "decimal" : "numeric";
  if (value !== null && value !== undefined) i.value = String(value);
  return i;
}

function openAction(room, action, button) {
  const dialog = $("confirm");
  const words = L.confirm[action];
  const spec = ACTIONS[action];
  if (!dialog || !words || !spec) return;
  const r = rooms.get(room) || {};
  setText($("confirm-title"), words.title(room));
  setText($("confirm-text"), words.text);
  setText($("confirm-ok"), words.ok);
  $("confirm-ok").classList.toggle("danger", ["pause", "sold_out_set", "overrides_clear"].includes(action));
  const fieldsBox = $("confirm-fields");
  fieldsBox.replaceChildren();
  const f = {};
  if (action === "admit") {
    f.count = numberInput("count", 1, 100000, 10);
    fieldsBox.append(field(L.fields.count, f.count));
  } else if (action === "message_set") {
    const t = el("textarea");
    t.name = "message";
    t.maxLength = 500;
    t.rows = 3;
    t.required = true;
    const cur = r.overrides && r.overrides.message ? r.overrides.message.text : r.message;
    if (cur) t.value = String(cur);
    const note = el("div", "field-note muted");
    const count = () => setText(note, L.fields.charsLeft(nf.format(500 - t.value.length)));
    t.addEventListener("input", count);
    count();
    f.message = t;
    fieldsBox.append(field(L.fields.message, t, note));
  } else if (action === "pace") {
    if (r.admission === "lottery") {
      f.pace = numberInput("allow_percentage", 0, 100, isNum(r.effective_allow_percentage) ? r.effective_allow_percentage : 100, 0.1);
      fieldsBox.append(field(L.fields.allowPct, f.pace));
    } else {
      f.pace = numberInput("new_users_per_minute", 0, 10000000, isNum(r.effective_new_users_per_minute) ? r.effective_new_users_per_minute : null);
      fieldsBox.append(field(L.fields.newUsers, f.pace));
    }
    const s = el("select");
    s.name = "for";
    for (const [value, label] of L.fields.forOptions) {
      const o = el("option", "", label);
      o.value = value;
      if (value === "30m") o.selected = true;
      s.append(o);
    }
    f.for = s;
    fieldsBox.append(field(L.fields.for, s));
  } else if (action === "serving") {
    f.increment = numberInput("increment_by", 1, 10000000, 100);
    const api = r.api || {};
    const note = el("div", "field-note muted", L.fields.servingNow(num(api.serving_number), num(api.queue_number)));
    fieldsBox.append(field(L.fields.incrementBy, f.increment, note));
  }
  pending = { room, action, button, fields: f };
  dialog.returnValue = "";
  dialog.showModal();
  const first = fieldsBox.querySelector("input, textarea, select");
  (first || $("confirm-ok")).focus();
  if (first && first.select) first.select();
}

async function runAction(p) {
  const spec = ACTIONS[p.action];
  const room = encodeURIComponent(p.room);
  const headers = { "X-CSRF-Token": csrf, Accept: "application/json" };
  let body;
  if (spec.body) {
    const [b, type] = spec.body(p.fields);
    body = b;
    headers["Content-Type"] = type;
  }
  const what = L.confirm[p.action].ok;
  if (p.button) p.button.disabled = true;
  try {
    const res = await fetch(spec.path(room, p.fields), { method: spec.method, headers, body, credentials: "same-origin", cache: "no-store" });
    const text = await res.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = null;
    }
    if (res.ok) {
      toast(`${L.done(what, p.room)} — ${summarize(json, text)}`, "ok");
    } else {
      const why = json && typeof json === "object" ? json.error || json.message || json.summary || text : text;
      toast(`${L.refused(res.status)}: ${String(why || res.statusText).trim()}`, "error");
    }
  } catch (e) {
    toast(`${L.failed}: ${e && e.message ? e.message : e}`, "error");
  } finally {
    if (p.button) p.button.disabled = false;
  }
}

// The answer of a successful action in a few words: its summary or message, else the overrides
// it reports.
function summarize(json, text) {
  if (json === null || json === undefined) return text ? String(text).slice(0, 200) : "OK";
  if (typeof json !== "object") return String(json);
  if (json.summary) return String(json.summary);
  if (typeof json.message === "string" && !json.overrides) return json.message;
  const o = json.overrides && typeof json.overrides === "object" ? json.overrides : json;
  const keys = Object.keys(o).filter((k) => o[k] !== null && o[k] !== undefined && typeof o[k] === "object");
  const names = keys.map((k) => L.overrideNames[k] || k);
  const extra = [];
  if (isNum(json.admitted)) extra.push(`admitted ${nf.format(json.admitted)}`);
  if (isNum(json.serving_number)) extra.push(`serving ${nf.format(json.serving_number)}`);
  const base = names.length ? `${L.overridesNow}: ${names.join(", ")}` : L.noOverridesNow;
  return extra.length ? `${extra.join(", ")}; ${base}` : base;
}

let toastTimer = 0;
function toast(text, kind) {
  const t = $("toast");
  t.textContent = text;
  t.dataset.kind = kind;
  t.dataset.seq = String(Number(t.dataset.seq || 0) + 1);
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, kind === "error" ? 15000 : 8000);
}

function setupDialog() {
  const dialog = $("confirm");
  if (!dialog) return;
  dialog.addEventListener("close", () => {
    const p = pending;
    pending = null;
    if (p && dialog.returnValue === "ok") runAction(p);
    if (p && p.button && p.button.isConnected && !p.button.hidden) p.button.focus();
  });
  // a click on the backdrop cancels
  dialog.addEventListener("click", (e) => {
    if (e.target === dialog) dialog.close("cancel");
  });
}

function setupLogout() {
  const form = $("logout");
  if (!form) return;
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      await fetch("/console/logout", {
        method: "POST",
        headers: { "X-CSRF-Token": csrf, "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ csrf }).toString(),
        credentials: "same-origin",
        redirect: "manual",
      });
    } catch {
      // whatever happened, leave the page: the login form is where to go next
    }
    if (source) source.close();
    window.location.assign("/console");
  });
}

setupDialog();
setupLogout();
connect();
setInterval(tick, 1000);
