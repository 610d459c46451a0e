"""``holon run`` through the home's daemon: send the input, follow its turn live, report it.

The input goes to ``POST /v1/agents/{agent}/inputs`` (with an idempotency key: a retry after a
dropped connection is not a second message); the turn is followed on the agent's event stream
(``GET /v1/agents/{agent}/events``), subscribed *before* the input is sent so no delta of the
reply is missed. Reply text is printed as it is generated, tool calls and results as they happen
(on a terminal, as the in-process run shows them). When the turn that took the input settles, its
report comes from ``GET /v1/agents/{agent}/turns`` (the same document ``holon run --json`` prints
in-process). ``--until-idle`` then waits until the daemon has nothing left to do (no turn running,
no input queued for an agent that may run, no background task running) and reports every turn
that settled meanwhile. Ctrl-C aborts the turn in the daemon (``POST .../abort``) and exits 130.

An agent that will not run now (paused, or over its daily budget) gets the input queued and no
turn: the report says so (``(no turn ran)``), as in-process.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from holon.cli.run_cmd import tool_call_line, tool_result_line

if TYPE_CHECKING:
    from holon.repl.client import ApiClient

__all__ = ["Outcome", "run_via_daemon"]

IDLE_POLL_S = 0.1
"""How often ``--until-idle`` looks at the daemon's agents."""


@dataclass
class Outcome:
    turns: list[dict[str, Any]] = field(default_factory=list)
    briefs: list[dict[str, Any]] = field(default_factory=list)
    streamed: bool = False


def _text(value: Any) -> str:
    """A ``LargeText`` as the API sends it: the text, or a blob's preview."""
    if isinstance(value, dict):
        return str(value.get("preview") or "")
    return "" if value is None else str(value)


def _stops_waiting(event: dict[str, Any]) -> bool:
    """The queued input will not be answered soon: the agent was paused, or ran out of budget."""
    p, kind = event["payload"], event["type"]
    if kind == "agent.configured" and (p.get("changes") or {}).get("paused"):
        return True
    return kind == "brief.delivered" and p.get("kind") == "budget"


def _blocked(api: ApiClient, agent: str) -> bool:
    live = api.agent_status(agent)
    return live["state"] == "paused" or (
        live["state"] == "asleep" and str(live.get("detail", "")).startswith("daily budget used")
    )


def run_via_daemon(api: ApiClient, agent: str, message: str, *, until_idle: bool, live: bool) -> Outcome:
    """Send ``message`` to ``agent`` as the operator and follow its turn until it settles."""
    head = api.head(agent)  # also: no such agent is a 404 (exit 3) before anything is sent
    if _blocked(api, agent):
        api.send_json(agent, message)
        return Outcome()
    out = Outcome()
    turn_id: str | None = None
    seq = 0
    try:
        with contextlib.closing(api.stream_json(agent, after=head)) as stream:
            next(stream)  # "open": subscribed, so no delta of the reply is missed
            seq = int(api.send_json(agent, message)["seq"])
            for kind, data in stream:
                if kind == "delta":
                    if live and turn_id is not None and data.get("turn_id") == turn_id:
                        sys.stdout.write(str(data.get("text", "")))
                        sys.stdout.flush()
                        out.streamed = True
                    continue
                if kind != "event":
                    continue
                p, type_ = data["payload"], data["type"]
                if turn_id is None:
                    if type_ == "turn.started" and seq in p.get("inputs", []):
                        turn_id = p.get("turn_id")
                    elif _stops_waiting(data):
                        return out
                    continue
                if data.get("turn_id") != turn_id and p.get("turn_id") != turn_id:
                    continue
                if live and type_ == "tool.called":
                    sys.stderr.write(tool_call_line(str(p.get("tool")), _text(p.get("arguments"))))
                elif live and type_ == "tool.resulted":
                    sys.stderr.write(
                        tool_result_line(str(p.get("status")), float(p.get("duration_ms") or 0), _text(p.get("output")))
                    )
                elif type_ == "turn.settled":
                    break
    except KeyboardInterrupt:
        if seq:
            with contextlib.suppress(Exception):
                api.abort(agent)
        raise
    turn_ids = [turn_id] if turn_id else []
    if until_idle:
        turn_ids += [t for t in _settle_all(api, head) if t not in turn_ids]
    report = api.read(f"/agents/{agent}/turns", turn=turn_ids) if turn_ids else {"turns": [], "briefs": []}
    out.turns, out.briefs = list(report["turns"]), list(report["briefs"])
    return out


def _settle_all(api: ApiClient, after: int) -> list[str]:
    """Wait until the daemon is idle (twice in a row, so a task's result that starts a turn is
    not missed between two looks); the turns settled since ``after``, in order."""
    quiet = 0
    while quiet < 2:
        quiet = quiet + 1 if _idle(api) else 0
        if quiet < 2:
            time.sleep(IDLE_POLL_S)
    settled: list[str] = []
    cursor = after
    while True:
        page = api.read("/ledger/tail", n=500, after=cursor, type=["turn.settled"])
        settled += [str(e["payload"]["turn_id"]) for e in page]
        if len(page) < 500:
            return settled
        cursor = int(page[-1]["seq"])


def _idle(api: ApiClient) -> bool:
    status = {a["agent_id"]: a for a in api.status().get("agents", [])}
    for a in api.read("/agents"):
        state = status.get(a["agent_id"], {}).get("state")
        if a["current_turn_id"] is not None or state == "running":
            return False
        if a["pending_inputs"] and state not in ("paused", "asleep", "failed"):
            return False
        if state == "waiting" and api.read(f"/agents/{a['agent_id']}/tasks", status="running"):
            return False
    return True
