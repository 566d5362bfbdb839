// The qvc serve page: threads, a thread's graph, checkpoints, diffs and run timelines.
// Plain JS, no build step, no network beyond this server. State lives in the URL hash
// (#t=THREAD&c=CHECKPOINT) so a view can be linked and reloaded.
"use strict";

const $ = (sel) => document.querySelector(sel);
const PAGE = 200;
const state = { repo: null, threads: [], total: 0, thread: null, line: null, checkpoint: null, entry: null,
                runId: null, timeline: [] };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c);
  return node;
}

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.setAttribute("class", v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

// The token of the URL qvc serve printed (?token=, kept for this tab): actions need it.
const TOKEN_KEY = "qvc-token";
{
  const t = new URLSearchParams(location.search).get("token");
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
}
function authHeaders() {
  const t = sessionStorage.getItem(TOKEN_KEY);
  return t ? { Authorization: "Bearer " + t } : {};
}

async function api(method, path, body) {
  const opts = { method, headers: authHeaders() };
  if (body !== undefined) { opts.body = JSON.stringify(body); opts.headers["Content-Type"] = "application/json"; }
  const resp = await fetch(path, opts);
  const data = await resp.json().catch(() => ({ error: { message: resp.statusText, status: resp.status } }));
  if (!resp.ok) throw new Error(data.error ? data.error.message : resp.statusText);
  return data;
}

const enc = (s) => encodeURIComponent(s).replace(/%2F/g, "/");
const shortId = (id) => (id && id.length > 16 ? id.slice(0, 12) : id || "");
const when = (ts) => (ts ? new Date(ts * 1000).toLocaleString() : "");
const pretty = (v) => JSON.stringify(v, null, 2);

function notice(text, error = false) {
  const n = $("#notice");
  n.hidden = !text;
  n.textContent = text || "";
  n.className = error ? "error" : "";
}

function statusBadge(s) { return s ? el("span", { class: "status " + s }, s) : ""; }

// -- the URL hash ----------------------------------------------------------------------------

function readHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  return { t: p.get("t"), c: p.get("c") };
}

function writeHash(t, c) {
  const p = new URLSearchParams();
  if (t) p.set("t", t);
  if (c) p.set("c", c);
  const h = "#" + p.toString();
  if (location.hash !== h) history.replaceState(null, "", h);
}

// -- threads ---------------------------------------------------------------------------------

async function loadThreads(append = false) {
  const q = new URLSearchParams({ offset: append ? state.threads.length : 0, limit: PAGE });
  if ($("#filter").value) q.set("prefix", $("#filter").value);
  if ($("#status").value) q.set("status", $("#status").value);
  const page = await api("GET", "/api/threads?" + q);
  state.threads = append ? state.threads.concat(page.threads) : page.threads;
  state.total = page.total;
  renderThreads();
}

function renderThreads() {
  const list = $("#threads");
  list.replaceChildren(...state.threads.map((t) => el("li", {
    class: t.thread === state.thread ? "selected" : "", "data-thread": t.thread, onclick: () => openThread(t.thread),
  }, el("span", { class: "name" }, t.thread),
     el("span", { class: "meta" }, statusBadge(t.status), ` step ${t.step ?? "-"} · ${t.checkpoints ?? "?"} checkpoint(s) · `,
        t.updated ? new Date(t.updated).toLocaleTimeString() : ""))));
  $("#more").hidden = state.threads.length >= state.total;
}

// -- one thread ------------------------------------------------------------------------------

async function openThread(thread, checkpoint = null) {
  state.thread = thread;
  renderThreads();
  try {
    state.line = await api("GET", "/api/threads/" + enc(thread));
  } catch (e) {
    notice(e.message, true);
    return;
  }
  $("#empty").hidden = true;
  $("#thread").hidden = false;
  $("#thread-name").textContent = thread;
  const run = state.line.run;
  const head = state.line.line[0];
  $("#thread-info").textContent = (run ? `run ${run.run_id} · session ${run.session_id} · ` : "") +
    `${state.line.line.length}${state.line.truncated ? "+" : ""} checkpoint(s) on the line · ` +
    `${state.line.superseded.length} superseded line(s) · ${state.line.forks.length} fork(s)` +
    (head && head.status ? ` · ${head.status}` : "");
  state.runId = run ? run.run_id : null;
  const keep = checkpoint || (state.checkpoint && findNode(state.checkpoint) ? state.checkpoint : head.commit);
  await Promise.all([loadTimeline(), selectCheckpoint(keep)]);
}

