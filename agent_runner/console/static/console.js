// The console's page: the list of runs, or one run (its transcript, its live text, and the actions on it).
// Plain DOM and fetch, no build step. Every text from a run (Claude's words, tool inputs and results) goes into the
// page as text nodes, never as HTML: a transcript is untrusted content.
"use strict";

const ENDED = new Set([
  "completed", "max_iterations", "budget_exhausted", "stopped", "cancelled", "failed", "terminated", "timed_out",
]);
const LIST_REFRESH_MS = 5000;

// --- Small helpers ----------------------------------------------------------------------------------------------

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function pretty(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return isNaN(date) ? iso : date.toLocaleString();
}

function flash(message, kind) {
  const box = document.getElementById("flash");
  box.replaceChildren(el("span", { class: `flash ${kind || "info"}`, text: message }));
  clearTimeout(flash.timer);
  if (kind !== "error") flash.timer = setTimeout(() => box.replaceChildren(), 4000);
}

async function api(path, body) {
  const init = { headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    // JSON only: the console refuses any other POST (a form from another page cannot send this content type).
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  let data = null;
  try {
    data = await response.json();
  } catch (_) {
    data = null;
  }
  if (!response.ok) throw new Error((data && data.error) || `${response.status} ${response.statusText}`);
  return data;
}

function badge(status) {
  return el("span", { class: `badge status-${status}`, text: status.replaceAll("_", " ") });
}

function runPath(id) {
  return `/runs/${encodeURIComponent(id)}`;
}

function apiPath(id, tail) {
  return `/api/runs/${encodeURIComponent(id)}${tail || ""}`;
}

// --- The list of runs -------------------------------------------------------------------------------------------

const FILTERS = [
  ["", "All runs"],
  ["approval", "Waiting for approval"],
  ["any", "Waiting for a person"],
];

async function showList() {
  const params = new URLSearchParams(location.search);
  const waiting = params.get("waiting") || "";
  document.title = "Runs · agent-runner console";
  const select = el("select", { id: "filter", "aria-label": "Filter runs" },
    FILTERS.map(([value, label]) => el("option", { value, selected: value === waiting, text: label })));
  select.addEventListener("change", () => {
    const next = new URLSearchParams(location.search);
    if (select.value) next.set("waiting", select.value); else next.delete("waiting");
    history.replaceState(null, "", `${location.pathname}${next.toString() ? "?" + next : ""}`);
    refresh();
  });
  const body = el("tbody");
  const table = el("table", { id: "runs", class: "runs" },
    el("thead", {}, el("tr", {}, ["Run", "Status", "Waiting for", "Turns", "Started", "Ended"].map(
      (h) => el("th", { text: h })))),
    body);
  const summary = el("p", { class: "muted", id: "runs-summary" });
  document.getElementById("main").replaceChildren(
    el("section", { class: "toolbar" },
      el("h1", { text: "Runs" }), select,
      el("button", { type: "button", onclick: () => refresh(), text: "Refresh" })),
    table, summary);

  async function refresh() {
    const query = new URLSearchParams(location.search);
    let data;
    try {
      data = await api(`/api/runs?${query}`);
    } catch (e) {
      summary.textContent = `Could not list runs: ${e.message}`;
      return;
    }
    body.replaceChildren(...data.runs.map((run) => el("tr", { "data-run-id": run.id },
      el("td", {}, el("a", { href: runPath(run.id), class: "run-link", text: run.id })),
      el("td", {}, badge(run.status)),
      el("td", { class: run.waiting ? "waiting" : "" },
        run.waiting || "",
        run.tools && run.tools.length ? el("span", { class: "tools", text: ` (${run.tools.join(", ")})` }) : null,
        run.note ? el("span", { class: "muted note", text: run.note }) : null),
      el("td", { text: run.iterations ?? "" }),
      el("td", { text: when(run.start_time) }),
      el("td", { text: when(run.close_time) }))));
    summary.textContent = data.runs.length ? `${data.runs.length} run(s)` : "No runs here.";
  }

  await refresh();
  setInterval(refresh, LIST_REFRESH_MS);
}

// --- One run: the transcript ------------------------------------------------------------------------------------

function renderContent(content) {
  if (typeof content === "string") return [el("div", { class: "text", text: content })];
  if (!Array.isArray(content)) return [el("pre", { text: pretty(content) })];
  return content.map(renderBlock);
}

function renderBlock(block) {
  switch (block.type) {
    case "text":
      return el("div", { class: "text", text: block.text });
    case "thinking":
      return el("details", { class: "thinking" }, el("summary", { text: "thinking" }),
        el("div", { class: "text", text: block.thinking }));
    case "redacted_thinking":
      return el("div", { class: "muted", text: "[redacted thinking]" });
    case "tool_use":
    case "server_tool_use":
      return el("div", { class: "tool-use", "data-tool-use-id": block.id },
        el("div", { class: "tool-head" }, el("strong", { text: `→ ${block.name}` }),
          el("span", { class: "muted", text: ` ${block.id}` })),
        el("pre", { text: pretty(block.input) }));
    case "tool_result":
      return el("div", { class: `tool-result${block.is_error ? " error" : ""}`, "data-tool-use-id": block.tool_use_id },
        el("div", { class: "tool-head" },
          el("strong", { text: block.is_error ? "← error" : "← result" }),
          el("span", { class: "muted", text: ` ${block.tool_use_id}` })),
        ...(block.content === undefined ? [] : renderContent(block.content)));
    case "image":
    case "document":
      return el("div", { class: "muted", text: `[${block.type}]` });
    default:
      return el("pre", { class: "other-block", text: pretty(block) });
  }
}

function renderTranscript(messages) {
  let turn = 0;
  return messages.map((message, index) => {
    const label = message.role === "assistant" ? `Claude · turn ${++turn}` : message.role;
    return el("article", { class: `message role-${message.role}`, "data-index": index },
      el("header", { class: "message-head", text: label }),
      ...renderContent(message.content));
  });
}

// --- One run: the page ------------------------------------------------------------------------------------------

async function showRun(id) {
  document.title = `${id} · agent-runner console`;
  const head = el("section", { class: "run-head", id: "run-head" });
  const approvals = el("section", { class: "approvals", id: "approvals" });
  const conversation = el("section", { class: "conversation", id: "transcript" });
  const live = el("section", { class: "live", id: "live" }, el("h2", { text: "Live" }));
  const log = el("ol", { class: "event-log", id: "event-log" });
  const actions = el("section", { class: "actions", id: "actions" });
  document.getElementById("main").replaceChildren(
    el("p", {}, el("a", { href: "/", text: "← all runs" })),
    head, approvals,
    el("div", { class: "columns" },
      el("div", {}, el("h2", { text: "Conversation" }), conversation),
      el("div", {}, live, el("h2", { text: "Events" }), log)),
    actions);

  const state = { run: null, source: null, reloadTimer: null, attempts: new Map() };

  async function load() {
    let data;
    try {
      data = await api(apiPath(id));
    } catch (e) {
      head.replaceChildren(el("h1", { text: id }), el("p", { class: "error", text: e.message }));
      return;
    }
    state.run = data;
    renderHead(data);
    renderApprovals(data);
    conversation.replaceChildren(...renderTranscript(data.transcript.messages), ...renderUnfinished(data.unfinished));
    renderActions(data);
    if (!state.source && !ENDED.has(data.status.status)) {
      if (data.events_offset !== null) follow(data.events_offset);
      else live.append(el("p", { class: "muted", text: "The run's live events cannot be read now; refresh later." }));
    }
  }

  // An ended run's tool calls that had not completed when it ended: the conversation ends with the others' results.
  function renderUnfinished(calls) {
    if (!calls || !calls.length) return [];
    const names = calls.map((call) => `${call.name} (${call.tool_use_id})`).join(", ");
    return [el("p", { class: "note unfinished", id: "unfinished",
      text: `The run ended before these tool calls completed: ${names}.` })];
  }

  function reloadSoon() {
    clearTimeout(state.reloadTimer);
    state.reloadTimer = setTimeout(load, 150);
  }

  function renderHead(data) {
    const s = data.status;
    const facts = [
      ["Status", badge(s.status)],
      ["Turns", s.iterations],
      ["Tokens", `${s.usage.input_tokens} in · ${s.usage.output_tokens} out`],
      s.cost_usd !== null ? ["Cost", `$${s.cost_usd.toFixed(4)}`] : null,
      ["Transcript version", data.transcript.version ?? s.version ?? "unknown"],
      s.stop_reason ? ["Stop reason", s.stop_reason] : null,
      s.stop_reason_detail ? ["Detail", s.stop_reason_detail] : null,
      s.last_error ? ["Retrying after", el("span", { class: "error", text: s.last_error })] : null,
    ].filter(Boolean);
    head.replaceChildren(
      el("h1", { id: "run-id", text: data.id }),
      el("dl", { class: "facts" }, facts.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)])));
  }

  function isBudgetRequest(call) {
    return call.name === "budget" && /^budget_[0-9]+$/.test(call.tool_use_id);
  }

  function suggestedLimits(budget) {
    const limits = {};
    for (const key of ["max_input_tokens", "max_output_tokens", "max_cost_usd"]) {
      if (budget[key]) limits[key] = budget[key] * 2;
    }
    return Object.keys(limits).length ? limits : { max_output_tokens: 20000 };
  }

  function renderApprovals(data) {
    const pending = data.status.pending_approvals;
    if (!pending.length) {
      approvals.replaceChildren();
      return;
    }
    approvals.replaceChildren(el("h2", { text: "Waiting for approval" }), ...pending.map((call) => {
      const original = pretty(call.input);
      const input = el("textarea", { class: "approval-input", rows: Math.min(12, original.split("\n").length + 1),
        "aria-label": `Input for ${call.name}`, spellcheck: "false" });
      // A run asking for more budget goes on only with new limits: offer twice its token and cost limits.
      input.value = isBudgetRequest(call) ? pretty(suggestedLimits(call.input)) : original;
      const reason = el("input", { type: "text", class: "deny-reason", placeholder: "Reason (Claude sees it)",
        "aria-label": "Reason for denying" });
      const approve = el("button", { type: "button", class: "approve primary", text: "Approve" });
      const deny = el("button", { type: "button", class: "deny danger", text: "Deny" });
      approve.addEventListener("click", async () => {
        let body = { tool_use_id: call.tool_use_id };
        if (input.value !== original) {
          try {
            body.input = JSON.parse(input.value);
          } catch (e) {
            flash(`The input is not JSON: ${e.message}`, "error");
            return;
          }
        }
        await act("approve", body, `Approved ${call.name}${body.input ? " with edited input" : ""}.`);
      });
      deny.addEventListener("click", () => act("deny", { tool_use_id: call.tool_use_id, reason: reason.value || null },
        `Denied ${call.name}.`));
      return el("div", { class: "approval", "data-tool-use-id": call.tool_use_id },
        el("div", { class: "tool-head" }, el("strong", { text: call.name }),
          el("span", { class: "muted", text: ` ${call.tool_use_id} · turn ${call.iteration} · since ${when(call.requested_at)}` })),
        call.note ? el("p", { class: "note", text: call.note }) : null,
        input, el("div", { class: "row" }, approve, reason, deny));
    }));
  }

  function renderActions(data) {
    const ended = ENDED.has(data.status.status);
    const message = el("textarea", { id: "inject-text", rows: 2, placeholder: "A message for Claude before its next turn",
      "aria-label": "Message to inject" });
    const forkTurn = el("input", { type: "number", id: "fork-turn", min: 1, value: Math.max(1, data.status.iterations),
      "aria-label": "Turn to fork from" });
    const stopReason = el("input", { type: "text", id: "stop-reason", placeholder: "Reason", "aria-label": "Reason to stop" });
    const controls = [];
    if (!ended) {
      controls.push(
        el("div", { class: "row" }, message, el("button", { type: "button", id: "inject", text: "Inject", onclick: () => {
          if (!message.value.trim()) return flash("Write the message first.", "error");
          act("inject", { content: message.value }, "Message queued for the next turn.").then((ok) => {
            if (ok) message.value = "";
          });
        } })),
        el("div", { class: "row" },
          el("button", { type: "button", id: "retry", text: "Retry last turn",
            onclick: () => act("retry", {}, "Retry queued: the last reply is discarded at the next boundary.") }),
          stopReason,
          el("button", { type: "button", id: "stop", class: "danger", text: "Stop",
            onclick: () => act("stop", { reason: stopReason.value || null }, "Stop requested.") })));
    }
    // A what-if: another model, and the tool calls made as this run made them answered from its record.
    const forkModel = el("input", { type: "text", id: "fork-model", placeholder: "Same model", "aria-label": "Model of the fork" });
    const forkTools = el("select", { id: "fork-tool-results", "aria-label": "Tool calls of the fork" },
      el("option", { value: "run", text: "tools run" }),
      el("option", { value: "recorded", text: "this run's results, then tools run" }),
      el("option", { value: "recorded_only", text: "this run's results only" }));
    controls.push(el("div", { class: "row" }, el("span", { text: "Fork from turn" }), forkTurn, forkModel, forkTools,
      el("button", { type: "button", id: "fork", text: "Fork", onclick: async () => {
        try {
          const body = { from_iteration: Number(forkTurn.value), tool_results: forkTools.value };
          if (forkModel.value.trim()) body.changes = { model: forkModel.value.trim() };
          const made = await api(apiPath(id, "/fork"), body);
          location.href = runPath(made.id);
        } catch (e) {
          flash(e.message, "error");
        }
      } })));
    actions.replaceChildren(el("h2", { text: "Actions" }), ...controls);
  }

  async function act(action, body, done) {
    try {
      await api(apiPath(id, `/${action}`), body);
    } catch (e) {
      flash(e.message, "error");
      return false;
    }
    flash(done, "info");
    reloadSoon();
    return true;
  }

  // --- Live events: text as it is written, retracted attempts, tool calls ---------------------------------------

  function attemptBox(iteration, attempt) {
    const key = `${iteration}:${attempt}`;
    let box = state.attempts.get(key);
    if (box) return box;
    // A later attempt of the same turn replaces any earlier one still shown as current.
    for (const [otherKey, other] of state.attempts) {
      if (other.iteration === iteration && other.attempt < attempt) retract(otherKey);
    }
    const node = el("div", { class: "attempt", "data-iteration": iteration, "data-attempt": attempt },
      el("div", { class: "attempt-head", text: `Turn ${iteration}${attempt > 1 ? ` · attempt ${attempt}` : ""}` }));
    live.append(node);
    box = { iteration, attempt, node, blocks: new Map() };
    state.attempts.set(key, box);
    return box;
  }

  function retract(key) {
    const box = state.attempts.get(key);
    if (!box || box.node.classList.contains("retracted")) return;
    box.node.classList.add("retracted");
    box.node.querySelector(".attempt-head").append(
      el("span", { class: "retracted-label", text: " — retracted: this attempt failed and was sent again" }));
  }

  function blockNode(box, index, kind) {
    let node = box.blocks.get(index);
    if (!node) {
      node = el("div", { class: `live-block live-${kind}` });
      if (kind === "partial") node.textContent = "…";
      box.node.append(node);
      box.blocks.set(index, node);
    }
    return node;
  }

  function logLine(event, text) {
    log.append(el("li", { "data-type": event.type }, el("span", { class: "muted", text: `turn ${event.iteration} ` }), text));
  }

  function onEvent(event) {
    const iteration = event.iteration;
    switch (event.type) {
      case "model_call_started":
        attemptBox(iteration, event.attempt || 1);
        break;
      case "block_start": {
        const box = attemptBox(iteration, event.attempt || 1);
        const block = event.block || {};
        if (block.type === "tool_use") {
          blockNode(box, event.index, "tool").textContent = `→ ${block.name} `;
        } else {
          blockNode(box, event.index, block.type === "thinking" ? "thinking" : "text");
        }
        break;
      }
      case "text":
      case "thinking":
      case "tool_input": {
        const box = attemptBox(iteration, event.attempt || 1);
        const piece = event.text ?? event.thinking ?? event.partial_json ?? "";
        blockNode(box, event.index, box.blocks.has(event.index) ? "text" : "partial").append(piece);
        break;
      }
      case "retracted":
        retract(`${iteration}:${event.attempt}`);
        logLine(event, `attempt ${event.attempt} retracted: the model call failed and was sent again`);
        break;
      case "reply":
        // The reply is in the transcript now: the live copy of this turn goes, retracted attempts stay as such.
        for (const [key, box] of state.attempts) {
          if (box.iteration === iteration && !box.node.classList.contains("retracted")) {
            box.node.remove();
            state.attempts.delete(key);
          }
        }
        logLine(event, `reply (${(event.message && event.message.stop_reason) || "no stop reason"})`);
        reloadSoon();
        break;
      case "tool_started":
        logLine(event, `tool ${event.name} started`);
        reloadSoon();
        break;
      case "tool_finished":
        logLine(event, `tool ${event.name} finished${event.result && event.result.is_error ? " with an error" : ""}`);
        reloadSoon();
        break;
      case "agent_started":
        logLine(event, `agent ${event.name} started: run ${event.run_id}`);
        break;
      case "tool_outcome_unknown":
        logLine(event, `tool ${event.name}: outcome unknown (${event.detail || ""})`);
        reloadSoon();
        break;
      case "approval_waiting":
        logLine(event, `${event.approval.name} waits for approval`);
        reloadSoon();
        break;
      case "approval_decided":
        logLine(event, `${event.tool_use_id} ${event.approved ? "approved" : "denied"}${event.reason ? ": " + event.reason : ""}`);
        reloadSoon();
        break;
      case "step_waiting":
        logLine(event, event.status.replaceAll("_", " "));
        reloadSoon();
        break;
      case "limit_reached":
        logLine(event, `limit reached: ${event.limit}${event.detail ? " (" + event.detail + ")" : ""}`);
        break;
      case "run_finished":
        logLine(event, `run finished: ${event.status}${event.detail ? " (" + event.detail + ")" : ""}`);
        reloadSoon();
        break;
      case "iteration_started":
        break;
      default:
        break;
    }
  }

  function follow(offset) {
    const source = new EventSource(`${apiPath(id, "/events")}?after=${offset}`);
    state.source = source;
    source.onmessage = (message) => onEvent(JSON.parse(message.data));
    source.addEventListener("end", () => {
      source.close();
      reloadSoon();
    });
    source.addEventListener("notice", (message) => flash(JSON.parse(message.data).notice, "error"));
    source.addEventListener("failure", (message) => {
      source.close();
      flash(`The live stream stopped: ${JSON.parse(message.data).error}`, "error");
    });
    source.onerror = () => {
      // The browser reconnects by itself (resuming after the last event's id); say so only when it gave up.
      if (source.readyState === EventSource.CLOSED) flash("The live stream closed; refresh the page to follow again.", "error");
    };
  }

  await load();
}

// --- The page's router ------------------------------------------------------------------------------------------

const match = location.pathname.match(/^\/runs\/(.+)$/);
if (match) showRun(decodeURIComponent(match[1]));
else showList();
