// The qvc serve page, for someone debugging a run: threads (searchable by what their messages
// say, status and date), a thread's fork tree, the conversation at a checkpoint (turns, tool calls
// with arguments and results, errors; each checkpoint a point on it), a diff between any two
// checkpoints, and a run's timeline. Plain JS, no build step, no network beyond this server.
// State lives in the URL hash (#t=THREAD&c=CHECKPOINT) so a view can be linked and reloaded.
"use strict";

const $ = (sel) => document.querySelector(sel);
const PAGE = 200;
const state = { repo: null, threads: [], total: 0, searching: false, thread: null, line: null, checkpoint: null,
                cp: null, runId: null, timeline: [], compare: null, picking: false, seq: 0 };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) node.append(c);
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
// A checkpoint id as people read it: the server's shortest unique prefix (`shortid` of the line's
// entries, as `qvc log --oneline` prints it), else its first 12 characters when longer than 16.
const shortIds = new Map();
const shortId = (id) => shortIds.get(id) || (id && id.length > 16 ? id.slice(0, 12) : id || "");
// Numbers as people read them (qvc.readers.statediff.for_people does the same for the command
// line): a time in Unix seconds under a key such as `time`, `created_at`, `update_time` as a date,
// a float duration under `duration`, `latency`, `time_to_first_token` rounded; the JSON keeps both raw.
const EPOCH_KEYS = /(?:^|_)(?:time|timestamp|at)$/;
const DURATION_KEYS = /(?:^|_)(?:duration|elapsed|latency)$|^time_to_/;
function forPeople(key, v) {
  if (typeof key !== "string" || typeof v !== "number" || !isFinite(v)) return undefined;
  if (EPOCH_KEYS.test(key) && v >= 1e9 && v < 4e9) return fullDate(v);
  if (DURATION_KEYS.test(key) && !Number.isInteger(v)) return Math.abs(v) < 100 ? `${v.toFixed(3)}s` : `${v.toFixed(1)}s`;
  return undefined;
}
const readable = (k, v) => forPeople(k, v) ?? v;
const pretty = (v, key) => forPeople(key, v) ?? JSON.stringify(v, readable, 2);
const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

function notice(text, error = false) {
  const n = $("#notice");
  n.hidden = !text;
  n.textContent = text || "";
  n.className = error ? "error" : "";
}

function statusBadge(s) { return s ? el("span", { class: "status " + s }, s) : ""; }

// -- dates: a full date in the reader's local time, the ISO time in a tooltip ------------------

function toDate(t) {
  if (t === null || t === undefined || t === "") return null;
  const d = typeof t === "number" ? new Date(t * 1000) : new Date(t);
  return isNaN(d.getTime()) ? null : d;
}

function fullDate(t) {
  const d = toDate(t);
  return d ? d.toLocaleString(undefined, { weekday: "short", year: "numeric", month: "short", day: "numeric",
                                           hour: "2-digit", minute: "2-digit", second: "2-digit" }) : "";
}

function dateEl(t) {
  const d = toDate(t);
  if (!d) return "";
  const iso = typeof t === "string" ? t : d.toISOString();
  return el("time", { datetime: d.toISOString(), title: iso }, fullDate(d));
}

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

// -- threads and search ----------------------------------------------------------------------

// The day boundaries of the date inputs, in the reader's local time, as `@UNIX` for the server.
function dayBound(value, end) {
  if (!value) return null;
  const d = new Date(value + (end ? "T23:59:59.999" : "T00:00:00"));
  return isNaN(d.getTime()) ? null : "@" + Math.floor(d.getTime() / 1000);
}

let listSeq = 0;
async function loadThreads(append = false) {
  const seq = ++listSeq;  // the last asked wins: an older answer (a slower search) never overwrites it
  const text = $("#search").value.trim();
  const since = dayBound($("#since").value, false), until = dayBound($("#until").value, true);
  const searching = Boolean(text || since || until);
  const q = new URLSearchParams({ offset: append ? state.threads.length : 0, limit: PAGE });
  if ($("#filter").value) q.set("prefix", $("#filter").value);
  if ($("#status").value) q.set("status", $("#status").value);
  if (text) q.set("q", text);
  if (since) q.set("since", since);
  if (until) q.set("until", until);
  let page;
  try {
    page = await api("GET", (searching ? "/api/search?" : "/api/threads?") + q);
  } catch (e) {
    if (seq === listSeq) notice(e.message, true);
    return;
  }
  if (seq !== listSeq) return;
  state.threads = append ? state.threads.concat(page.threads) : page.threads;
  state.total = page.total;
  state.searching = searching;
  renderThreads();
}

