"""Rich rendering for the REPL: pure functions of API data and a ``Console`` (testable with
``Console(record=True)``).

``ReplyView`` draws one agent's turn as it happens: reply text as it is generated (``delta``
items), each tool call and result on one truncated line, model errors, and how the turn settled;
while nothing is drawn, a ``Spinner`` with the elapsed time (on a terminal only).
The rest are tables and summaries for the slash commands.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from holon.api.models import EventOut
from holon.clock import format_us
from holon.projections.state import AgentState
from holon.runtime.settings import read_settings
from holon.runtime.status import describe

__all__ = [
    "ReplyView",
    "Spinner",
    "brief_line",
    "agents_table",
    "context_summary",
    "events_table",
    "memory_read",
    "search_hits",
    "short",
    "tasks_table",
    "text_of",
    "transcript",
    "waits_table",
    "work_table",
    "working_memory",
]

ELLIPSIS = "…"


def text_of(value: Any) -> str:  # Any: a LargeText as JSON (a string, or a blob reference dict)
    """A ``LargeText`` field's text: the string, or a blob's preview marked as cut."""
    if value is None:
        return ""
    if isinstance(value, Mapping):
        return f"{value.get('preview', '')}{ELLIPSIS}"
    return str(value)


def short(text: str, width: int) -> str:
    """``text`` on one line, at most ``width`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: max(width - 1, 0)] + ELLIPSIS


def _when(us: int | None) -> str:
    if not us:
        return ""
    return format_us(us)[:19].replace("T", " ")


def brief_line(console: Console, agent: str, payload: Mapping[str, Any]) -> None:
    """A brief from an agent to the operator (background agents report this way)."""
    kind = payload.get("kind", "brief")
    style = "bold red" if kind in ("error", "budget") else "bold magenta"
    line = Text.assemble(("✉ ", style), (f"{agent} [{kind}]: ", style), text_of(payload.get("text")))
    console.print(line, soft_wrap=True)


class Spinner:
    """A sign of life on a terminal while a turn runs: ``⠋ thinking 3.2 s`` on one line, redrawn in
    place by a thread, erased by ``stop()`` (which returns only once the thread has stopped, so it
    never writes into text printed after it). Nothing at all when the console is not a terminal."""

    FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

    def __init__(self, console: Console, *, interval_s: float = 0.1) -> None:
        self.console = console
        self.interval_s = interval_s
        self.enabled = console.is_terminal
        self.label = "thinking"
        self.started = time.monotonic()
        """Elapsed time counts from here (the message being sent), across the turn's rounds."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if not self.enabled or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._spin, name="chat:spinner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join()
        self._write("\r\x1b[K")

    def _write(self, text: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.console.file.write(text)
            self.console.file.flush()

    def _spin(self) -> None:
        frame = 0
        while True:
            elapsed = time.monotonic() - self.started
            self._write(f"\r\x1b[K{self.FRAMES[frame % len(self.FRAMES)]} {self.label} {elapsed:.1f} s")
            frame += 1
            if self._stop.wait(self.interval_s):
                return


class ReplyView:
    """Draws one turn: streamed text, compact tool lines, errors, the outcome; and while nothing
    is being drawn, a spinner with the elapsed time (``begin()`` to the turn's settle)."""

    def __init__(self, console: Console, agent: str) -> None:
        self.console = console
        self.agent = agent
        self._streamed = ""
        """Text shown in the current model round (from deltas or a round's content)."""
        self._open_line = False
        self.spinner = Spinner(console)
        self._settled_seen = False
        self._final = False
        """The last round answered without tool calls (or failed): the settle comes next, no spinner."""
        self._starting: set[str] = set()

    def _width(self) -> int:
        return max(self.console.width - 6, 20)

    def _break(self) -> None:
        self.spinner.stop()
        if self._open_line:
            self.console.print()
            self._open_line = False

    def begin(self) -> None:
        """The message is sent: the elapsed time starts, and the spinner (on a terminal)."""
        self.spinner.started = time.monotonic()
        self.spinner.start()

    def close(self) -> None:
        """The turn settled or the operator stopped watching: the spinner goes."""
        self.spinner.stop()

    def _resume(self) -> None:
        """Between pieces of output (a tool running, the next model round): the spinner again."""
        if not self._open_line and not self._settled_seen and not self._final:
            self.spinner.start()

    def model(self, data: Mapping[str, Any]) -> None:
        """A model child's state: ``starting the local model…`` is said once, and the spinner says it too."""
        what, state = str(data.get("what") or "model"), data.get("state")
        if state == "starting" and what not in self._starting:
            self._starting.add(what)
            self._break()
            self.console.print(Text(f"starting the {what}{ELLIPSIS} (a cold start; it stays warm after)", "dim"))
            self.spinner.label = f"starting the {what}{ELLIPSIS}"
            self._resume()
        elif state in ("ready", "failed") and what in self._starting:
            self._starting.discard(what)
            self.spinner.label = "thinking"

    def delta(self, data: Mapping[str, Any]) -> None:
        fragment = str(data.get("text", ""))
        if not fragment:
            return
        self.spinner.stop()
        if not self._streamed:
            self._break()
        self.console.print(Text(fragment), end="", soft_wrap=True)
        self._streamed += fragment
        self._open_line = not fragment.endswith("\n")

    def event(self, event: EventOut) -> None:
        self._event(event)
        self._resume()

    def _event(self, event: EventOut) -> None:
        p = event.payload
        match event.type:
            case "model.responded":
                self._responded(p)
            case "tool.called":
                self._break()
                args = short(text_of(p.get("arguments")), self._width() - len(p.get("tool", "")) - 4)
                self.console.print(
                    Text.assemble(("  ⚙ ", "cyan"), (p.get("tool", ""), "bold cyan"), " ", (args, "dim"))
                )
            case "tool.resulted":
                self._break()
                ok = p.get("status") == "ok"
                mark, style = ("✓", "green") if ok else ("✗", "red")
                head = f"{p.get('status')} {round(float(p.get('duration_ms', 0)))} ms:"
                out = short(text_of(p.get("output")), self._width() - len(head) - 6)
                self.console.print(Text.assemble((f"    {mark} {head} ", style), (out, "dim")))
            case "brief.delivered":
                self._break()
                brief_line(self.console, self.agent, p)
            case "turn.settled":
                self._settled(p)
            case _:
                pass

    def _responded(self, p: Mapping[str, Any]) -> None:
        self._final = not p.get("tool_calls")
        if p.get("error"):
            self._break()
            self.console.print(Text(f"  model error ({p.get('error_kind') or 'error'}): {p['error']}", "red"))
        elif not self._streamed and (content := text_of(p.get("content")).strip()):
            # No deltas came for this round (a provider that does not stream): show it whole.
            self._break()
            self.console.print(Text(content), soft_wrap=True)
        self._break()
        self._streamed = ""

    def _settled(self, p: Mapping[str, Any]) -> None:
        self._settled_seen = True
        self._break()
        outcome = p.get("outcome")
        if outcome == "completed":
            return
        reason = f": {p['reason']}" if p.get("reason") else ""
        style = "yellow" if outcome in ("waiting", "interrupted") else "bold red"
        self.console.print(Text(f"[turn {outcome}{reason}]", style))


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def agents_table(
    console: Console,
    agents: Sequence[AgentState],
    *,
    current: str | None = None,
    live: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """One row per agent. ``live`` (``/v1/status`` entries by agent id) gives the daemon's view:
    paused, running, waiting on what, asleep until when, failed with what; without it, the
    projection's status and last outcome."""
    table = _table("agents", "", "name", "status", "model", "turns", "queued", "detail")
    for a in agents:
        mark = "*" if a.name == current else ""
        one = (live or {}).get(a.agent_id)
        model = str((one or {}).get("model") or read_settings(a.settings).settings.model or "")
        status, detail = _agent_state(a, one)
        table.add_row(mark, a.name, status, model, str(a.turns), str(len(a.pending_inputs)), detail)
    console.print(table if agents else "no agents")


def _agent_state(agent: AgentState, live: Mapping[str, Any] | None) -> tuple[str, str]:
    """(status, detail) of one agent row: live from the daemon when known."""
    if live is None:
        last: str = agent.last_outcome or ""
        if agent.last_error:
            last += f" ({short(agent.last_error, 40)})"
        return agent.status, last
    return str(live.get("state", agent.status)), short(describe(live), 80)


def work_table(console: Console, items: Sequence[Mapping[str, Any]]) -> None:
    if not items:
        console.print("no work items")
        return
    table = _table("work items", "id", "title", "status", "todos", "updated")
    for w in items:
        todos = w.get("todos", [])
        done = sum(1 for t in todos if t.get("status") == "done")
        table.add_row(
            w["work_item_id"][-8:],
            w.get("title", ""),
            w.get("status", ""),
            f"{done}/{len(todos)}",
            _when(w.get("updated_us")),
        )
    console.print(table)


def tasks_table(console: Console, tasks: Sequence[Mapping[str, Any]]) -> None:
    if not tasks:
        console.print("no tasks")
        return
    table = _table("tasks", "id", "kind", "title", "state", "detail")
    for t in tasks:
        detail = short(t.get("detail") or "", 40)
        table.add_row(t["task_id"][-8:], t.get("kind", ""), t.get("title", ""), t.get("state", ""), detail)
    console.print(table)


def waits_table(console: Console, waits: Sequence[Mapping[str, Any]]) -> None:
    if not waits:
        console.print("no waits")
        return
    table = _table("waits", "id", "on", "target", "recheck at", "status", "reason")
    for w in waits:
        table.add_row(
            w["wait_id"][-8:],
            w.get("on", ""),
            w.get("target") or "",
            _when(w.get("recheck_at_us")),
            w.get("status", ""),
            short(w.get("reason", ""), 40),
        )
    console.print(table)


def working_memory(console: Console, memory: Mapping[str, Any]) -> None:
    if not memory:
        console.print("working memory is empty")
        return
    console.print_json(json.dumps(memory, ensure_ascii=False, default=str))


def search_hits(console: Console, result: Mapping[str, Any]) -> None:
    hits = result.get("hits", [])
    total = result.get("total", len(hits))
    console.print(Text(f"{len(hits)} of {total} hits for {result.get('query', '')!r}", "bold"))
    for i, h in enumerate(hits, 1):
        head = Text.assemble((f"{i:>2}. ", "bold"), (h.get("source_ref", ""), "cyan"), f"  {h.get('kind', '')}")
        if h.get("time"):
            head.append(f"  {h['time']}", "dim")
        console.print(head)
        snippet = short(h.get("snippet") or h.get("title") or "", max(console.width - 6, 20) * 2)
        console.print(Text("    " + snippet, "dim"), soft_wrap=True)
    for note in result.get("notes", []):
        console.print(Text(f"note: {note}", "yellow"))


def memory_read(console: Console, read: Mapping[str, Any]) -> None:
    title = read.get("title") or read.get("ref", "")
    console.print(
        Text.assemble((str(title), "bold"), (f"  ({read.get('kind', '')}, {read.get('size', '?')} chars)", "dim"))
    )
    if read.get("content") is not None:
        console.print(Text(str(read["content"])), soft_wrap=True)
    elif read.get("summary"):
        console.print(Text(str(read["summary"]), "yellow"))
    for call in read.get("next_calls", []):
        console.print(
            Text(f"  next: {call.get('tool')} {json.dumps(call.get('arguments'))}  ({call.get('why')})", "dim")
        )


def context_summary(console: Console, rounds: Sequence[Mapping[str, Any]]) -> None:
    """What the model saw in each round of the last turn, and what was left out and why."""
    if not rounds:
        console.print("no context recorded")
        return
    console.print(Text(f"turn {rounds[0].get('turn_id', '')}", "bold"))
    for r in rounds:
        counts = ", ".join(f"{k} {v}" for k, v in (r.get("summary") or {}).items())
        console.print(f"round {r.get('round')}: {r.get('used_tokens')}/{r.get('budget_tokens')} tokens; {counts}")
    manifest = rounds[-1].get("manifest") or {}
    sections = manifest.get("sections", [])
    if sections:
        table = _table("sections (last round)", "section", "tier", "as", "tokens", "reason")
        for s in sections:
            form = "excluded" if s.get("excluded") else s.get("representation", "")
            tokens = f"{s.get('allocated_tokens', 0)}/{s.get('requested_tokens', 0)}"
            table.add_row(str(s.get("key", "")), str(s.get("tier", "")), form, tokens, str(s.get("reason", "")))
        console.print(table)


def _event_text(event: EventOut) -> str:
    p = event.payload
    for key in ("text", "reply", "content", "output", "arguments", "title", "reason", "outcome"):
        if p.get(key):
            return text_of(p[key])
    return ", ".join(f"{k}={v}" for k, v in p.items() if k != "type" and isinstance(v, str | int | float))


def events_table(console: Console, events: Sequence[EventOut]) -> None:
    if not events:
        console.print("no events")
        return
    table = _table("events", "seq", "time", "type", "what")
    width = max(console.width - 50, 20)
    for e in events:
        table.add_row(str(e.seq), _when(e.ts_us)[11:], e.type, escape(short(_event_text(e), width)))
    console.print(table)


def transcript(console: Console, agent: str, events: Sequence[EventOut]) -> None:
    """Inputs, replies and briefs, in order."""
    shown = 0
    for e in events:
        p = e.payload
        if e.type == "message.received":
            who = "you" if e.authority == "operator" else (p.get("sender") or e.origin)
            console.print(Text.assemble((f"{who}: ", "bold green"), text_of(p.get("text"))), soft_wrap=True)
        elif e.type == "turn.settled" and p.get("reply"):
            console.print(Text.assemble((f"{agent}: ", "bold blue"), text_of(p.get("reply"))), soft_wrap=True)
        elif e.type == "brief.delivered":
            brief_line(console, agent, p)
        else:
            continue
        shown += 1
    if not shown:
        console.print("no messages yet")


# --- proposals (RFC 0006) ------------------------------------------------------------------------


def _proposal_text(p: Mapping[str, Any]) -> str:
    entry = p.get("entry") or {}
    skill = p.get("skill") or {}
    write = p.get("write") or {}
    return str(entry.get("text") or skill.get("name") or write.get("text") or "")


def proposals_table(console: Console, proposals: Sequence[Mapping[str, Any]]) -> None:
    if not proposals:
        console.print(Text("no proposals wait for you", "dim"))
        return
    table = Table(title="proposals waiting for you", title_justify="left", show_edge=False, header_style="bold")
    for col in ("id", "kind", "scope", "text", "why"):
        table.add_column(col)
    for p in proposals:
        entry = p.get("entry") or {}
        kind = entry.get("kind", "skill") if p.get("kind") == "memory" else "skill"
        scope = entry.get("scope", "agent")
        if write := p.get("write") or {}:
            kind, scope = f"{write.get('op')} {write.get('path')}", write.get("scope", "operator")
        table.add_row(p["proposal_id"], kind, scope, _proposal_text(p), p.get("reason", ""))
    console.print(table)
    console.print(Text("/proposals accept ID [--edit] · /proposals dismiss ID [reason] · /proposals show ID", "dim"))


def proposal_detail(console: Console, p: Mapping[str, Any]) -> None:
    entry = p.get("entry") or {}
    skill = p.get("skill") or {}
    console.print(Text(f"{p['proposal_id']} · {p.get('kind')} · {p.get('status')}", "bold"))
    if entry:
        console.print(f"{entry.get('kind')} ({entry.get('scope')} scope): {entry.get('text')}")
        console.print(Text(f"evidence: {', '.join(f'event:{s}' for s in entry.get('evidence', [])) or 'none'}", "dim"))
    if skill:
        console.print(str(skill.get("body", "")))
    if write := p.get("write") or {}:
        section = f", section {write['heading']!r}" if write.get("heading") else ""
        console.print(f"{write.get('op')} {write.get('scope')}/{write.get('path')}{section}:\n{write.get('text', '')}")
    if p.get("reason"):
        console.print(Text(f"why: {p['reason']}", "dim"))
