// holon dashboard: the one script (RFC 0009). No framework, no inline script, no eval.
// Changes are JSON fetches carrying the page's CSRF token; live views follow server-sent events.
// Text from the ledger is only ever put in with textContent: it can never become markup.
"use strict";

(function () {
  const csrf = () => (document.querySelector('meta[name="holon-csrf"]') || {}).content || "";
  const enc = encodeURIComponent;

  function flash(text, isError) {
    const box = document.getElementById("flash");
    if (!box) return;
    box.textContent = text;
    box.className = isError ? "error" : "";
    box.hidden = !text;
  }

  async function send(method, path, body) {
    const response = await fetch(path, {
      method,
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Holon-CSRF": csrf() },
      body: JSON.stringify(body || {}),
    });
    if (!response.ok) {
      let message = response.status + " " + response.statusText;
      try {
        const data = await response.json();
        if (data && data.error) message = data.error.message;
      } catch (e) { /* not JSON */ }
      throw new Error(message);
    }
    return response.status === 204 ? null : response.json();
  }

  function formData(form) {
    const out = {};
    for (const [key, value] of new FormData(form).entries()) {
      if (String(value).trim() !== "") out[key] = String(value);
    }
    return out;
  }

  // --- refreshable fragments (the agents table, an agent's side panels) -----------------------

  const pending = new Map();
  function refresh(element, delayMs) {
    if (!element || pending.has(element)) return;
    pending.set(element, setTimeout(async () => {
      pending.delete(element);
      if (element.contains(document.activeElement) && document.activeElement.tagName !== "BUTTON") {
        refresh(element, 1000); // never replace what the operator is typing into
        return;
      }
      const response = await fetch(element.dataset.refresh, { credentials: "same-origin" });
      if (response.ok) element.innerHTML = await response.text(); // server-rendered, escaped
      if (element.id === "agent-rows") countAgents(element);
    }, delayMs));
  }

  function countAgents(tbody) {
    const count = document.getElementById("agent-count");
    const n = tbody.querySelectorAll("tr[data-agent-id]").length;
    if (count) count.textContent = n + (n === 1 ? " agent" : " agents");
  }

  // --- actions ----------------------------------------------------------------------------------

  const actions = {
    pause: (b) => send("POST", "/ui/agents/" + enc(b.dataset.agent) + "/pause"),
    resume: (b) => send("POST", "/ui/agents/" + enc(b.dataset.agent) + "/resume"),
    abort: (b) => send("POST", "/ui/agents/" + enc(b.dataset.agent) + "/abort"),
    delete: async (b) => {
      if (!window.confirm("Delete agent " + b.dataset.agent + " with its home and schedules?")) return false;
      await send("DELETE", "/ui/agents/" + enc(b.dataset.agent));
      if (document.body.dataset.page === "agent") window.location.assign("/");
      return true;
    },
    "cancel-timer": (b) => send("DELETE", "/ui/agents/" + enc(b.dataset.agent) + "/timers/" + enc(b.dataset.timer)),
    accept: async (b) => {
      await send("POST", "/ui/proposals/" + enc(b.dataset.proposal) + "/accept");
      window.location.reload();
      return false;
    },
    dismiss: async (b) => {
      await send("POST", "/ui/proposals/" + enc(b.dataset.proposal) + "/dismiss", { reason: "dismissed from the dashboard" });
      window.location.reload();
      return false;
    },
    forget: async (b) => {
      if (!window.confirm("Forget this entry? Agents stop recalling it; the ledger keeps its history.")) return false;
      await send("POST", "/ui/memory/durable/" + enc(b.dataset.entry) + "/forget", { reason: "forgotten from the dashboard" });
      window.location.reload();
      return false;
    },
    verify: async () => {
      const out = document.getElementById("verify-result");
      out.textContent = "verifying…";
      const v = await send("POST", "/ui/ledger/verify");
      out.textContent = v.ok ? "intact: " + v.events + " events" : "damaged: " + v.problem;
      out.className = v.ok ? "" : "error";
      return false;
    },
    logout: async () => {
      await send("POST", "/logout");
      window.location.assign("/login");
      return false;
    },
  };

  document.addEventListener("click", async (e) => {
    const button = e.target.closest("button[data-action]");
    if (!button || !(button.dataset.action in actions)) return;
    button.disabled = true;
    try {
      const done = await actions[button.dataset.action](button);
      if (done !== false) {
        flash(button.textContent.trim() + ": done", false);
        const row = button.closest("tr[data-agent-id]");
        const rows = document.getElementById("agent-rows");
        if (row && rows) refreshRows(rows, [row.dataset.agentId], 0);
        else refresh(document.querySelector("[data-refresh]"), 0);
      }
    } catch (err) {
      flash(err.message, true);
    } finally {
      button.disabled = false;
    }
  });

  const forms = {
    "login-form": async (form) => {
      await send("POST", "/login", { token: form.elements.token.value, next: form.dataset.next });
      window.location.assign(form.dataset.next || "/");
    },
    "create-agent": async (form) => {
      const body = formData(form);
      await send("POST", "/ui/agents", body);
      window.location.assign("/agents/" + enc(body.name));
    },
    "message-form": async (form) => {
      const text = form.elements.text.value;
      if (!text.trim()) return;
      await send("POST", "/ui/agents/" + enc(form.dataset.agent) + "/messages", { text });
      form.reset();
    },
    "file-form": async (form) => {
      await send("POST", "/ui/agents/" + enc(form.dataset.agent) + "/memory/file",
        { ref: form.dataset.ref, text: form.elements.text.value });
      window.location.reload();
    },
    "note-form": async (form) => {
      const ref = "file:agent/notes/" + form.elements.name.value.trim().replace(/\.md$/, "") + ".md";
      await send("POST", "/ui/agents/" + enc(form.dataset.agent) + "/memory/file", { ref, text: form.elements.text.value });
      window.location.assign("/agents/" + enc(form.dataset.agent) + "/memory/get?ref=" + enc(ref));
    },
    "timer-form": async (form) => {
      await send("POST", "/ui/agents/" + enc(form.dataset.agent) + "/timers", formData(form));
      form.reset();
      refresh(document.getElementById("agent-side"), 0);
    },
  };

  // Forms that repeat on a page (one per proposal) go by class, not id.
  forms["accept-edit"] = async (form) => {
    await send("POST", "/ui/proposals/" + enc(form.dataset.proposal) + "/accept", { text: form.elements.text.value });
    window.location.reload();
  };

  document.addEventListener("submit", async (e) => {
    const handler = forms[e.target.id] || (e.target.classList.contains("accept-edit") ? forms["accept-edit"] : null);
    if (!handler) return;
    e.preventDefault();
    const button = e.target.querySelector("button[type=submit]");
    if (button) button.disabled = true;
    try {
      flash("", false);
      await handler(e.target);
    } catch (err) {
      flash(err.message, true);
    } finally {
      if (button) button.disabled = false;
    }
  });

  // Enter sends a message, Shift+Enter is a new line.
  document.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && e.target.closest("#message-form textarea")) {
      e.preventDefault();
      e.target.form.requestSubmit();
    }
  });

  // --- the conversation, live -------------------------------------------------------------------

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  const MAX_OUTPUT = 4000;
  function clip(text) {
    text = String(text === undefined || text === null ? "" : text);
    return text.length > MAX_OUTPUT ? text.slice(0, MAX_OUTPUT) + "… (" + text.length + " characters)" : text;
  }

  function item(kind, label, body, seq) {
    const li = el("li", "entry " + kind);
    if (seq !== undefined) li.dataset.seq = seq;
    li.appendChild(el("div", "who", label));
    if (body !== undefined) li.appendChild(body);
    return li;
  }

  function draw(event) {
    const p = event.payload || {};
    switch (event.type) {
      case "message.received":
        return item("in", p.sender + " · " + p.channel, el("div", "text", p.text), event.seq);
      case "turn.started": {
        const li = item("turn", "", undefined, event.seq);
        const link = el("a", "", "turn " + p.turn_id + ": what the model saw");
        link.href = "/agents/" + enc(document.getElementById("conversation").dataset.agent) +
          "/context?turn=" + enc(p.turn_id);
        li.querySelector(".who").appendChild(link);
        return li;
      }
      case "model.responded":
        if (p.error) return item("error", "model error (" + (p.error_kind || "error") + ")", el("div", "text", p.error), event.seq);
        if (!p.content) return null;
        return item("out", "reply · " + p.model, el("div", "text", p.content), event.seq);
      case "tool.called":
        return item("tool", "tool call · " + p.tool, el("pre", "args", clip(p.arguments)), event.seq);
      case "tool.resulted":
        return item("tool result-" + p.status, "tool result · " + p.tool + " · " + p.status, el("pre", "output", clip(p.output)), event.seq);
      case "turn.settled":
        if (p.outcome === "completed" || p.outcome === "waiting") return null;
        return item("error", "turn " + p.outcome, el("div", "text", p.reason || ""), event.seq);
      case "brief.delivered":
        return item("brief", "notice · " + p.kind, el("div", "text", p.text), event.seq);
      default:
        return null;
    }
  }

  function follow(list) {
    const url = new URL(list.dataset.stream, window.location.href);
    url.searchParams.set("after", list.dataset.after);
    const source = new EventSource(url.toString(), { withCredentials: true });
    const side = document.getElementById("agent-side");
    let typing = null; // the reply being generated, shown until its model.responded arrives
    const atBottom = () => window.innerHeight + window.scrollY >= document.body.offsetHeight - 80;
    const add = (node) => {
      const stick = atBottom();
      list.appendChild(node);
      if (stick) node.scrollIntoView({ block: "end" });
    };
    source.addEventListener("event", (message) => {
      const event = JSON.parse(message.data);
      list.dataset.after = event.seq;
      if (event.type === "model.responded" && typing) {
        typing.remove();
        typing = null;
      }
      const node = draw(event);
      if (node) add(node);
      else refresh(side, 300);
      if (event.type === "turn.settled" || event.type === "turn.started") refresh(side, 300);
    });
    source.addEventListener("delta", (message) => {
      const data = JSON.parse(message.data);
      if (!typing) {
        typing = item("out typing", "reply (generating)", el("div", "text", ""));
        add(typing);
      }
      typing.querySelector(".text").textContent += data.text;
    });
    source.addEventListener("model", (message) => {
      const data = JSON.parse(message.data);
      flash(data.what + ": " + data.state, data.state === "failed");
    });
  }

  // The agents table re-renders only the rows of agents whose events arrived (debounced): the
  // daemon renders those rows (and their budget owners') alone; the whole table only when many
  // agents changed at once or a row is missing (a new agent).
  const MAX_ROWS = 200;
  const dirty = new Set();
  let rowsTimer = null;
  function rowOf(tbody, id) {
    return tbody.querySelector('tr[data-agent-id="' + CSS.escape(id) + '"]');
  }
  function refreshRows(tbody, ids, delayMs) {
    ids.forEach((id) => dirty.add(id));
    if (rowsTimer !== null) return;
    rowsTimer = setTimeout(async () => {
      rowsTimer = null;
      const asked = Array.from(dirty);
      dirty.clear();
      if (tbody.contains(document.activeElement) && document.activeElement.tagName !== "BUTTON") {
        refreshRows(tbody, asked, 1000);
        return;
      }
      if (asked.length > MAX_ROWS) {
        refresh(tbody, 0);
        return;
      }
      const url = new URL(tbody.dataset.refresh, window.location.href);
      asked.forEach((id) => url.searchParams.append("agent", id));
      const response = await fetch(url.toString(), { credentials: "same-origin" });
      if (!response.ok) return;
      const fresh = document.createElement("template");
      fresh.innerHTML = await response.text(); // server-rendered, escaped
      const seen = new Set();
      let added = false; // a row the table lacks (a new agent): the whole table, in its order
      for (const tr of Array.from(fresh.content.querySelectorAll("tr[data-agent-id]"))) {
        seen.add(tr.dataset.agentId);
        const old = rowOf(tbody, tr.dataset.agentId);
        if (old) old.replaceWith(tr);
        else added = true;
      }
      // Asked for and not sent: deleted (or holon's own, not shown here).
      asked.filter((id) => !seen.has(id)).forEach((id) => { const old = rowOf(tbody, id); if (old) old.remove(); });
      if (added || !tbody.querySelector("tr")) refresh(tbody, 0);
      else countAgents(tbody);
    }, delayMs);
  }

  function followAll(tbody) {
    const source = new EventSource("/ui/events", { withCredentials: true });
    source.addEventListener("event", (message) => {
      const event = JSON.parse(message.data);
      if (event.agent_id) refreshRows(tbody, [event.agent_id], 500);
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const list = document.getElementById("conversation");
    if (list) follow(list);
    const rows = document.getElementById("agent-rows");
    if (rows) followAll(rows);
  });
})();