function highlight(text, needle) {
  const s = String(text);
  if (!needle) return [s];
  const low = s.toLowerCase(), n = needle.toLowerCase(), out = [];
  let at = 0;
  for (let i = low.indexOf(n); i >= 0 && n; i = low.indexOf(n, at)) {
    out.push(s.slice(at, i), el("mark", {}, s.slice(i, i + n.length)));
    at = i + n.length;
  }
  out.push(s.slice(at));
  return out;
}

function renderThreads() {
  const text = $("#search").value.trim();
  $("#list-info").textContent = state.searching
    ? `${plural(state.total, "thread")} match${state.total === 1 ? "es" : ""}` + (text ? ` “${text}”` : "")
    : `${plural(state.total, "thread")}`;
  const list = $("#threads");
  list.replaceChildren(...state.threads.map((t) => el("li", {
    class: (t.thread === state.thread ? "selected" : "") + (t.matches ? " hit" : ""), "data-thread": t.thread,
    onclick: () => openThread(t.thread),
  }, el("span", { class: "name" }, t.thread),
     el("span", { class: "meta" }, statusBadge(t.status), ` step ${t.step ?? "-"}`,
        t.checkpoints !== undefined && t.checkpoints !== null ? ` · ${plural(t.checkpoints, "checkpoint")}` : "",
        " · ", dateEl(t.updated)),
     t.matches && t.matches.length ? el("ul", { class: "matches" }, ...t.matches.map((m) => el("li", {},
       m.role ? el("span", { class: "role" }, m.role) : el("code", {}, m.path.join(".")), " ",
       ...highlight(m.snippet, text)))) : null)));
  $("#more").hidden = state.threads.length >= state.total;
}

// -- one thread ------------------------------------------------------------------------------

function runOf(thread) {
  if (!thread || !thread.startsWith("run/")) return null;
  const rest = thread.slice(4), cut = rest.lastIndexOf("/");
  return cut > 0 ? rest.slice(cut + 1) : null;
}

// A checkpoint's fields that are its writer's storage records rather than its state, as its viewer
// names them (`records` of /api/checkpoints: a run's `run` and agno's `agno`, the rule `qvc show`
// and `qvc diff` apply too). The page shows the run above its conversation, so its state and
// diffs leave them out (the JSON keeps them).
const shownField = (cp, field) => !(cp && (cp.records || []).includes(field));

async function openThread(thread, checkpoint = null) {
  const same = thread === state.thread;
  if (!same) state.compare = null;
  const following = same && state.line && state.line.thread === thread && state.checkpoint === state.line.head;
  state.thread = thread;
  renderThreads();
  try {
    state.line = await api("GET", "/api/threads/" + enc(thread));
  } catch (e) {
    notice(e.message, true);
    return;
  }
  for (const e of [...state.line.line, ...state.line.superseded.flatMap((s) => s.line)]) if (e.shortid) shortIds.set(e.id, e.shortid);
  $("#empty").hidden = true;
  $("#thread").hidden = false;
  $("#thread-name").textContent = thread;
  const run = state.line.run;
  const head = state.line.line[0];
  $("#thread-info").replaceChildren((run ? `run ${run.run_id} · session ${run.session_id} · ` : "") +
    `${state.line.line.length}${state.line.truncated ? "+" : ""} checkpoint(s) on the line · ` +
    `${state.line.superseded.length} superseded line(s) · ${state.line.forks.length} fork(s)` +
    (head && head.status ? ` · ${head.status}` : "") + " · last ", dateEl(head ? head.time : null));
  state.runId = run ? run.run_id : null;
  // A reader looking at the head follows new checkpoints as they come (live updates).
  const keep = following ? head.commit
    : checkpoint && findNode(checkpoint) ? checkpoint
    : checkpoint && !state.checkpoint ? checkpoint
    : same && state.checkpoint && findNode(state.checkpoint) ? state.checkpoint : head.commit;
  await loadTimeline();
  await selectCheckpoint(keep);
}

