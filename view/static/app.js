// The web view of mcp-subagent: the principal's tree of children, live over
// server-sent events, and one child's transcript. No framework: the tree is
// kept as one DOM node per child, updated in place from the server's
// changes, so a tree of thousands costs one render and then only what
// changed.
"use strict";

const token = new URLSearchParams(location.search).get("token") || "";
const q = (extra) => "?token=" + encodeURIComponent(token) + (extra || "");
const $ = (id) => document.getElementById(id);

const nodes = new Map(); // id -> {li, row, kids, data}
let selected = null;     // the id whose transcript is open
let transcript = null;   // its EventSource

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function tokens(u) {
  if (!u) return "—";
  return u.input_tokens + " in / " + u.output_tokens + " out";
}

function cost(u) {
  if (!u || !u.cost_usd) return "—";
  return "$" + u.cost_usd.toFixed(u.cost_usd < 0.01 ? 4 : 2);
}

// fill renders a row's cells from its data; the status is text first
// (colour only repeats it).
function fill(n) {
  const d = n.data;
  const row = n.row;
  row.replaceChildren();
  const status = d.kind === "diagnostic" ? d.reason || "diagnostic" : d.status || "?";
  const st = el("span", "status " + (d.kind === "diagnostic" ? "diagnostic" : status), status);
  st.dataset.status = status;
  const sc = el("span", "st");
  sc.append(st);
  if (d.last_stop_reason && d.status !== "running") {
    sc.append(el("span", "stop" + (d.last_stop_reason === "completed" ? "" : " bad"), d.last_stop_reason));
  }
  const name = el("span", "name");
  name.style.paddingLeft = Math.max(0, (d.depth || 1) - 1) * 1.2 + "em";
  name.append(el("span", "label", d.label || (d.kind === "diagnostic" ? "cannot be read" : "(no label)")));
  name.append(el("span", "id", d.id));
  name.title = d.last_message || "";
  const pm = el("span", "pm", (d.provider || "") + (d.model ? " · " + d.model : ""));
  const depth = el("span", "depth", d.depth ? "d" + d.depth : "");
  const usage = el("span", "usage", tokens(d.usage));
  if (d.tree_usage && d.usage && d.tree_usage.input_tokens !== d.usage.input_tokens) {
    usage.title = "with descendants: " + tokens(d.tree_usage);
  }
  const c = el("span", "cost", cost(d.tree_usage || d.usage));
  row.append(sc, name, pm, depth, usage, c);
  row.dataset.status = status;
  if (selected === d.id) {
    showStatus(d);
    showQuestions(d);
  }
}

function make(d) {
  const li = el("li");
  li.setAttribute("role", "treeitem");
  li.dataset.id = d.id;
  const row = el("div", "row");
  row.dataset.id = d.id;
  const kids = el("ul");
  kids.setAttribute("role", "group");
  li.append(row, kids);
  const n = { li, row, kids, data: d };
  nodes.set(d.id, n);
  row.addEventListener("click", () => open(d.id));
  if (d.id === selected) row.classList.add("sel"); // a reconnect's snapshot keeps the selection
  fill(n);
  return n;
}

// place puts a node under its parent (or at the top level when its
// parent is the principal, or not in the view).
function place(n, root) {
  const p = nodes.get(n.data.parent);
  (p ? p.kids : root).append(n.li);
}

function snapshot(s) {
  nodes.clear();
  const tree = $("tree");
  const frag = document.createDocumentFragment();
  for (const d of s.rows) place(make(d), frag); // parents come before children
  tree.replaceChildren(frag);
  summary(s);
}

function change(c) {
  const tree = $("tree");
  for (const d of c.upsert || []) {
    const n = nodes.get(d.id);
    if (n) {
      n.data = d;
      fill(n);
    } else {
      place(make(d), tree);
    }
  }
  for (const id of c.remove || []) {
    const n = nodes.get(id);
    if (!n) continue;
    // Its children (if any remain) move up rather than vanish.
    for (const k of [...n.kids.children]) tree.append(k);
    n.li.remove();
    nodes.delete(id);
  }
  summary(c);
}

function summary(s) {
  let running = 0, queued = 0, asking = 0, inTok = 0, outTok = 0, usd = 0;
  for (const n of nodes.values()) {
    if (n.data.status === "input_required") asking++;
    if (n.data.status === "running") running++;
    if (n.data.status === "queued") queued++;
    if (n.data.usage) {
      inTok += n.data.usage.input_tokens;
      outTok += n.data.usage.output_tokens;
      usd += n.data.usage.cost_usd || 0;
    }
  }
  $("summary").textContent = s.total + " children · " + running + " running · " + queued + " queued · " +
    (asking ? asking + " asking you · " : "") +
    inTok + " in / " + outTok + " out tokens" + (usd ? " · $" + usd.toFixed(4) : "");
  $("empty").hidden = s.total > 0;
  const om = $("omitted");
  om.hidden = !s.omitted;
  om.textContent = s.omitted ? s.omitted + " older children are not shown (the view shows the newest " + (s.total - s.omitted) + ")" : "";
}

