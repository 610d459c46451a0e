"""A process that commits N events to a home, says so, and waits to be killed (SIGKILL).

    python tests/helpers/anchor_writer.py HOME N

Each event is its own transaction (one commit, one anchor record). After the last commit it
prints ``committed <head>`` and sleeps: the parent kills it with SIGKILL, so nothing is
checkpointed and the commits live only in the WAL.
"""

from __future__ import annotations

import sys
import time

from holon.config import load_settings, resolve_home
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store


def main() -> None:
    paths = resolve_home(sys.argv[1])
    n = int(sys.argv[2])
    store = Store.open(paths, load_settings(paths), create=False)
    agent_id = store.agents()[0].agent_id
    for i in range(n):
        store.append(NewEvent(agent_id, ev.DecisionRecorded(text=f"acknowledged decision {i}")))
    print(f"committed {store.ledger.head()}", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