function lineNodes() {
  return state.line.line.map((e) => ({ e, superseded: false }))
    .concat(...state.line.superseded.map((s) => s.line.map((e) => ({ e, superseded: true }))));
}

function findNode(commitOrId) {
  if (!state.line) return null;
  return lineNodes().find((n) => n.e.commit === commitOrId || n.e.id === commitOrId) || null;
}

// A checkpoint's number as the command line prints it: RUN@N for a run's (RUN@<short id> for one
// RUN@N names another checkpoint, as `qvc log` abbreviates it), else its step.
const numberOf = (e) => {
  if (!e.name) return `step ${e.step}`;
  const cut = e.name.lastIndexOf("@"), at = e.name.slice(cut + 1);
  return at === String(e.n) ? e.name : e.name.slice(0, cut + 1) + shortId(at);
};

function describe(commit) {
  const n = findNode(commit);
  if (!n) return commit ? commit.slice(0, 10) : "";
  return `${numberOf(n.e)} · ${shortId(n.e.id)}${n.superseded ? " (superseded)" : ""} · ${fullDate(n.e.time)}`;
}

// Click on a checkpoint anywhere: select it, or, after "Compare with…", diff against it.
function pick(commitOrId) {
  if (state.picking) {
    state.picking = false;
    document.body.classList.remove("picking");
    notice("");
    const n = findNode(commitOrId);
    state.compare = n ? n.e.commit : commitOrId;
    fillCompare();
    drawGraph();
    loadDiff();
    return;
  }
  selectCheckpoint(commitOrId);
}

// The fork tree: one row per checkpoint, children above parents (newest first); the line in the
// first column, each superseded line in a column of its own, forks as branches to the right.
function drawGraph() {
  const g = $("#graph");
  const line = state.line;
  if (!line) return;
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
      : `${fullDate(n.e.time)} · ${numberOf(n.e)} · ${shortId(n.e.id)} · ${n.e.source || "put"}${n.e.status ? " · " + n.e.status : ""}` +
        `${n.e.heads.length ? "  (" + n.e.heads.join(", ") + ")" : ""}${n.kind === "superseded" ? "  superseded" : ""}` +
        `${n.kind === "source" ? "  [" + n.e.thread + "]" : ""}`;
    const selected = state.checkpoint && (n.e.commit === state.checkpoint || n.e.id === state.checkpoint);
    const compared = state.compare && n.e.commit === state.compare;
    dots.push(svg("g", { class: `node ${n.kind}${selected ? " selected" : ""}${compared ? " compared" : ""}`,
      "data-commit": n.e.commit, "data-id": n.e.id || "", "data-thread": n.kind === "fork" ? n.fork.thread : n.e.thread,
      onclick: () => (n.kind === "fork" ? openThread(n.fork.thread) : pick(n.e.commit)) },
      svg("title", {}, n.kind === "fork" ? `open thread ${n.fork.thread}` : `${n.e.id}\n${n.e.commit}\n${n.e.time}`),
      svg("circle", { cx: x, cy: y, r: 6, fill, stroke: n.kind === "superseded" ? "#a0a8b2" : fill, "stroke-width": 2 }),
      svg("text", { x: textX, y: y + 4 }, label)));
  }
  g.setAttribute("height", y0 * 2 + Math.max(0, order.length - 1) * rowH);
  g.setAttribute("width", textX + 760);
  g.replaceChildren(...edges, ...dots);
}

// -- a checkpoint ----------------------------------------------------------------------------

