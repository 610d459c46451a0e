"""A worker for tests/test_crash.py: appends multi-event turns forever, until it is killed.

    python tests/helpers/crasher.py HOME ROUND STARTED_FILE

Each transaction is one whole turn: turn.started, tool.called, tool.resulted (sometimes with an
output big enough for the blob store), model.responded and turn.settled, all with the same
``turn_id`` (plus the working_memory.delta the projector derives). After 20 committed turns it
touches STARTED_FILE so the parent knows it is in full swing.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

from holon.config import load_settings, resolve_home
from holon.errors import NotFoundError
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store

AGENT = "agt_crash"


def turn(round_: int, k: int) -> list[NewEvent]:
    tid = f"r{round_}-t{k}"
    call = f"call_{round_}_{k}"
    output = (f"round {round_} turn {k} ✓\n" * (300 if k % 3 == 0 else 2)).strip()
    payloads: list[ev.PayloadBase] = [
        ev.TurnStarted(turn_id=tid),
        ev.ToolCalled(call_id=call, tool="run_command", arguments='{"cmd": "ls"}'),
        ev.ToolResulted(call_id=call, tool="run_command", status="ok", output=output),
        ev.ModelResponded(turn_id=tid, round=0, model="fake", content=f"reply {k}"),
        ev.TurnSettled(turn_id=tid, outcome="completed", reply=f"reply {k}"),
    ]
    return [NewEvent(AGENT, p, turn_id=tid) for p in payloads]


def main() -> int:
    home, round_, started = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    paths = resolve_home(home)
    store = Store.open(paths, load_settings(paths))
    try:
        store.agent("crasher")
    except NotFoundError:
        store.append(NewEvent(AGENT, ev.AgentCreated(name="crasher", home=str(paths.agent_home("crasher")))))
    for k in itertools.count():
        store.append(*turn(round_, k))
        if k == 20:
            started.touch()
    return 0


if __name__ == "__main__":
    sys.exit(main())
