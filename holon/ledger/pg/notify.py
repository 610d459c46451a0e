"""Wakes across nodes: ``pg_notify`` sent by each append, and a ``Listener`` per node.

RFC 0008, "Wakes, timers, the API on any node". An append transaction ends with ``pg_notify
('holon_events', '{"seq":N,"agents":[...]}')`` in its commit pipeline
(``holon.ledger.pg.append.insert_and_commit(notify=True)``): PostgreSQL delivers it at COMMIT, in
commit order, never for a rolled-back transaction. Each node's ``Listener`` holds one dedicated
connection with ``LISTEN`` and reports "the ledger advanced to seq N" (and, from a notification,
which agents) to a callback.

A notification sent while the listener is disconnected is lost for good (PostgreSQL queues none
for a session that is not there), so the listener also reads the head every ``catch_up_s`` (2 s)
and right after every reconnect: a lost notification delays a wake, never loses it. A lost
connection (``pg_terminate_backend``, a restarted server) is retried with jittered exponential
backoff (0.5 s doubling to 30 s); the listener never raises into its caller's thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import psycopg

from holon.errors import StorageUnavailable

__all__ = ["CATCH_UP_S", "CHANNEL", "Advance", "Listener", "notification", "parse_notification"]

log = logging.getLogger(__name__)

CHANNEL = "holon_events"
CATCH_UP_S = 2.0
"""How often the listener reads the head whatever it heard (RFC 0008: at most this much delay
when a notification was lost)."""
_MAX_PAYLOAD = 7900
"""PostgreSQL refuses a NOTIFY payload of 8000 bytes or more; above this the agents are left out
(``agents`` null: the listener's caller reads the events to know)."""
_AGENT = 2  # the agent_id column of an ``events`` row (``EVENT_FIELDS``)

Via = Literal["notify", "catch_up"]


def notification(rows: Sequence[Sequence[Any]]) -> str:
    """The payload for the transaction that appends ``rows`` (non-empty, in seq order): the new
    head and the agents it concerns, sorted."""
    agents = sorted({str(r[_AGENT]) for r in rows})
    text = json.dumps({"seq": int(rows[-1][0]), "agents": agents}, separators=(",", ":"))
    if len(text.encode()) > _MAX_PAYLOAD:
        text = json.dumps({"seq": int(rows[-1][0]), "agents": None}, separators=(",", ":"))
    return text


@dataclass(frozen=True, slots=True)
class Advance:
    """The ledger's head reached ``seq``. ``agents``: the agents of the transaction that got it
    there (a notification), or ``None`` when unknown (a catch-up read, or too many to send)."""

    seq: int
    agents: frozenset[str] | None
    via: Via


def parse_notification(payload: str) -> Advance | None:
    """``notification``'s text as an ``Advance``; ``None`` for a payload not of holon's making."""
    try:
        data = json.loads(payload)
        seq = int(data["seq"])
        agents = data.get("agents")
    except (ValueError, TypeError, KeyError):
        return None
    return Advance(seq, None if agents is None else frozenset(str(a) for a in agents), "notify")


Connect = Callable[[], psycopg.Connection[tuple[Any, ...]]]


class Listener:
    """A thread that LISTENs on ``CHANNEL`` and calls ``on_advance`` (in that thread) with every
    notification and with every catch-up read that found the head past what was reported.

    ``connect`` makes the dedicated connection (autocommit); it is called again after each loss.
    ``after``: the seq the caller has already seen (the first catch-up reports anything newer);
    ``None`` takes the head at start as seen. ``state`` counts connections and losses, for status
    and tests."""

    def __init__(
        self,
        connect: Connect,
        on_advance: Callable[[Advance], None],
        *,
        after: int | None = None,
        catch_up_s: float = CATCH_UP_S,
        backoff_s: tuple[float, float] = (0.5, 30.0),
        poll_s: float = 0.25,
    ) -> None:
        self._connect = connect
        self._on_advance = on_advance
        self.seen = after
        self.catch_up_s = catch_up_s
        self.backoff_s = backoff_s
        self.poll_s = poll_s
        self.connects = 0
        self.losses = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._thread = threading.Thread(target=self._run, name="holon-pg-listener", daemon=True)

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Listener:
        """Start the thread (once; a second call does nothing)."""
        if self._thread.ident is None:
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def __enter__(self) -> Listener:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_listening(self, timeout_s: float) -> bool:
        """Whether the listener is connected, LISTEN issued and the head read (waits up to ``timeout_s``)."""
        return self._listening.wait(timeout_s)

    @property
    def backend_pid(self) -> int | None:
        """The server process of the current connection (``None`` while disconnected)."""
        conn = self._conn
        return None if conn is None or conn.closed else int(conn.info.backend_pid)

    # --- the loop -----------------------------------------------------------------------------

    def _run(self) -> None:
        delay = self.backoff_s[0]
        while not self._stop.is_set():
            try:
                self._session()
                return  # stopped
            except (psycopg.Error, StorageUnavailable) as e:  # holon's connect translates its failure
                self.losses += 1
                self.last_error = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                log.warning("lost the LISTEN connection (%s); reconnecting in %.2f s", self.last_error, delay)
            finally:
                self._listening.clear()
                self._close()
            if self._stop.wait(delay * random.uniform(0.5, 1.0)):
                return
            delay = min(delay * 2, self.backoff_s[1])

    def _session(self) -> None:
        """One connection's life: LISTEN, a catch-up, then notifications and periodic catch-ups
        until stopped (returns) or the connection fails (raises)."""
        self._conn = conn = self._connect()
        conn.execute(f"LISTEN {CHANNEL}")
        self.connects += 1
        log.debug("listening on %s (backend %s, connection %d)", CHANNEL, conn.info.backend_pid, self.connects)
        self._catch_up(conn)  # whatever was sent while no one listened (and, the first time, where "now" is)
        self._listening.set()
        next_catch_up = time.monotonic() + self.catch_up_s
        while not self._stop.is_set():
            wait = max(0.0, min(self.poll_s, next_catch_up - time.monotonic()))
            for note in conn.notifies(timeout=wait):
                advance = parse_notification(note.payload)
                if advance is not None:
                    self._deliver(advance)
            if time.monotonic() >= next_catch_up:
                self._catch_up(conn)
                next_catch_up = time.monotonic() + self.catch_up_s

    def _catch_up(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        row = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
        head = int(row[0]) if row else 0
        log.debug("catch-up: head %d, reported %s", head, self.seen)
        if self.seen is None:
            self.seen = head
        elif head > self.seen:
            self._deliver(Advance(head, None, "catch_up"))

    def _deliver(self, advance: Advance) -> None:
        self.seen = max(self.seen or 0, advance.seq)
        try:
            self._on_advance(advance)
        except Exception:  # the caller's bug must not kill the wakes
            log.exception("the listener's callback failed on %s", advance)

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()