async function selectCheckpoint(commitOrId) {
  const seq = ++state.seq;
  state.checkpoint = commitOrId;
  writeHash(state.thread, commitOrId);
  drawGraph();
  let cp;
  try {
    cp = await api("GET", "/api/checkpoints/" + enc(commitOrId));
  } catch (e) {
    notice(e.message, true);
    return;
  }
  if (seq !== state.seq) return;
  state.checkpoint = cp.commit;
  state.cp = cp;
  writeHash(state.thread, cp.commit);
  drawGraph();
  markTimeline();
  $("#checkpoint").hidden = false;
  $("#cp-id").textContent = shortId(cp.id);
  const rows = [["id", cp.id], ["commit", cp.commit], ["thread", cp.thread], ["step", cp.step],
                ["parent", cp.parent ? `${cp.parent.thread} @ ${cp.parent.id}` : "(none)"],
                ["time", dateEl(cp.created_at || cp.time)]];
  if (cp.signature) {  // docs/signing.md: verified (by whom), unsigned, bad, unknown key
    const s = cp.signature;
    rows.push(["signed", el("span", { class: s.status === "verified" ? "sig-ok" : "sig-bad", title: s.reason || s.fingerprint || "" },
                             s.status === "verified" ? `verified: ${s.principal}` : s.status.replace("-", " "))]);
  }
  $("#cp-header").replaceChildren(...rows.flatMap(([k, v]) => [el("dt", {}, k),
    el("dd", { class: "mono" }, typeof v === "object" && v !== null ? v : String(v))]));
  const notes = cp.notes || [];  // what its viewer said: e.g. its framework is not installed here
  $("#cp-notes").hidden = !notes.length;
  $("#cp-notes").textContent = notes.join("\n");
  $("#cp-state").replaceChildren(...Object.entries(cp.state).filter(([k]) => shownField(cp, k)).map(([k, v]) => isConversation(v)
    ? el("div", { class: "field" }, el("code", {}, k), el("span", { class: "dim" }, ` ${plural(v.length, "message")}: the conversation`))
    : el("details", {},
      el("summary", {}, el("code", {}, k), cp.state_versions[k] ? el("span", { class: "dim" }, ` v${cp.state_versions[k]}`) : "",
         " ", el("span", { class: "dim" }, brief(v, 80, k))),
      el("pre", {}, pretty(v, k)))));
  $("#cp-metadata").textContent = pretty(cp.metadata);
  $("#cp-writes").replaceChildren(...(cp.pending_writes.length ? cp.pending_writes.map((w) => el("div", { class: "change" },
    `${w.task} · ${w.channel}: ${brief(w.value, 200)}`)) : [el("p", { class: "dim" }, "None.")]));
  fillCompare();
  await Promise.all([loadDiff(), renderConversation(cp, seq)]);
}

function brief(v, n = 120, key) {
  if (v && typeof v === "object" && !Array.isArray(v) && (v.role || v.type)) {
    const m = norm(v);
    const calls = m.calls.map((c) => `${c.name}(${JSON.stringify(c.args)})`).join(", ");
    v = `${m.role}: ${text(m.content)}${calls ? (text(m.content) ? " " : "") + "calls " + calls : ""}`;
  }
  const s = typeof v === "string" ? v : forPeople(key, v) ?? JSON.stringify(v, readable);
  return s === undefined ? "" : s.length > n ? s.slice(0, n - 1) + "…" : s;
}

// -- diff between any two checkpoints --------------------------------------------------------

function fillCompare() {
  const sel = $("#compare");
  const options = [el("option", { value: "" }, "its parent")];
  for (const n of state.line ? lineNodes() : []) {
    if (n.e.commit === state.checkpoint) continue;
    options.push(el("option", { value: n.e.commit, selected: n.e.commit === state.compare }, describe(n.e.commit)));
  }
  if (state.compare && !options.some((o) => o.value === state.compare)) {
    options.push(el("option", { value: state.compare, selected: true }, state.compare.slice(0, 10)));
  }
  sel.replaceChildren(...options);
}

function fieldSummary(f, conversation) {
  if (typeof f.summary === "string" && f.summary) return f.summary;
  if (f.status !== "changed") return f.status;
  const items = { add: 0, remove: 0, change: 0 };
  let other = 0;
  for (const c of f.changes) {
    if (c.path.length >= 1 && typeof c.path[0] === "number") {
      if (c.path.length === 1) items[c.op] += 1; else items.change += 1;
    } else other += 1;
  }
  const what = conversation ? "message" : "item";
  const parts = [];
  if (items.add) parts.push(`${plural(items.add, what)} added`);
  if (items.remove) parts.push(`${plural(items.remove, what)} removed`);
  if (items.change) parts.push(`${plural(items.change, "change")} inside ${what}s`);
  if (other) parts.push(`${plural(other, "change")}`);
  return parts.join(", ") || "changed";
}

