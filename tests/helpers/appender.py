"""A worker process for tests/test_concurrency.py: appends N events, one per transaction.

    python tests/helpers/appender.py HOME N WORKER [GATE_DIR]

With GATE_DIR, the worker opens its store, touches ``GATE_DIR/ready-WORKER`` and waits for
``GATE_DIR/go`` so that all workers start appending at the same moment. Every event carries the
idempotency key ``wWORKER-i`` so the parent can check each worker's order.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from holon.config import load_settings, resolve_home
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store


def payload_for(worker: int, i: int) -> ev.PayloadBase:
    if i == 0:
        return ev.TimerScheduled(timer_id="tm_shared", kind="interval", spec="1", next_fire_us=1)
    match i % 8:
        case 1 | 7:
            # A counter every worker increments: a stale per-process cache would lose increments.
            return ev.TimerFired(timer_id="tm_shared", scheduled_for_us=i, missed=i % 2, next_fire_us=i + 1)
        case 2:
            return ev.FileTouched(path=f"w{worker}/f{i % 30}.py")
        case 3:
            return ev.WaitRegistered(wait_id=f"wait_{i % 5}", on="timer", recheck_at_us=i)
        case 4:
            return ev.WaitResolved(wait_id=f"wait_{(i + 2) % 5}", resolution="satisfied")
        case 5:
            return ev.TurnSettled(turn_id=f"w{worker}-t{i}", outcome="completed")
        case 6:
            return ev.MessageReceived(text=f"message {i} from worker {worker}", sender=f"w{worker}")
    return ev.DecisionRecorded(text=f"w{worker} decision {i}")


def main() -> int:
    home, n, worker = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    gate = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    paths = resolve_home(home)
    store = Store.open(paths, load_settings(paths))
    agent_id = f"agt_w{worker}"
    store.append(NewEvent(agent_id, ev.AgentCreated(name=f"w{worker}", home=str(paths.agent_home(f"w{worker}")))))
    if gate is not None:
        (gate / f"ready-{worker}").touch()
        deadline = time.monotonic() + 60
        while not (gate / "go").exists():
            if time.monotonic() > deadline:
                print("never got the go signal", file=sys.stderr)
                return 3
            time.sleep(0.001)
    for i in range(n):
        payload = payload_for(worker, i)
        turn = getattr(payload, "turn_id", None)
        [event] = store.append(NewEvent(agent_id, payload, turn_id=turn, idempotency_key=f"w{worker}-{i}"))
        assert event.idempotency_key == f"w{worker}-{i}"
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