function findNode(commitOrId) {
  const all = state.line.line.concat(...state.line.superseded.map((s) => s.line));
  return all.find((e) => e.commit === commitOrId || e.id === commitOrId);
}

// The graph: one row per checkpoint, children above parents (newest first); the line in the
// first column, each superseded line in a column of its own, forks as branches to the right.
function drawGraph() {
  const g = $("#graph");
  const line = state.line;
  const nodes = new Map();
  const add = (key, node) => { if (!nodes.has(key)) nodes.set(key, node); };
  line.line.forEach((e) => add(e.commit, { e, col: 0, kind: e.thread === line.thread ? "line" : "source" }));
  line.superseded.forEach((s, i) => s.line.forEach((e) => add(e.commit, { e, col: 1 + i, kind: "superseded" })));
  const forkCol = 1 + line.superseded.length;
  line.forks.forEach((f, i) => add("fork:" + f.thread, { fork: f, col: forkCol + i, kind: "fork",
    e: { commit: "fork:" + f.thread, parents: [f.at], timestamp: (nodes.get(f.at)?.e.timestamp || 0) + 0.5, step: Infinity } }));
  // Topological order, newest first (git log --date-order).
  const children = new Map([...nodes.keys()].map((k) => [k, 0]));
  for (const n of nodes.values()) for (const p of n.e.parents.slice(0, 1)) if (children.has(p)) children.set(p, children.get(p) + 1);
  const ready = [...nodes.keys()].filter((k) => children.get(k) === 0);
  const order = [];
  const newer = (a, b) => (nodes.get(b).e.timestamp - nodes.get(a).e.timestamp) || ((nodes.get(b).e.step ?? 0) - (nodes.get(a).e.step ?? 0));
  while (ready.length) {
    ready.sort(newer);
    const k = ready.shift();
    order.push(k);
    const p = nodes.get(k).e.parents[0];
    if (children.has(p)) { children.set(p, children.get(p) - 1); if (children.get(p) === 0) ready.push(p); }
  }
  const rowH = 26, colW = 22, x0 = 14, y0 = 14;
  const cols = Math.max(1, forkCol + line.forks.length);
  const textX = x0 + cols * colW + 6;
  const row = new Map(order.map((k, i) => [k, i]));
  const pos = (k) => [x0 + nodes.get(k).col * colW, y0 + row.get(k) * rowH];
  const edges = [], dots = [];
  for (const k of order) {
    const n = nodes.get(k);
    const p = n.e.parents[0];
    if (nodes.has(p)) {
      const [x1, y1] = pos(k), [x2, y2] = pos(p);
      const d = x1 === x2 ? `M${x1},${y1} L${x2},${y2}` : `M${x1},${y1} L${x1},${y2 - rowH / 2} Q${x1},${y2} ${x2 + (x1 > x2 ? 8 : -8)},${y2} L${x2},${y2}`;
      edges.push(svg("path", { d, fill: "none", stroke: n.kind === "superseded" ? "#a0a8b2" : n.kind === "fork" ? "#1f6feb" : "#57606a",
        "stroke-width": 2, "stroke-dasharray": n.kind === "superseded" ? "4 3" : "none" }));
    }
    const [x, y] = pos(k);
    const fill = { line: "#57606a", source: "#8c959f", superseded: "#fff", fork: "#1f6feb" }[n.kind];
    const label = n.kind === "fork"
      ? `↳ fork: ${n.fork.thread}${n.fork.run ? " (run " + n.fork.run.run_id + ")" : ""}`
      : `${shortId(n.e.id)}  step ${n.e.step} · ${n.e.source || "put"}${n.e.status ? " · " + n.e.status : ""}` +
        `${n.e.heads.length ? "  (" + n.e.heads.join(", ") + ")" : ""}${n.kind === "superseded" ? "  superseded" : ""}` +
        `${n.kind === "source" ? "  [" + n.e.thread + "]" : ""}`;
    const selected = state.checkpoint && (n.e.commit === state.checkpoint || n.e.id === state.checkpoint);
    dots.push(svg("g", { class: `node ${n.kind}${selected ? " selected" : ""}`, "data-commit": n.e.commit,
      "data-thread": n.kind === "fork" ? n.fork.thread : n.e.thread,
      onclick: () => (n.kind === "fork" ? openThread(n.fork.thread) : selectCheckpoint(n.e.commit)) },
      svg("title", {}, n.kind === "fork" ? `open thread ${n.fork.thread}` : `${n.e.id}\n${n.e.commit}\n${n.e.time}`),
      svg("circle", { cx: x, cy: y, r: 6, fill, stroke: n.kind === "superseded" ? "#a0a8b2" : fill, "stroke-width": 2 }),
      svg("text", { x: textX, y: y + 4 }, label)));
  }
  g.setAttribute("height", y0 * 2 + Math.max(0, order.length - 1) * rowH);
  g.setAttribute("width", textX + 720);
  g.replaceChildren(...edges, ...dots);
}

