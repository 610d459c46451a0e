"""``holon run`` and ``holon transcript``: talk to an agent and read what happened.

Both go through the home's daemon when one runs (``holon.cli.backend``; ``holon.cli.run_remote``
follows the turn on the daemon's event stream), else they run in this process.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from holon.cli import backend
from holon.cli.common import HomeOpt, JsonOpt, ctx_of, emit, open_store

if TYPE_CHECKING:
    from holon.runtime.tools.base import ToolResult
    from holon.runtime.turn import TurnResult


def _short(text: str, n: int = 100) -> str:
    """One line of at most ``n`` characters (``holon.cli.run_remote`` shows tool calls the same way)."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def tool_call_line(name: str, arguments: str) -> str:
    """How a live ``holon run`` shows a tool call (on stderr), in-process or through the daemon."""
    return f"\n  -> {name} {_short(arguments, 80)}\n"


def tool_result_line(status: str, duration_ms: float, output: str) -> str:
    return f"  <- {status} ({duration_ms:.0f} ms) {_short(output, 80)}\n"


def _observer(live: bool) -> Any:
    from holon.runtime.turn import TurnObserver

    class Live(TurnObserver):
        """Streams the reply and shows tool calls compactly on stderr/stdout (TTY only)."""

        def __init__(self) -> None:
            self.streamed = False

        def on_text(self, agent_id: str, fragment: str) -> None:
            if live:
                sys.stdout.write(fragment)
                sys.stdout.flush()
                self.streamed = True

        def on_tool_call(self, agent_id: str, name: str, arguments: str) -> None:
            if live:
                sys.stderr.write(tool_call_line(name, arguments))

        def on_tool_result(self, agent_id: str, result: ToolResult) -> None:
            if live:
                sys.stderr.write(tool_result_line(result.status, result.duration_ms, result.output))

    return Live()


def run(
    ctx: typer.Context,
    agent: Annotated[str, typer.Argument(help="Agent name or id.")],
    message: Annotated[str, typer.Argument(help="What to tell the agent (as the operator).")],
    until_idle: Annotated[
        bool, typer.Option("--until-idle", help="Also run the turns its tasks and child agents cause.")
    ] = False,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Send a message to an agent and run it to settlement: through the home's daemon when one
    runs (the turn streams live), else in this process."""
    c = ctx_of(ctx, home, json_out)
    live = not c.json and sys.stdout.isatty()
    with backend.daemon(c) as api:
        if api is not None:
            from holon.cli.run_remote import run_via_daemon

            outcome = run_via_daemon(api, agent, message, until_idle=until_idle, live=live)
            _report(c, outcome.turns, outcome.briefs, streamed=outcome.streamed)
            return
    _run_here(c, agent, message, until_idle=until_idle, live=live)


def _run_here(c: Any, agent: str, message: str, *, until_idle: bool, live: bool) -> None:
    """``holon run`` in this process: a host of its own runs the agent (no daemon may run)."""
    import asyncio

    from holon.runtime.run import run_input
    from holon.runtime.run_report import briefs_of

    observer = _observer(live)
    with open_store(c) as store:
        before = store.ledger.head()
        results: list[TurnResult] = asyncio.run(
            run_input(store, agent, message, observer=observer, until_idle=until_idle)
        )
        briefs = briefs_of(store, store.agent(agent).agent_id, {r.turn_id for r in results})
        _push_traces(store, before)
    _report(c, [r.as_json() for r in results], briefs, streamed=observer.streamed)


def _report(c: Any, turns: list[dict[str, Any]], briefs: list[dict[str, Any]], *, streamed: bool) -> None:
    """What ``holon run`` prints once its turns settled, however they ran; exit 1 when the last
    one failed or was interrupted."""
    if not turns:
        emit(c, {"outcome": None, "turns": []}, "(no turn ran)")
        return
    first = turns[0]
    data = {**first, "briefs": briefs}
    if len(turns) > 1:
        data["turns"] = turns
    if c.json:
        emit(c, data)
    else:
        if streamed:
            sys.stdout.write("\n")
        elif first["reply"]:
            sys.stdout.write(first["reply"] + "\n")
        for b in briefs:
            sys.stdout.write(f"[brief: {b['kind']}] {b['text']}\n")
        for r in turns:
            if r["outcome"] != "completed":
                sys.stderr.write(
                    f"turn {r['turn_id']}: {r['outcome']}" + (f" ({r['reason']})" if r["reason"] else "") + "\n"
                )
    if turns[-1]["outcome"] in ("failed", "interrupted"):
        raise typer.Exit(1)


def _push_traces(store: Any, before: int) -> None:
    """With ``[trace] otlp_endpoint`` set, push the turns this run settled (its own, those of
    ``--until-idle`` and any a crashed run left, settled by recovery), as the daemon would; the
    wait is bounded, so a dead endpoint delays the exit by at most its timeout."""
    if store.settings.trace.otlp_endpoint:
        from holon.trace.live import push_settled_since

        push_settled_since(store, before)


def transcript(
    ctx: typer.Context,
    agent: Annotated[str, typer.Argument(help="Agent name or id.")],
    last: Annotated[int, typer.Option("--last", min=1, max=10_000, help="How many recent turns.")] = 5,
    home: HomeOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """What happened in an agent's last turns: inputs, tool calls, results, replies, briefs."""
    from holon.runtime.transcript import transcript_entries

    c = ctx_of(ctx, home, json_out)
    with backend.daemon(c) as api:
        if api is not None:
            entries = list(api.read(f"/agents/{agent}/transcript", last=last))
        else:
            with open_store(c) as store:
                entries = transcript_entries(store, store.agent(agent).agent_id, last)
    if c.json:
        sys.stdout.write(json.dumps(entries, ensure_ascii=False) + "\n")
        return
    for e in entries:
        sys.stdout.write(e["line"] + "\n")
