"""The ledger lock's watchdog: end a session that holds it while doing nothing (RFC 0008 section 6).

Every append holds ``LEDGER_LOCK`` (a transaction-level advisory lock) from ``BEGIN`` to
``COMMIT``, so a client frozen inside an append (SIGSTOP, a frozen VM, a debugger) stalls every
node's appends, takeovers included, until it resumes or its connection dies. PostgreSQL's own
``idle_in_transaction_session_timeout`` does not bound it as holon appends: psycopg ends a
pipeline with a Sync *and* a Flush request, and the server arms the idle timers only when it
reads a command right after a Sync (``postgres.c``: ``send_ready_for_query``), so a session left
idle after a pipeline is never timed out (checked with psycopg alone; a plain statement after the
pipeline is timed out).

So every live node runs a ``LockWatch``: a thread of its own, on a connection of its own (never
the event loop's: an append waiting on the lock may block the loop, as it does in the daemon's
API handlers), that every ``every_s`` runs ``end_stalled_holders``: one statement that
terminates any backend granted the ledger lock whose session has been idle in its transaction
(nothing sent, nothing running) for ``bound_s`` or more, by the database's clock. A legitimate
append never sits idle that long (its statements follow each other within milliseconds); a node
uses half its ``lease_s``, checked every sixth. Terminating rolls the
transaction back: nothing it appended commits, and the frozen client, when it resumes, finds its
connection gone (``StorageUnavailable``) and reconnects. Zero cost per append; one read of
``pg_locks`` per heartbeat. ``pg_terminate_backend`` needs the same role as the victim (as every
node has) or ``pg_signal_backend``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg

from holon.errors import HolonError
from holon.ledger.pg.append import Conn, translated
from holon.ledger.pg.connect import connect
from holon.ledger.pg.migrations import LEDGER_LOCK
from holon.logs import get_logger

__all__ = ["STALLED_HOLDERS", "LockWatch", "end_stalled_holders"]

log = get_logger("holon.ledger.pg")

# pg_locks shows a bigint advisory key as classid (high 32 bits), objid (low 32 bits), objsubid 1.
STALLED_HOLDERS = f"""
SELECT a.pid, pg_terminate_backend(a.pid)
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = {LEDGER_LOCK >> 32} AND l.objid = {LEDGER_LOCK & 0xFFFFFFFF} AND l.objsubid = 1
  AND a.pid <> pg_backend_pid()
  AND a.state IN ('idle in transaction', 'idle in transaction (aborted)')
  AND a.state_change <= clock_timestamp() - make_interval(secs => %(bound_s)s)
"""


def end_stalled_holders(conn: Conn, *, bound_s: float) -> list[int]:
    """Terminate the backends holding the ledger lock idle for ``bound_s`` or more; returns their
    pids (usually none). ``StorageUnavailable`` when the server does not answer."""
    with translated(conn, "the ledger lock's watchdog"):
        rows = conn.execute(STALLED_HOLDERS, {"bound_s": bound_s}).fetchall()
    return [int(r[0]) for r in rows if r[1]]


class LockWatch:
    """A daemon thread running ``end_stalled_holders`` every ``every_s`` on a connection of its own
    (reconnected after a failure); ``on_end(pids)`` is told of each termination."""

    def __init__(
        self,
        url: str,
        *,
        bound_s: float,
        every_s: float,
        timeout_s: float = 5.0,
        on_end: Callable[[list[int]], None] | None = None,
    ) -> None:
        self.url = url
        self.bound_s = bound_s
        self.every_s = every_s
        self.timeout_s = timeout_s
        self.on_end = on_end
        self.ended: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="holon-lock-watch", daemon=True)

    def start(self) -> LockWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout_s + self.every_s + 1)

    def _run(self) -> None:
        conn: psycopg.Connection[tuple[object, ...]] | None = None
        while not self._stop.wait(self.every_s):
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = connect(self.url, timeout_s=self.timeout_s)
                pids = end_stalled_holders(conn, bound_s=self.bound_s)
            except (HolonError, psycopg.Error) as e:
                log.warning("ledger.lock_watch_failed", error=str(e).splitlines()[0] if str(e) else type(e).__name__)
                if conn is not None:
                    conn.close()
                conn = None
                continue
            if pids:
                self.ended.extend(pids)
                log.warning("ledger.ended_stalled_append", pids=pids, idle_s=self.bound_s)
                if self.on_end is not None:
                    self.on_end(pids)
        if conn is not None:
            conn.close()
