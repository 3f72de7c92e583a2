// The pglease console's page script: plain JavaScript, no build step, no dependency. It renders
// the JSON that /api/events pushes (the same as /api/...; docs/CONSOLE.md) with DOM calls only
// (data is never parsed as HTML), moves the countdowns between pushes with the browser's clock,
// and sends the actions with the console's CSRF token.
"use strict";

const body = document.body;
const base = body.dataset.base;
const view = body.dataset.view;
const csrf = body.dataset.csrf;
const actions = body.dataset.actions === "true";
const params = new URLSearchParams(location.search);

// --- DOM helpers -------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k.startsWith("data-")) e.setAttribute(k, String(v));
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// Replaces `parent`'s children with `children`, leaving out null and undefined (which
// replaceChildren would show as the text "null").
function fill(parent, ...children) {
  parent.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}

function table(headers, rows, cls) {
  return el("table", { class: cls },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

function link(path, query, text) {
  const q = new URLSearchParams(query).toString();
  return el("a", { href: base + path + (q ? "?" + q : "") }, text);
}

function dash(v) {
  return v === null || v === undefined || v === "" ? "—" : v;
}

// --- Durations and countdowns ------------------------------------------------------------------

function human(ms) {
  const a = Math.abs(ms);
  if (a < 10000) return (a / 1000).toFixed(1) + " s";
  if (a < 120000) return Math.round(a / 1000) + " s";
  if (a < 7200000) return Math.round(a / 60000) + " min";
  if (a < 172800000) return Math.round(a / 3600000) + " h";
  return Math.round(a / 86400000) + " d";
}

let received = Date.now();

// A cell that counts down to (or, negative, up from) a moment measured in ms from `received`.
function countdown(ms, cls) {
  if (ms === null || ms === undefined) return el("td", { class: cls }, "—");
  return el("td", { class: cls + " countdown", "data-at": received + ms });
}

// An age that grows: `ms` ago at `received`.
function age(ms, cls) {
  if (ms === null || ms === undefined) return el("td", { class: cls }, "—");
  return el("td", { class: cls + " age", "data-since": received - ms });
}

function tick() {
  const now = Date.now();
  for (const c of document.querySelectorAll(".countdown")) {
    const left = Number(c.dataset.at) - now;
    c.textContent = left >= 0 ? "in " + human(left) : "lapsed " + human(left) + " ago";
    c.classList.toggle("lapsed", left < 0);
  }
  for (const c of document.querySelectorAll(".age")) {
    c.textContent = human(now - Number(c.dataset.since));
  }
  const since = document.getElementById("updated");
  if (since && lastUpdate) since.textContent = "updated " + human(now - lastUpdate) + " ago";
}
setInterval(tick, 200);

// --- Notices and actions -----------------------------------------------------------------------

function notice(text, kind) {
  const n = document.getElementById("notice");
  n.textContent = text || "";
  n.className = kind || "";
  n.hidden = !text;
}

async function act(path, payload, question) {
  if (!confirm(question)) return;
  const r = await fetch(base + path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
    body: JSON.stringify(payload || {}),
    credentials: "same-origin",
  });
  const answer = await r.json().catch(() => ({}));
  if (r.ok) notice("Done: " + JSON.stringify(answer), "ok");
  else notice("Refused (" + r.status + "): " + (answer.message || r.statusText), "error");
}

function button(text, cls, onclick) {
  return el("button", { type: "button", class: cls, onclick }, text);
}

// --- Views -------------------------------------------------------------------------------------

const stateClass = { held: "held", lapsed: "lapsed", free: "free" };

function leaseRow(l) {
  return el("tr", { "data-key": l.key, class: "state-" + stateClass[l.state] },
    el("td", { class: "key" }, link("/lease", { key: l.key }, l.key)),
    el("td", { class: "state" }, l.state),
    el("td", { class: "owner" }, dash(l.owner || (l.last_owner ? "(" + l.last_owner + ")" : null))),
    el("td", { class: "epoch" }, l.epoch),
    countdown(l.expires_in_ms, "expires"),
    el("td", { class: "data" }, dash(l.data)),
    el("td", { class: "waiting" }, l.waiting ? "yes" : ""));
}

// The filter form: drawn once per page, outside what each push redraws, so that what the
// operator types or picks is not taken away by the next push.
function leaseFilters() {
  return el("form", { class: "filters", onsubmit: (e) => {
      e.preventDefault();
      const f = new FormData(e.target);
      const q = new URLSearchParams();
      for (const [k, v] of f) if (v) q.set(k, v);
      if (params.get("limit")) q.set("limit", params.get("limit"));
      location.search = q.toString();
    } },
    el("label", {}, "prefix ", el("input", { name: "prefix", value: params.get("prefix") || "" })),
    el("label", {}, "holder ", el("input", { name: "owner", value: params.get("owner") || "" })),
    el("label", {}, "state ", el("select", { name: "state" },
      ["all", "held", "lapsed", "free"].map((s) =>
        el("option", { value: s, selected: (params.get("state") || "all") === s }, s)))),
    el("button", { type: "submit" }, "Filter"));
}

function renderLeases(d, root) {
  const c = d.counts;
  if (!root.querySelector("form.filters")) {
    root.replaceChildren(el("div", { id: "lease-counts" }), leaseFilters(), el("div", { id: "lease-list" }));
  }
  const pager = el("p", { class: "pager" },
    params.get("after") ? link("/leases", withParams({ after: "" }), "« first page") : null, " ",
    d.next_after ? link("/leases", withParams({ after: d.next_after }), "next page »") : null);
  const purge = actions
    ? button("Purge…", "action purge", () => {
        const older = prompt("Forget keys free or lapsed for longer than (e.g. 1h, 7d):", "7d");
        if (older) act("/api/purge", { older_than: older }, "Purge keys free or lapsed for longer than " + older + "?");
      })
    : null;
  root.querySelector("#lease-counts").replaceChildren(
    el("p", { class: "counts" },
      el("span", { id: "count-held" }, c.held + " held"), " · ",
      el("span", { id: "count-lapsed" }, c.lapsed + " lapsed"), " · ",
      el("span", { id: "count-free" }, c.free + " free"), " · ",
      el("span", {}, c.expiring + " expiring within " + human(c.expiring_within_ms)), " · ",
      el("span", {}, c.waiting + " waited for"), " ", purge));
  root.querySelector("#lease-list").replaceChildren(
    table(["key", "state", "holder", "epoch", "expires", "data", "waiting"],
      d.items.map(leaseRow), "leases"),
    pager);
}

function withParams(changes) {
  const q = new URLSearchParams(params);
  for (const [k, v] of Object.entries(changes)) v ? q.set(k, v) : q.delete(k);
  return Object.fromEntries(q);
}

function renderLease(d, root) {
  const l = d.lease;
  const grants = d.history;
  // The timeline: each grant a bar from its start to its end (now for the current grant).
  const now = Date.now();
  const starts = grants.map((g) => g.granted_at).filter((t) => t !== null);
  const from = starts.length ? Math.min(...starts) : now;
  const span = Math.max(now - from, 1);
  const bars = grants.map((g) => {
    const start = g.granted_at === null ? from : g.granted_at;
    const end = g.ended_at === null ? now : g.ended_at;
    const bar = el("div", { class: "bar " + (g.ended_by || "current") });
    bar.style.left = ((start - from) / span) * 100 + "%";
    bar.style.width = Math.max(((end - start) / span) * 100, 0.5) + "%";
    return el("tr", { "data-epoch": g.epoch },
      el("td", { class: "epoch" }, g.epoch),
      el("td", { class: "owner" }, g.owner),
      el("td", {}, g.granted_at === null ? "before the history" : new Date(g.granted_at).toLocaleString()),
      el("td", { class: "ended" }, g.ended_by ? g.ended_by + (g.ended_at ? " " + new Date(g.ended_at).toLocaleTimeString() : "") : "holding"),
      el("td", { class: "track" }, bar));
  });
  root.replaceChildren(
    el("h2", {}, l.key),
    table(["state", "holder", "epoch", "expires", "data", "waiting"], [
      el("tr", { "data-key": l.key, class: "state-" + stateClass[l.state] },
        el("td", { class: "state" }, l.state),
        el("td", { class: "owner" }, dash(l.owner || (l.last_owner ? "(" + l.last_owner + ")" : null))),
        el("td", { class: "epoch" }, l.epoch),
        countdown(l.expires_in_ms, "expires"),
        el("td", { class: "data" }, dash(l.data)),
        el("td", {}, l.waiting ? "yes" : "no")),
    ], "lease"),
    el("h3", {}, "History (newest first)"),
    grants.length
      ? table(["epoch", "holder", "granted", "ended", "timeline"], bars, "history")
      : el("p", {}, "No grant recorded (the history is off, or was purged)."));
}

function renderSemaphores(d, root) {
  root.replaceChildren(
    d.items.length
      ? table(["semaphore", "held", "slots", "holders"], d.items.map((s) =>
          el("tr", { "data-semaphore": s.name },
            el("td", {}, link("/leases", { prefix: s.name + "#" }, s.name)),
            el("td", { class: "holders" }, s.holders),
            el("td", { class: "slots" }, s.slots),
            el("td", {}, s.owners.join(", ")))), "semaphores")
      : el("p", {}, "No semaphore (keys NAME#N made by acquire_slot / pglease run --limit)."),
    el("p", { class: "hint" }, "The limit is not stored in the database: each caller passes its own; slots are those granted so far."));
}

function renderElections(d, root) {
  if (!d.configured.length) {
    root.replaceChildren(el("p", {}, "No election configured: start the console with --election NAME (or --election 'PREFIX*')."));
    return;
  }
  root.replaceChildren(table(["election", "leader", "term", "data", "leading for", "expires"],
    d.items.map((e) => el("tr", { "data-election": e.name },
      el("td", {}, link("/lease", { key: e.name }, e.name)),
      el("td", { class: "leader" }, dash(e.leader)),
      el("td", { class: "term" }, dash(e.term)),
      el("td", { class: "data" }, dash(e.data)),
      age(e.leading_for_ms, "since"),
      countdown(e.expires_in_ms, "expires"))), "elections"));
}

function sparkline(points) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("viewBox", "0 0 240 40");
  svg.setAttribute("preserveAspectRatio", "none");
  const max = Math.max(1, ...points);
  const path = document.createElementNS(ns, "polyline");
  path.setAttribute("points", points.map((p, i) => (i * 240) / Math.max(points.length - 1, 1) + "," + (38 - (p / max) * 36)).join(" "));
  svg.append(path);
  return svg;
}