function connectTree() {
  const es = new EventSource("api/tree" + q());
  es.addEventListener("open", () => { $("conn").textContent = "live"; $("conn").className = "conn live"; });
  es.addEventListener("error", () => {
    // The browser retries a dropped stream by itself; a refused one (the
    // daemon restarted: its tokens are new) it gives up on.
    $("conn").textContent = es.readyState === EventSource.CLOSED
      ? "disconnected: the daemon may have restarted; run mcp-subagent ui for a new address"
      : "reconnecting…";
    $("conn").className = "conn";
  });
  es.addEventListener("snapshot", (e) => snapshot(JSON.parse(e.data)));
  es.addEventListener("change", (e) => change(JSON.parse(e.data)));
}

// --- the transcript -------------------------------------------------------

// showStatus shows the open child's status and what may be done to it:
// only its parent may send to it or interrupt it, so a grandchild's
// buttons are off (its own parent, a child, steers it), and only a turn
// running or waiting for a slot can be interrupted.
function showStatus(d) {
  const st = $("dstatus");
  const status = d.status || "?";
  st.textContent = status;
  st.className = "status " + status;
  st.dataset.status = status;
  const n = nodes.get(selected);
  const direct = !n || (n.data.parent || "").startsWith("principal:");
  $("interrupt").disabled = !direct || !(status === "running" || status === "queued");
  $("send").disabled = !direct;
  $("message").disabled = !direct;
  $("message").placeholder = direct ? "message to the child" : "only its parent (a child) may send it messages";
}

// showQuestions shows what the open child asks you, each with a way to
// answer: Allow, Deny and the option words for an approval, a text box for
// a question. Only its parent (you, for a root child) may answer.
function showQuestions(d) {
  const qs = d.questions || [];
  const list = $("qlist");
  const shown = [...list.children].map((li) => li.dataset.question).join(" ");
  if (shown === qs.map((x) => x.id).join(" ")) return; // keep what is being typed
  $("questions").hidden = qs.length === 0;
  const direct = (d.parent || "").startsWith("principal:");
  list.replaceChildren();
  for (const x of qs) {
    const li = el("li");
    li.dataset.question = x.id;
    li.append(el("div", "qtext", x.text));
    const form = el("form");
    const answer = async (text) => {
      try {
        const r = await post("api/answer", { id: d.id, question: x.id, message: text });
        result("answered question " + r.question + ": " + r.answer + " (" + r.outcome + ")");
      } catch (err) {
        result("Error: " + err.message, true);
      }
    };
    if (x.kind === "approval") {
      for (const w of ["allow", "deny", ...(x.choices || [])]) {
        const b = el("button", "answer", w);
        b.type = "button";
        b.dataset.answer = w;
        b.disabled = !direct;
        b.addEventListener("click", () => answer(w));
        form.append(b);
      }
    } else {
      const box = el("input", "answertext");
      box.placeholder = direct ? "your answer" : "only its parent (a child) may answer";
      box.disabled = !direct;
      const b = el("button", "answer", "Answer");
      b.type = "submit";
      b.disabled = !direct;
      form.append(box, b);
    }
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const box = form.querySelector("input");
      if (box && box.value.trim()) answer(box.value);
    });
    li.append(form);
    list.append(li);
  }
}