function summaryLine(diff) {
  if (typeof diff.summary === "string" && diff.summary) return diff.summary;
  if (!diff.fields.length) return "No change.";
  const conv = (f) => Boolean(f.summary) || isConversation(state.cp && state.cp.state[f.field]);
  const first = [...diff.fields].sort((x, y) => conv(y) - conv(x));  // the conversation's changes lead
  return `${plural(diff.fields.length, "field")} changed — ` +
    first.map((f) => `${f.field}: ${fieldSummary(f, conv(f))}`).join("; ");
}

async function loadDiff() {
  const b = state.checkpoint;
  if (!b) return;
  const q = new URLSearchParams({ b });
  if (state.compare) q.set("a", state.compare);
  let diff;
  try {
    diff = await api("GET", "/api/diff?" + q);
  } catch (e) {
    notice(e.message, true);
    return;
  }
  if (b !== state.checkpoint) return;
  diff = { ...diff, fields: diff.fields.filter((f) => shownField(state.cp, f.field)) };
  $("#diff-title").textContent = diff.a ? `From ${describe(diff.a)}${state.compare ? "" : " (its parent)"} to ${describe(diff.b)}`
    : "The first checkpoint: everything is new.";
  $("#diff-summary").textContent = summaryLine(diff);
  $("#cp-diff").replaceChildren(...diff.fields.map((f) => el("details", { open: diff.fields.length <= 4 },
    el("summary", {}, el("code", {}, f.field), ` ${fieldSummary(f, isConversation(state.cp && state.cp.state[f.field]))}`),
    ...f.changes.map((c) => {
      const key = c.path.length ? c.path[c.path.length - 1] : f.field;
      return el("div", { class: "change op-" + c.op },
        `${c.op === "add" ? "+" : c.op === "remove" ? "−" : "~"} ${c.path.length ? c.path.join(".") : "(value)"}: ` +
        (c.op === "change" ? `${brief(c.old, 120, key)} → ${brief(c.new, 120, key)}` : brief(c.op === "add" ? c.new : c.old, 120, key)));
    }))));
}

// -- the conversation ------------------------------------------------------------------------

// A conversation field: a list of message dicts carrying "role" (LangChain's plain form, "type",
// is read too), as the shared conversation shape of the viewers.
function isConversation(v) {
  return Array.isArray(v) && v.length > 0 && v.every((m) => m && typeof m === "object" && !Array.isArray(m) && ("role" in m || ("type" in m && "content" in m)));
}

const ROLES = { human: "user", ai: "assistant", tool: "tool", system: "system", AIMessageChunk: "assistant" };
const KNOWN = new Set(["role", "type", "content", "tool_calls", "tool_call_id", "id", "name", "tool_name", "error",
                       "tool_call_error", "time", "created_at", "status"]);

// A tool call in any shape agents write (as qvc.readers.statediff.tool_call reads it): the
// conversation shape's {name, args}, the quick start's {tool, args}, agno's {tool_name, tool_args},
// Anthropic's {name, input}, OpenAI's {function: {name, arguments: "JSON text"}}.
function callOf(c) {
  const f = c && typeof c.function === "object" && c.function ? c.function : {};
  const pick = (keys) => { for (const w of [c || {}, f]) for (const k of keys) if (w[k] !== null && w[k] !== undefined && w[k] !== "") return w[k]; return undefined; };
  let args = pick(["args", "arguments", "input", "tool_args"]) ?? {};
  if (typeof args === "string") {
    try { const parsed = JSON.parse(args); if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) args = parsed; } catch (e) { /* kept as text */ }
  }
  return { id: c && c.id ? c.id : null, name: pick(["name", "tool", "tool_name"]) ?? null, args };
}

function norm(m) {
  const role = m.role || ROLES[m.type] || m.type || "?";
  const calls = (m.tool_calls || []).map(callOf);
  const extra = Object.fromEntries(Object.entries(m).filter(([k, v]) => !KNOWN.has(k) && v !== null && v !== undefined &&
    !(typeof v === "object" && Object.keys(v).length === 0)));
  return { role, content: m.content, calls, toolCallId: m.tool_call_id ?? null, id: m.id ?? null,
           error: m.error === true || m.tool_call_error === true || m.status === "error",
           time: m.time ?? m.created_at ?? null, name: m.name ?? m.tool_name ?? null, extra };
}