function partitionRows(q) {
  return q.partitions.map((p) => el("tr", { "data-queue": q.name, "data-partition": p.partition },
    el("td", {}, p.partition),
    el("td", { class: "owner" }, dash(p.owner)),
    el("td", { class: "epoch" }, dash(p.epoch)),
    countdown(p.expires_in_ms, "expires"),
    el("td", { class: "backlog" }, p.backlog),
    age(p.oldest_age_ms, "oldest"),
    el("td", { class: "batch" }, p.batch_id === null ? "—" : "#" + p.batch_id + " (" + p.batch_size + ")"),
    el("td", { class: "held-back" }, p.held_back_keys),
    el("td", { class: "dead" }, p.dead_letters),
    el("td", {}, actions && p.owner
      ? button("Force release", "action force-release", () =>
          act("/api/queues/" + encodeURIComponent(q.name) + "/partitions/" + p.partition + "/force-release", {},
            "Force-release partition " + p.partition + " of " + q.name + "? Its consumer (" + p.owner + ") is fenced and its open batch goes to the next holder."))
      : "")));
}

function queueCard(q) {
  const rate = q.consumed_per_s.length ? q.consumed_per_s[q.consumed_per_s.length - 1] : null;
  return el("section", { class: "queue", "data-queue": q.name },
    el("h2", {}, link("/queue", { queue: q.name }, q.name)),
    el("p", { class: "summary" },
      el("span", { class: "backlog" }, q.backlog + " pending"), " · ",
      el("span", { class: "dead" }, q.dead_letters + " dead letters"), " · ",
      el("span", { class: "unowned" }, q.holders_visible
        ? q.unowned + " of " + q.partition_count + " partitions without a holder"
        : q.partition_count + " partitions (holders hidden: this role may not consume the queue)"), " · ",
      el("span", { class: "rate" }, rate === null ? "consumed/s: sampling…" : "consumed " + rate.toFixed(1) + "/s")),
    sparkline(q.consumed_per_s),
    table(["partition", "holder", "epoch", "expires", "backlog", "oldest", "open batch", "held back", "dead", ""],
      partitionRows(q), "partitions"));
}

