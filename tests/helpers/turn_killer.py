"""A worker for the exactly-once crash tests: ``turn_host.py`` that dies at a kill point.

    python tests/helpers/turn_killer.py HOME WHEN      (WHEN: before | after)

Runs what a holon process does (host lock, recovery, every agent's pending turns) and SIGKILLs
itself at the commit that holds a turn's final answer (a ``model.responded`` without tool calls
or error): just ``before`` that append, or just ``after`` it returned (committed). Nothing else
changes: the kill point wraps ``Store.append``, the one door every event goes through.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from turn_host import run

from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store

_append = Store.append


def _final_answer(events: tuple[NewEvent, ...]) -> bool:
    return any(
        isinstance(e.payload, ev.ModelResponded) and not e.payload.tool_calls and not e.payload.error for e in events
    )


def main() -> int:
    home, when = sys.argv[1], sys.argv[2]
    assert when in ("before", "after"), when

    def append(self: Store, *events: NewEvent) -> Any:
        final = _final_answer(events)
        if final and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        stored = _append(self, *events)
        if final and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return stored

    Store.append = append  # type: ignore[method-assign]
    asyncio.run(run(home, None, 60.0))
    return 0  # not reached when a turn answers


if __name__ == "__main__":
    sys.exit(main())