function text(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p) => (typeof p === "string" ? p : p && p.type === "text" ? p.text : "")).join("");
  return JSON.stringify(content);
}

function contentEl(content) {
  const needle = $("#search").value.trim();
  if (content === null || content === undefined || content === "") return null;
  if (typeof content === "string") return el("div", { class: "msg-text" }, ...highlight(content, needle));
  if (Array.isArray(content)) {
    return el("div", { class: "msg-text" }, ...content.map((p) => typeof p === "string" ? el("div", {}, ...highlight(p, needle))
      : p && p.type === "text" ? el("div", {}, ...highlight(p.text, needle)) : el("pre", {}, pretty(p))));
  }
  return el("pre", {}, pretty(content));
}

function messageEl(m, results) {
  const head = el("div", { class: "msg-head" }, el("span", { class: "role" }, m.role),
    m.name && m.role !== "tool" ? el("span", { class: "dim" }, ` ${m.name}`) : "", " ", dateEl(m.time));
  const calls = m.calls.map((c) => {
    const r = results.get(c);
    return el("div", { class: "tool-call" + (r && r.error ? " failed" : ""), "data-call-id": c.id || "", "data-name": c.name || "" },
      el("div", { class: "call-head" }, el("span", { class: "tag" }, "tool call"), " ", el("code", { class: "call-name" }, c.name || "?"),
         c.id ? el("span", { class: "dim" }, ` ${c.id}`) : ""),
      el("pre", { class: "args" }, JSON.stringify(c.args).length <= 90 ? JSON.stringify(c.args) : pretty(c.args)),
      r ? el("div", { class: "tool-result" + (r.error ? " error" : "") },
        el("div", { class: "result-head" }, el("span", { class: "tag" }, r.error ? "failed" : "result"), " ", dateEl(r.time)),
        contentEl(r.content))
        : el("div", { class: "tool-result pending dim" }, "no result at this checkpoint"));
  });
  const extra = Object.keys(m.extra).length ? el("details", { class: "extra" }, el("summary", { class: "dim" }, "more"),
    el("pre", {}, pretty(m.extra))) : null;
  return el("li", { class: `msg role-${m.role}${m.error ? " error" : ""}`, "data-role": m.role, "data-id": m.id || "" },
    head, contentEl(m.content), ...calls, extra);
}

// A checkpoint as a point on the conversation: a run's timeline entry, or a thread's log entry
// (`commit` and `source` set, `message_index` its conversation's length there).
function markerEl(e) {
  const selected = state.cp && e.id === state.cp.id;
  const what = e.commit ? `${numberOf(e)} · ${e.source || "put"}` : e.name ? `${e.name} · ${e.reason}` : e.reason;
  return el("li", { class: "marker" + (selected ? " selected" : "") + (e.current === false ? " old" : ""), "data-id": e.id,
                    "data-index": e.message_index, title: `checkpoint ${e.id}`, onclick: () => pick(e.commit || e.id) },
    el("span", { class: "dot" }, "●"), ` checkpoint at message ${e.message_index} · ${what}`,
    e.status ? [" · ", statusBadge(e.status)] : "", " · ", dateEl(e.time || e.created_at));
}

// How long conversation field `name` was at each checkpoint of the line leading to `commit`
// (its latest MARKERS checkpoints; commits never change, so each is asked once).
const MARKERS = 60;
const lengths = new Map();
async function pointsOn(commit, name) {
  const byCommit = new Map(lineNodes().map((n) => [n.e.commit, n]));
  const chain = [];
  for (let n = byCommit.get(commit); n && chain.length < MARKERS; n = byCommit.get(n.e.parents[0])) chain.push(n);
  await Promise.all(chain.map(async (n) => {
    const key = n.e.commit + "\n" + name;
    if (lengths.has(key)) return;
    try {
      const cp = await api("GET", "/api/checkpoints/" + enc(n.e.commit));  // (a graph's input checkpoint lacks the field)
      lengths.set(key, Array.isArray(cp.state[name]) ? cp.state[name].length : 0);
    } catch (e) {
      lengths.set(key, 0);
    }
  }));
  return chain.reverse().map((n) => ({ ...n.e, current: !n.superseded, message_index: lengths.get(n.e.commit + "\n" + name) }));
}