function renderQueues(d, root) {
  root.replaceChildren(...(d.items.length ? d.items.map(queueCard) : [el("p", {}, "No queue.")]));
}

function renderQueue(d, root) {
  const name = params.get("queue");
  const q = d.items.find((x) => x.name === name);
  if (!q) { root.replaceChildren(el("p", {}, "No queue " + name + ".")); return; }
  const dead = d.dead_letters || [];
  const redriveKey = (key) => button("Redrive", "action redrive", () =>
    act("/api/queues/" + encodeURIComponent(name) + "/redrive", { key },
      "Put the dead letters of key " + (key === null ? "(unkeyed)" : key) + " back into " + name + "?"));
  fill(root,
    queueCard(q),
    el("h3", {}, "Dead letters (oldest first)"),
    d.dead_letters_hidden
      ? el("p", { id: "dead-letters-hidden", class: "hint" }, "Hidden: " + d.dead_letters_hidden)
      : dead.length
      ? table(["id", "partition", "key", "attempts", "reason", "died", "payload", ""],
          dead.map((m) => el("tr", { "data-dead-letter": m.id },
            el("td", {}, m.id), el("td", {}, m.partition), el("td", { class: "key" }, dash(m.key)),
            el("td", {}, m.attempts), el("td", { class: "reason" }, dash(m.reason)),
            el("td", {}, new Date(m.dead_at).toLocaleString()),
            el("td", { class: "payload" }, m.payload === undefined ? "(hidden)" : JSON.stringify(m.payload)),
            el("td", {}, actions ? redriveKey(m.key) : ""))),
          "dead-letters")
      : el("p", { id: "no-dead-letters" }, "No dead letter."),
    actions && dead.length ? button("Redrive all", "action redrive-all", () =>
      act("/api/queues/" + encodeURIComponent(name) + "/redrive", {},
        "Put every dead letter of " + name + " back?")) : null);
}