// entry renders one transcript entry with its source kind spelled out, so
// a report or the runtime's notice never reads as the child's own words.
function entry(e) {
  const out = [];
  const item = (cls, kind, label, text) => {
    const li = el("li", cls);
    li.dataset.kind = kind;
    li.append(el("span", "kind", label));
    if (text) li.append(document.createTextNode(text));
    out.push(li);
    return li;
  };
  const usage = e.usage ? " · " + tokens(e.usage) + (e.usage.cost_usd ? " · " + cost(e.usage) : "") : "";
  switch (e.kind) {
    case "turn/start":
      item("e-turn", "turn-start", "turn " + e.turn + " started");
      break;
    case "turn/end":
      item("e-turn", "turn-end", "turn " + e.turn + " ended: " + (e.stop_reason || "?") + usage, e.diagnostic || "");
      break;
    case "message":
      if (e.role === "assistant") {
        if (e.text) item("e-assistant", "assistant", "child · its own message" + usage, e.text);
        if (e.refusal) item("e-assistant", "refusal", "child · refusal", e.refusal);
        for (const c of e.tool_calls || []) item("e-call", "tool-call", "tool call · " + c.name, c.arguments || "");
        if (!e.text && !e.refusal && !(e.tool_calls || []).length) item("e-assistant", "assistant", "child · (empty message)" + usage);
      } else if (e.role === "tool") {
        item("e-result", "tool-result", "tool result" + (e.tool_call_id ? " · " + e.tool_call_id : ""), e.text);
      } else if (e.role === "user") {
        const src = e.source || "user";
        if (src === "subagent-report") item("e-report", src, "subagent-report · a report from one of its children", e.text);
        else if (src === "subagent-settled") item("e-settled", src, "subagent-settled · the runtime's notice of a child's end", e.text);
        else item("e-user", "user", "parent · " + src, e.text);
      } else {
        item("e-session", e.role || "message", e.role || "message", e.text);
      }
      break;
    default:
      if (e.budget) {
        const b = e.budget, parts = [];
        for (const k of ["tokens", "steps", "seconds", "cost_usd"]) if (b[k]) parts.push(k + " " + b[k]);
        item("e-session", "budget", "budget granted: " + (parts.length ? parts.join(", ") : "unlimited"));
      } else {
        item("e-session", e.kind, e.kind + usage, e.text || "");
      }
  }
  if (e.truncated) for (const li of out) li.append(el("span", "kind", "(cut)"));
  return out;
}

function append(entries) {
  const list = $("entries");
  const atEnd = list.scrollTop + list.clientHeight >= list.scrollHeight - 20;
  const frag = document.createDocumentFragment();
  for (const e of entries) for (const li of entry(e)) frag.append(li);
  list.append(frag);
  if (atEnd) list.scrollTop = list.scrollHeight;
}

function open(id) {
  if (transcript) transcript.close();
  for (const n of nodes.values()) n.row.classList.toggle("sel", n.data.id === id);
  selected = id;
  const n = nodes.get(id);
  $("detail").hidden = false;
  $("dtitle").textContent = (n && n.data.label) || id;
  $("dmeta").textContent = id;
  $("entries").replaceChildren();
  $("actionresult").textContent = "";
  $("qlist").replaceChildren();
  $("questions").hidden = true;
  if (n) {
    showStatus(n.data);
    showQuestions(n.data);
  }
  const es = new EventSource("api/transcript" + q("&id=" + encodeURIComponent(id)));
  transcript = es;
  es.addEventListener("transcript", (e) => {
    const t = JSON.parse(e.data);
    $("dmeta").textContent = [t.id, t.provider, t.model, "depth " + t.depth, "created " + new Date(t.created_at).toLocaleString()]
      .filter(Boolean).join(" · ");
    $("entries").replaceChildren();
    if (t.omitted) $("entries").append(el("li", "e-session", t.omitted + " earlier entries are not shown"));
    append(t.entries);
    showStatus(t);
  });
  es.addEventListener("entries", (e) => {
    const m = JSON.parse(e.data);
    append(m.entries);
    showStatus(m);
  });
  es.addEventListener("error", () => {
    if (es.readyState === EventSource.CLOSED && selected === id) {
      result("this transcript cannot be read", true);
    }
  });
}

function result(text, bad) {
  const r = $("actionresult");
  r.textContent = text;
  r.className = bad ? "err" : "muted";
}

async function post(path, body) {
  const res = await fetch(path + q(), {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  let out = {};
  try { out = await res.json(); } catch (_) { /* not JSON: say the status */ }
  if (!res.ok) throw new Error(out.error || res.status + " " + res.statusText);
  return out;
}

function init() {
  $("close").addEventListener("click", () => {
    if (transcript) transcript.close();
    transcript = null;
    selected = null;
    $("detail").hidden = true;
    for (const n of nodes.values()) n.row.classList.remove("sel");
  });
  $("interrupt").addEventListener("click", async () => {
    if (!selected) return;
    try {
      await post("api/interrupt", { id: selected });
      result("interrupt requested for " + selected);
    } catch (err) {
      result("Error: " + err.message, true);
    }
  });
  $("sendform").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const box = $("message");
    if (!selected || !box.value.trim()) return;
    try {
      const r = await post("api/send", { id: selected, message: box.value });
      result("message " + r.message_id + " sent (" + r.route + ")");
      box.value = "";
    } catch (err) {
      result("Error: " + err.message, true);
    }
  });
  connectTree();
}

init();