// The messages, each tool call with its result under it, and the checkpoints (`markers`, each at
// its message index) as points between them.
// Each tool call's result (call -> tool message): the one naming the call's id, else (results
// stored without ids, as the quick start's) the tool messages that follow the calling message,
// in order. The results that found their call are shown under it, not on their own.
function pairResults(msgs) {
  const byId = new Map(msgs.filter((m) => m.role === "tool" && m.toolCallId).map((m) => [m.toolCallId, m]));
  const results = new Map();
  const paired = new Set();
  let waiting = [];
  for (const m of msgs) {
    if (m.calls.length) {
      waiting = [];
      for (const c of m.calls) {
        const r = c.id ? byId.get(c.id) : undefined;
        if (r) { results.set(c, r); paired.add(r); } else if (!c.id) waiting.push(c);
      }
    } else if (m.role === "tool" && !m.toolCallId && waiting.length) {
      const c = waiting.shift();
      results.set(c, m);
      paired.add(m);
    } else if (m.role !== "tool") {
      waiting = [];
    }
  }
  return { results, paired };
}

function conversationEls(raw, markers) {
  const msgs = raw.map(norm);
  const { results, paired } = pairResults(msgs);
  const out = [];
  const at = (i) => markers.filter((e) => e.message_index === i).forEach((e) => out.push(markerEl(e)));
  msgs.forEach((m, i) => {
    at(i);
    if (!paired.has(m)) out.push(messageEl(m, results));
  });
  markers.filter((e) => e.message_index >= msgs.length).forEach((e) => out.push(markerEl(e)));
  return out;
}

// The checkpoints of the timeline on the line that leads to checkpoint `id` (oldest first).
function chainTo(id) {
  const byId = new Map(state.timeline.map((e) => [e.id, e]));
  const out = [];
  for (let e = byId.get(id); e && out.length <= state.timeline.length; e = byId.get(e.parent_id)) out.unshift(e);
  return out;
}

async function renderConversation(cp, seq) {
  const runId = runOf(cp.thread);
  $("#run-error").hidden = true;
  let snap = null;
  if (runId) {
    try {
      snap = await api("GET", `/api/runs/${enc(runId)}/checkpoints/${enc(cp.id)}`);
    } catch (e) {
      snap = null;  // named like a run's thread, but not a run's checkpoint: shown from its state below
    }
    if (seq !== state.seq) return;
  }
  if (snap) {
    const run = snap.run;
    $("#conversation-title").textContent = `The run at message ${snap.message_index} (${run.status})`;
    const entry = state.timeline.find((e) => e.id === cp.id);
    $("#conversation-info").replaceChildren(`run ${run.run_id} · ${entry && entry.name ? entry.name + " · " : ""}checkpoint ${shortId(cp.id)}` +
      (entry ? ` · ${entry.reason}` : "") + (snap.current ? "" : " · superseded") + " · ", dateEl(cp.created_at || cp.time));
    if (run.error) {
      const err = run.error;
      $("#run-error").hidden = false;
      $("#run-error").textContent = "Run error: " + (typeof err === "object"
        ? [err.type, err.message].filter(Boolean).join(": ") || JSON.stringify(err) : String(err));
    }
    const markers = runId === state.runId ? chainTo(cp.id) : [];
    $("#conversation").replaceChildren(...conversationEls(run.messages || [], markers));
    return;
  }
  const fields = Object.entries(cp.state).filter(([, v]) => isConversation(v));
  $("#conversation-title").textContent = "Conversation";
  $("#conversation-info").replaceChildren(`at step ${cp.step} · checkpoint ${shortId(cp.id)} · `, dateEl(cp.created_at || cp.time));
  const items = [];
  for (const [name, v] of fields) {
    if (fields.length > 1) items.push(el("li", { class: "field-head" }, el("code", {}, name)));
    const markers = fields.length === 1 && findNode(cp.commit) ? await pointsOn(cp.commit, name) : [];
    if (seq !== state.seq) return;
    items.push(...conversationEls(v, markers));
  }
  $("#conversation").replaceChildren(...(items.length ? items
    : [el("li", { class: "dim" }, "No conversation in this checkpoint's state (its fields are on the right).")]));
}

// -- a run's timeline ------------------------------------------------------------------------