const renderers = {
  leases: renderLeases, lease: renderLease, semaphores: renderSemaphores,
  elections: renderElections, queues: renderQueues, queue: renderQueue,
};

// --- Live updates ------------------------------------------------------------------------------

let source = null;
let lastUpdate = 0;

function streamUrl() {
  const q = new URLSearchParams(params);
  q.set("view", view);
  return base + "/api/events?" + q.toString();
}

// A redraw replaces the view's elements. Under a pressed pointer it would take the button being
// clicked away between press and release (the click would be lost), and it would take away text
// the operator selected (to copy a key, say). While a pointer is down or text in the view is
// selected, the latest push waits; it is drawn once the click has run or the selection is gone.
let pressed = false;
let pending = null;

function draw(data) {
  lastUpdate = received;
  renderers[view](data, document.getElementById("view"));
  body.dataset.updates = String(Number(body.dataset.updates || 0) + 1);
  tick();
}

function selecting() {
  const s = document.getSelection();
  return !!s && !s.isCollapsed && !!s.anchorNode && document.getElementById("view").contains(s.anchorNode);
}

function holding() {
  return pressed || selecting();
}

function flush() {
  setTimeout(() => {
    if (holding() || pending === null) return;
    const data = pending;
    pending = null;
    draw(data);
  }, 0);
}

function released() {
  pressed = false;
  flush();
}

document.addEventListener("pointerdown", () => { pressed = true; }, true);
document.addEventListener("pointerup", released, true);
document.addEventListener("pointercancel", released, true);
document.addEventListener("selectionchange", () => { if (pending !== null) flush(); });
window.addEventListener("blur", () => { if (pressed) released(); });

function connect() {
  source = new EventSource(streamUrl());
  source.addEventListener("view", (e) => {
    received = Date.now();
    const n = document.getElementById("notice");
    if (n.className === "stale") notice("");
    const data = JSON.parse(e.data);
    if (holding()) pending = data;
    else draw(data);
  });
  source.addEventListener("notice", (e) => {
    const d = JSON.parse(e.data);
    notice((d.message || "the database did not answer") + " — showing the last data received.", "stale");
  });
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) notice("Disconnected from the console.", "error");
  };
  document.getElementById("live").textContent = "Pause";
  body.dataset.live = "true";
}

function pause() {
  if (source) source.close();
  source = null;
  document.getElementById("live").textContent = "Resume";
  body.dataset.live = "false";
}

document.getElementById("live").addEventListener("click", () => (source ? pause() : connect()));
connect();