// -- a checkpoint ----------------------------------------------------------------------------

async function selectCheckpoint(commitOrId) {
  state.checkpoint = commitOrId;
  writeHash(state.thread, commitOrId);
  drawGraph();
  let cp, diff;
  try {
    [cp, diff] = await Promise.all([api("GET", "/api/checkpoints/" + enc(commitOrId)),
                                    api("GET", "/api/diff?b=" + encodeURIComponent(commitOrId))]);
  } catch (e) {
    notice(e.message, true);
    return;
  }
  state.checkpoint = cp.commit;
  writeHash(state.thread, cp.commit);
  drawGraph();
  markTimeline();
  $("#checkpoint").hidden = false;
  $("#cp-id").textContent = shortId(cp.id);
  const dl = $("#cp-header");
  const rows = [["id", cp.id], ["commit", cp.commit], ["thread", cp.thread], ["step", cp.step],
                ["parent", cp.parent ? `${cp.parent.thread} @ ${cp.parent.id}` : "(none)"], ["time", cp.created_at || cp.time]];
  dl.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { class: "mono" }, String(v))]));
  $("#cp-diff").replaceChildren(...(diff.fields.length ? diff.fields.map((f) => el("details", { open: diff.fields.length <= 4 },
    el("summary", {}, el("code", {}, f.field), ` ${f.status} · ${f.changes.length} change(s)`),
    ...f.changes.map((c) => el("div", { class: "change " + c.op },
      `${c.op === "add" ? "+" : c.op === "remove" ? "−" : "~"} ${c.path.length ? c.path.join(".") : "(value)"}: ` +
      (c.op === "change" ? `${brief(c.old)} → ${brief(c.new)}` : brief(c.op === "add" ? c.new : c.old)))))) :
    [el("p", { class: "dim" }, diff.a ? "No change." : "First checkpoint.")]));
  $("#cp-state").replaceChildren(...Object.entries(cp.state).map(([k, v]) => el("details", {},
    el("summary", {}, el("code", {}, k), cp.state_versions[k] ? el("span", { class: "dim" }, ` v${cp.state_versions[k]}`) : "",
       " ", el("span", { class: "dim" }, brief(v, 80))),
    el("pre", {}, pretty(v)))));
  $("#cp-metadata").textContent = pretty(cp.metadata);
  $("#cp-writes").replaceChildren(...(cp.pending_writes.length ? cp.pending_writes.map((w) => el("div", { class: "change" },
    `${w.task} · ${w.channel}: ${brief(w.value, 200)}`)) : [el("p", { class: "dim" }, "None.")]));
}

function brief(v, n = 120) {
  const s = typeof v === "string" ? v : JSON.stringify(v);
  return s === undefined ? "" : s.length > n ? s.slice(0, n - 1) + "…" : s;
}

// -- a run's timeline ------------------------------------------------------------------------

async function loadTimeline() {
  $("#run").hidden = !state.runId;
  if (!state.runId) return;
  let tl;
  try {
    tl = await api("GET", `/api/runs/${enc(state.runId)}/checkpoints`);
  } catch (e) {
    notice(e.message, true);
    return;
  }
  state.timeline = tl.checkpoints;
  const ro = state.repo && state.repo.read_only;
  $("#continue-input").disabled = ro;
  $("#timeline tbody").replaceChildren(...tl.checkpoints.map((e) => el("tr", {
    class: "entry" + (e.current ? "" : " old"), "data-id": e.id, "data-index": e.message_index,
    onclick: (ev) => { if (ev.target.tagName !== "BUTTON") openEntry(e); },
  }, el("td", { class: "mono" }, String(e.message_index)), el("td", {}, statusBadge(e.status)),
     el("td", { class: "reason" }, e.reason, e.current ? "" : el("div", { class: "dim" }, "superseded")),
     el("td", { class: "preview" }, e.role ? el("span", { class: "role" }, e.role) : "", e.preview),
     el("td", { class: "dim when" }, new Date(e.created_at * 1000).toLocaleTimeString()),
     el("td", { class: "actions" }, ro || !e.current ? "" : [
       el("button", { type: "button", class: "continue", title: `Continue the run from message ${e.message_index}`,
                      onclick: () => continueFrom(e.message_index) }, "Continue from here"), " ",
       el("button", { type: "button", class: "fork", title: `Fork a new run at message ${e.message_index}`,
                      onclick: () => forkAt(e.message_index) }, "Fork")]))));
  markTimeline();
}

