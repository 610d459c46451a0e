"""A readable account of an agent's recent turns, built from the ledger."""

from __future__ import annotations

from typing import Any

from holon.clock import format_us
from holon.ledger import Event
from holon.ledger import events as ev
from holon.projections import Store

__all__ = ["transcript_entries"]


def _text(store: Store, value: ev.LargeText | None) -> str:
    resolved = store.ledger.resolve(value)
    if resolved is None or isinstance(resolved, str):
        return resolved or ""
    return resolved.text if resolved.text is not None else resolved.preview


def _one_line(text: str, n: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 3] + "..."


def transcript_entries(store: Store, agent_id: str, last: int) -> list[dict[str, Any]]:
    """One entry per notable event of the last ``last`` turns (and the inputs they took)."""
    starts = store.ledger.recent(agent_id, ("turn.started",), limit=last)
    if not starts:
        return []
    first = starts[0]
    inputs = [s for e in starts if isinstance(e.payload, ev.TurnStarted) for s in e.payload.inputs]
    out: list[dict[str, Any]] = []
    for e in store.ledger.get_many(sorted(i for i in inputs if i < first.seq)):
        out.append(_entry(store, e))
    for e in store.ledger.read(first.seq - 1, agent_id=agent_id):
        entry = _entry(store, e)
        if entry:
            out.append(entry)
    return out


def _entry(store: Store, e: Event) -> dict[str, Any]:
    p = e.payload
    when = format_us(e.ts_us)[11:19]
    base = {"seq": e.seq, "ts": format_us(e.ts_us), "type": e.type, "turn_id": e.turn_id}
    match p:
        case ev.MessageReceived():
            who = "operator" if e.authority == "operator" else f"{e.authority} ({e.origin})"
            text = _text(store, p.text)
            return {**base, "from": who, "text": text, "line": f"{when}  {who} > {_one_line(text)}"}
        case ev.TurnStarted():
            return {**base, "line": f"{when}  -- turn {p.turn_id} takes inputs {p.inputs}"}
        case ev.ToolCalled():
            args = _text(store, p.arguments)
            return {**base, "tool": p.tool, "arguments": args, "line": f"{when}    -> {p.tool} {_one_line(args, 100)}"}
        case ev.ToolResulted():
            out = _text(store, p.output)
            return {
                **base,
                "tool": p.tool,
                "status": p.status,
                "output": out,
                "line": f"{when}    <- {p.tool} {p.status}: {_one_line(out, 100)}",
            }
        case ev.BriefDelivered():
            text = _text(store, p.text)
            return {**base, "kind": p.kind, "text": text, "line": f"{when}  [brief {p.kind}] {_one_line(text)}"}
        case ev.TurnSettled():
            reply = _text(store, p.reply)
            extra = f" ({p.reason})" if p.reason else ""
            line = f"{when}  agent > {_one_line(reply)}\n{when}  -- {p.outcome}{extra}; {p.rounds} rounds, {p.tool_calls} tool calls"
            if p.rejected:
                line += f"\n{when}  -- inputs {p.rejected} rejected: not answered"
            elif p.requeue:
                line += f"\n{when}  -- inputs re-queued for the next turn"
            settled = {**base, "outcome": p.outcome, "reason": p.reason, "reply": reply, "line": line}
            return {**settled, "rejected": p.rejected, "requeue": p.requeue}
        case ev.ModelResponded() if p.error:
            return {
                **base,
                "error": p.error,
                "line": f"{when}    !! model error ({p.error_kind}): {_one_line(p.error)}",
            }
    return {}