async function loadTimeline() {
  $("#run").hidden = !state.runId;
  state.timeline = [];
  if (!state.runId) return;
  let tl;
  try {
    tl = await api("GET", `/api/runs/${enc(state.runId)}/checkpoints`);
  } catch (e) {
    notice(e.message, true);
    return;
  }
  // in the server's order (qvc.runs.queries.in_order, as `qvc timeline` lists them): each superseded
  // checkpoint right after the checkpoint its line branched from, never after the latest
  state.timeline = tl.checkpoints;
  const ro = state.repo && state.repo.read_only;
  $("#continue-input").disabled = ro;
  $("#timeline tbody").replaceChildren(...tl.checkpoints.map((e) => el("tr", {
    class: "entry" + (e.current ? "" : " old"), "data-id": e.id, "data-index": e.message_index,
    onclick: (ev) => { if (ev.target.tagName !== "BUTTON") pick(e.id); },
  }, el("td", { class: "mono" }, e.current ? "" : "↳ ", String(e.message_index)), el("td", {}, statusBadge(e.status)),
     el("td", { class: "reason" }, e.reason, e.current ? "" : el("div", { class: "superseded-tag" }, "superseded")),
     el("td", { class: "preview" }, e.role ? el("span", { class: "role" }, e.role) : "", e.preview),
     el("td", { class: "dim when" }, dateEl(e.time || e.created_at)),
     el("td", { class: "actions" }, ro || !e.current ? "" : [
       el("button", { type: "button", class: "continue", title: `Continue the run from message ${e.message_index}`,
                      onclick: () => continueFrom(e.message_index) }, "Continue from here"), " ",
       el("button", { type: "button", class: "fork", title: `Fork a new run at message ${e.message_index}`,
                      onclick: () => forkAt(e.message_index) }, "Fork")]))));
  markTimeline();
}

function markTimeline() {
  const id = state.cp && state.cp.commit === state.checkpoint ? state.cp.id : (findNode(state.checkpoint)?.e.id ?? null);
  for (const tr of document.querySelectorAll("#timeline tr.entry")) tr.classList.toggle("selected", tr.dataset.id === id);
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
    const filtered = $("#filter").value || $("#status").value || state.searching;
    if (state.threads.length && !state.threads.some((t) => t.thread === state.thread) && !filtered) {
      notice(`Thread ${state.thread} is gone.`, true);
      state.thread = null;
      $("#thread").hidden = true;
      $("#empty").hidden = false;
      return;
    }
    await openThread(state.thread, state.checkpoint);
  }
}

// One event stream per page, closed when the page is hidden in the back/forward cache (a browser
// keeps about six connections to a server: streams of cached pages would starve the live one).
let source = null;
function listen() {
  const live = $("#live");
  if (source) source.close();
  source = new EventSource("/api/events");
  source.addEventListener("ready", () => { live.className = "live on"; live.textContent = "live"; });
  source.addEventListener("change", () => {
    clearTimeout(pending);
    pending = setTimeout(refresh, 250);
  });
  source.onerror = () => { live.className = "live off"; live.textContent = "reconnecting"; };
}

window.addEventListener("pagehide", () => { if (source) { source.close(); source = null; } });
window.addEventListener("pageshow", (ev) => { if (ev.persisted) { listen(); refresh(); } });

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
  const later = () => { clearTimeout(timer); timer = setTimeout(() => loadThreads(), 200); };
  $("#filter").addEventListener("input", later);
  $("#search").addEventListener("input", later);
  for (const id of ["#status", "#since", "#until"]) $(id).addEventListener("change", () => loadThreads());
  $("#more").addEventListener("click", () => loadThreads(true));
  $("#compare").addEventListener("change", () => { state.compare = $("#compare").value || null; drawGraph(); loadDiff(); });
  const picking = (on) => {
    state.picking = on;
    document.body.classList.toggle("picking", on);
    notice(on ? "Click the checkpoint to compare with (in the fork tree, the conversation or the timeline); Esc cancels." : "");
  };
  $("#pick").addEventListener("click", () => picking(!state.picking));
  document.addEventListener("keydown", (ev) => { if (ev.key === "Escape" && state.picking) picking(false); });
  await loadThreads();
  const h = readHash();
  if (h.t) await openThread(h.t, h.c);
  listen();
}

start();