function markTimeline() {
  const cp = state.checkpoint;
  let id = null;
  if (cp && state.line) { const n = findNode(cp); id = n ? n.e?.id ?? n.id : null; }
  for (const tr of document.querySelectorAll("#timeline tr.entry")) tr.classList.toggle("selected", tr.dataset.id === id);
}

async function openEntry(e) {
  await selectCheckpoint(e.id);
  let snap;
  try {
    snap = await api("GET", `/api/runs/${enc(state.runId)}/checkpoints/${enc(e.id)}`);
  } catch (err) {
    notice(err.message, true);
    return;
  }
  const msgs = snap.run.messages || [];
  $("#snapshot").replaceChildren(el("h3", {}, `The run at message ${snap.message_index} (${snap.run.status})`),
    el("ol", { class: "messages", start: 0 }, ...msgs.map((m) => el("li", {},
      el("span", { class: "role" }, m.role), " ",
      m.tool_calls && m.tool_calls.length ? `calls ${m.tool_calls.map((c) => c.name + "(" + JSON.stringify(c.arguments) + ")").join(", ")}` : brief(m.content, 240)))));
}

async function continueFrom(index) {
  const input = $("#continue-input").value || undefined;
  try {
    const made = await api("POST", `/api/runs/${enc(state.runId)}/continue`, { continue_from: index, input });
    $("#continue-input").value = "";
    const next = made.agent ? "the server's agent is recording it." : "it waits for an agent to take it over.";
    notice(made.forked
      ? `Continued in a new run ${made.run_id}, forked at message ${made.forked_from_message_index} (thread ${made.thread}); ${next}`
      : `Run ${made.run_id} continues in place from message ${made.message_index}; ${next}`);
    await refresh();
  } catch (e) {
    notice(e.message, true);
  }
}

async function forkAt(index) {
  try {
    const made = await api("POST", `/api/runs/${enc(state.runId)}/fork`, { at: index });
    notice(`Forked a new PENDING run ${made.run_id} at message ${made.forked_from_message_index} (thread ${made.thread}).`);
    await refresh();
  } catch (e) {
    notice(e.message, true);
  }
}

// -- live updates ----------------------------------------------------------------------------

let pending = null;
async function refresh() {
  await loadThreads();
  if (state.thread) {
    if (state.threads.length && !state.threads.some((t) => t.thread === state.thread) && !$("#filter").value && !$("#status").value) {
      notice(`Thread ${state.thread} is gone.`, true);
      state.thread = null;
      $("#thread").hidden = true;
      $("#empty").hidden = false;
      return;
    }
    await openThread(state.thread, state.checkpoint);
  }
}

function listen() {
  const live = $("#live");
  const source = new EventSource("/api/events");
  source.addEventListener("ready", () => { live.className = "live on"; live.textContent = "live"; });
  source.addEventListener("change", () => {
    clearTimeout(pending);
    pending = setTimeout(refresh, 250);
  });
  source.onerror = () => { live.className = "live off"; live.textContent = "reconnecting"; };
}

// -- start -----------------------------------------------------------------------------------

async function start() {
  if (new URLSearchParams(location.search).has("token")) history.replaceState(null, "", location.pathname + location.hash);
  try {
    state.repo = await api("GET", "/api/repository");
  } catch (e) {
    notice(e.message, true);
    return;
  }
  $("#repo-path").textContent = state.repo.path;
  $("#read-only").hidden = !state.repo.read_only;
  let timer = null;
  $("#filter").addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => loadThreads(), 200); });
  $("#status").addEventListener("change", () => loadThreads());
  $("#more").addEventListener("click", () => loadThreads(true));
  await loadThreads();
  const h = readHash();
  if (h.t) await openThread(h.t, h.c);
  listen();
}

start();
