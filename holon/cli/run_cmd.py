"""``holon run`` and ``holon transcript``: talk to an agent in-process and read what happened."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from holon.cli.common import HomeOpt, JsonOpt, ctx_of, emit, open_store

if TYPE_CHECKING:
    from holon.runtime.tools.base import ToolResult
    from holon.runtime.turn import TurnResult


def _short(text: str, n: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


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
                sys.stderr.write(f"\n  -> {name} {_short(arguments, 80)}\n")

        def on_tool_result(self, agent_id: str, result: ToolResult) -> None:
            if live:
                sys.stderr.write(f"  <- {result.status} ({result.duration_ms:.0f} ms) {_short(result.output, 80)}\n")

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
    """Send a message to an agent and run it to settlement in this process (no daemon needed)."""
    import asyncio

    from holon.runtime.run import run_input

    c = ctx_of(ctx, home, json_out)
    live = not c.json and sys.stdout.isatty()
    observer = _observer(live)
    with open_store(c) as store:
        before = store.ledger.head()
        results: list[TurnResult] = asyncio.run(
            run_input(store, agent, message, observer=observer, until_idle=until_idle)
        )
        briefs = _briefs_since(store, agent, results)
        _push_traces(store, before)
    if not results:
        emit(c, {"outcome": None, "turns": []}, "(no turn ran)")
        return
    first = results[0]
    data = {**first.as_json(), "briefs": briefs}
    if len(results) > 1:
        data["turns"] = [r.as_json() for r in results]
    if c.json:
        emit(c, data)
    else:
        if observer.streamed:
            sys.stdout.write("\n")
        elif first.reply:
            sys.stdout.write(first.reply + "\n")
        for b in briefs:
            sys.stdout.write(f"[brief: {b['kind']}] {b['text']}\n")
        for r in results:
            if r.outcome != "completed":
                sys.stderr.write(f"turn {r.turn_id}: {r.outcome}" + (f" ({r.reason})" if r.reason else "") + "\n")
    if any(r.outcome in ("failed", "interrupted") for r in results[-1:]):
        raise typer.Exit(1)


def _push_traces(store: Any, before: int) -> None:
    """With ``[trace] otlp_endpoint`` set, push the turns this run settled (its own, those of
    ``--until-idle`` and any a crashed run left, settled by recovery), as the daemon would; the
    wait is bounded, so a dead endpoint delays the exit by at most its timeout."""
    if store.settings.trace.otlp_endpoint:
        from holon.trace.live import push_settled_since

        push_settled_since(store, before)


def _briefs_since(store: Any, agent_ref: str, results: list[TurnResult]) -> list[dict[str, Any]]:
    from holon.ledger import events as ev

    agent = store.agent(agent_ref)
    turn_ids = {r.turn_id for r in results}
    out = []
    for e in store.ledger.recent(agent.agent_id, ("brief.delivered",), limit=50):
        if e.turn_id in turn_ids and isinstance(e.payload, ev.BriefDelivered):
            text = store.ledger.resolve(e.payload.text)
            out.append({"kind": e.payload.kind, "text": text if isinstance(text, str) else text.preview})
    return out


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
    with open_store(c) as store:
        entries = transcript_entries(store, store.agent(agent).agent_id, last)
    if c.json:
        sys.stdout.write(json.dumps(entries, ensure_ascii=False) + "\n")
        return
    for e in entries:
        sys.stdout.write(e["line"] + "\n")
