"""The evolve job queue: one durable job per settled turn, leased, retried, dead-lettered (RFC 0006).

The queue is a table in the home's database, beside the ledger, and is fed from the ledger:
``enqueue`` reads ``turn.settled`` events after the ``evolve`` cursor and inserts one job per
turn (key ``turn:<turn_id>``, ``ON CONFLICT DO NOTHING``) in the same transaction that moves the cursor,
so a crash neither loses nor doubles a job. A job is taken with a lease; a worker that dies leaves
its lease to expire and the job is taken again. A job that keeps failing is retried with
exponential backoff up to ``max_attempts`` and then parked as ``dead`` (visible in status).

Completing a job happens in the transaction that appends what the job produced (``complete`` takes
the open transaction), so a job either produced its events and is done, or produced nothing.

Time comes from the caller (``now_us``): the worker passes its clock, tests pass an injected one.
The lease is the exception on PostgreSQL (RFC 0008, step 6): there several nodes' workers share one
queue, so a lease's expiry is written and compared in the database's clock (``lease_time =
"database"``, the default on that engine), never one machine's clock against another's. On SQLite
the one host's clock is the caller's, as it always was.

The queue is a ``Projection`` (``holon.projections.framework``): its table is made by named,
versioned migrations in the ``evolve`` namespace, and ``enqueue`` is the framework's catch-up, whose
cursor moves in the transaction that inserts the jobs. Turns are read through the ledger's typed
seam (``EventQuery``), never with SQL over the events table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from holon.ledger import EventQuery, Transaction
from holon.ledger.sql import Conn
from holon.projections import Store, framework
from holon.projections.framework import Migration, open_projection, read_cursor, stored_cursor, write_cursor

__all__ = ["MIGRATIONS", "PG_MIGRATIONS", "QUEUE_VERSION", "Job", "JobQueue", "copy_queue"]

CURSOR = "evolve"
#: Bump when what a settled turn queues changes: the queue is emptied and refilled from the ledger
#: (the worker's outputs carry idempotency keys derived from the job, so a re-run adds nothing).
QUEUE_VERSION = 1
#: Events whose settled turns are queued per transaction.
WINDOW = 20_000
_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS evolve_jobs (
        key TEXT PRIMARY KEY,
        agent_id TEXT NOT NULL,
        turn_id TEXT NOT NULL,
        settled_seq INTEGER NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'dead')),
        attempts INTEGER NOT NULL DEFAULT 0,
        not_before_us INTEGER NOT NULL DEFAULT 0,
        lease_owner TEXT,
        lease_until_us INTEGER,
        last_error TEXT,
        created_us INTEGER NOT NULL,
        finished_us INTEGER
    )
    """,
    "CREATE INDEX IF NOT EXISTS evolve_jobs_ready ON evolve_jobs(status, not_before_us, settled_seq)",
)
#: ``IF NOT EXISTS``: the first migration adopts a queue made before the queue had migrations.
MIGRATIONS = (Migration(1, "evolve_jobs", _SCHEMA),)
_PG_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS evolve_jobs (
        key TEXT COLLATE "C" PRIMARY KEY,
        agent_id TEXT COLLATE "C" NOT NULL,
        turn_id TEXT COLLATE "C" NOT NULL,
        settled_seq BIGINT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'dead')),
        attempts INTEGER NOT NULL DEFAULT 0,
        not_before_us BIGINT NOT NULL DEFAULT 0,
        lease_owner TEXT,
        lease_until_us BIGINT,
        last_error TEXT,
        created_us BIGINT NOT NULL,
        finished_us BIGINT
    )
    """,
    "CREATE INDEX IF NOT EXISTS evolve_jobs_ready ON evolve_jobs(status, not_before_us, settled_seq)",
)
#: The same queue on PostgreSQL (RFC 0008 step 6): its ``INTEGER`` is 32-bit, so the microsecond
#: times and seqs are ``BIGINT``, and the keys sort bytewise (``"C"``) as the ledger's own do.
PG_MIGRATIONS = (Migration(1, "evolve_jobs", _PG_SCHEMA),)
_MIGRATIONS = {"sqlite": MIGRATIONS, "postgresql": PG_MIGRATIONS}


@dataclass(frozen=True, slots=True)
class Job:
    key: str
    agent_id: str
    turn_id: str
    settled_seq: int
    status: str
    attempts: int
    lease_owner: str | None
    lease_until_us: int | None
    last_error: str | None


#: The database's clock in microseconds since the epoch (PostgreSQL only: ``lease_time = "database"``).
_DB_NOW_US = "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)"

_COLUMNS = "key, agent_id, turn_id, settled_seq, status, attempts, lease_owner, lease_until_us, last_error"


class JobQueue:
    def __init__(
        self,
        store: Store,
        *,
        lease_s: float = 60.0,
        max_attempts: int = 5,
        backoff_s: float = 5.0,
        backfill: bool = True,
        lease_time: Literal["caller", "database"] | None = None,
    ) -> None:
        """``lease_time``: whose clock times a lease; ``None`` = the database's on PostgreSQL (nodes
        share the queue), the caller's ``now_us`` on SQLite (one host)."""
        self.store = store
        dialect = store.ledger.engine.dialect
        if lease_time is None:
            lease_time = "database" if dialect == "postgresql" else "caller"
        if lease_time == "database" and dialect != "postgresql":
            raise ValueError(f"lease_time='database' needs PostgreSQL, not {dialect}")
        self.lease_time = lease_time
        self.backfill = backfill
        self.lease_us = int(lease_s * 1e6)
        self.max_attempts = max_attempts
        self.backoff_us = int(backoff_s * 1e6)
        self._ready = False
        self._now_us = 0
        self._queued = 0

    # --- the ``Projection`` side -------------------------------------------------------------

    name = CURSOR
    version = QUEUE_VERSION

    @property
    def migrations(self) -> tuple[Migration, ...]:
        """The queue's DDL for the store's engine (SQLite's text is the one it always was)."""
        return _MIGRATIONS[self.store.ledger.engine.dialect]

    def ensure(self) -> None:
        """Migrate the queue's table; a home that existed before evolve starts from its head unless
        asked to backfill: re-reading years of turns is an operator's choice, not a side effect."""
        if self._ready:
            return
        open_projection(self.store.ledger, self, start_at_head=not self.backfill)
        self._ready = True

    def clear(self, tx: Transaction) -> None:
        tx.conn.execute("DELETE FROM evolve_jobs")

    def fold(self, tx: Transaction, after: int, upto: int) -> None:
        """Queue one job per turn settled in ``after < seq <= upto`` (at most once per turn)."""
        for key in tx.find_keys(EventQuery(types=("turn.settled",), after=after, upto=upto)):
            cur = tx.conn.execute(
                "INSERT INTO evolve_jobs(key, agent_id, turn_id, settled_seq, status, created_us) "
                "VALUES (?, ?, ?, ?, 'queued', ?) ON CONFLICT (key) DO NOTHING",
                (f"turn:{key.turn_id}", key.agent_id, key.turn_id, key.seq, self._now_us),
            )
            self._queued += cur.rowcount

    def enqueue(self, now_us: int, *, window: int = WINDOW) -> int:
        """Queue a job for every turn settled since the cursor; returns how many were queued."""
        self.ensure()
        self._now_us, self._queued = now_us, 0  # read by ``fold``, which the framework calls
        framework.catch_up(self.store.ledger, self, window=window)
        return self._queued

    def rebuild(self, now_us: int) -> int:
        """Empty the queue and queue every settled turn of the ledger again; returns how many."""
        self.ensure()
        framework.rebuild(self.store.ledger, self)
        return self.enqueue(now_us)

    def lease(self, worker: str, now_us: int, *, agents: Sequence[str] | None = None) -> Job | None:
        """Take the oldest ready job (queued and due, or running with an expired lease); ``agents``:
        only theirs (a node of several takes the jobs of the agents it owns, RFC 0008)."""
        if agents is not None and not agents:
            return None
        only, only_params = ("", ()) if agents is None else (
            f" AND agent_id IN ({', '.join('?' for _ in agents)})", tuple(agents)
        )  # fmt: skip
        self.ensure()
        with self.store.ledger.transaction() as tx:
            conn = tx.conn
            lease_now = now_us
            if self.lease_time == "database":
                clock = conn.fetchone(_DB_NOW_US, ())
                assert clock is not None  # a SELECT without FROM has one row
                lease_now = int(clock[0])
            while True:
                row = conn.execute(
                    f"SELECT {_COLUMNS} FROM evolve_jobs WHERE ((status = 'queued' AND not_before_us <= ?) "
                    f"OR (status = 'running' AND lease_until_us < ?)){only} ORDER BY settled_seq LIMIT 1",
                    (now_us, lease_now, *only_params),
                ).fetchone()
                if row is None:
                    return None
                job = Job(*row)
                if job.attempts >= self.max_attempts:  # its last lease expired too: give up on it
                    error = job.last_error or "the worker died while running it (lease expired)"
                    self._set(conn, job.key, status="dead", last_error=error, finished_us=now_us)
                    continue
                lease_until = lease_now + self.lease_us
                self._set(
                    conn, job.key, status="running", attempts=job.attempts + 1, lease_owner=worker,
                    lease_until_us=lease_until,
                )  # fmt: skip
                return Job(job.key, job.agent_id, job.turn_id, job.settled_seq, "running", job.attempts + 1,
                           worker, lease_until, job.last_error)  # fmt: skip

    def complete(self, conn: Conn, job: Job, now_us: int) -> bool:
        """Mark ``job`` done inside the caller's transaction; ``False`` if its lease was lost."""
        cur = conn.execute(
            "UPDATE evolve_jobs SET status = 'done', finished_us = ?, lease_owner = NULL, lease_until_us = NULL "
            "WHERE key = ? AND status = 'running' AND lease_owner = ? AND attempts = ?",
            (now_us, job.key, job.lease_owner, job.attempts),
        )
        return cur.rowcount == 1

    def fail(self, job: Job, error: str, now_us: int) -> str:
        """Record a failed attempt: retried after a backoff, or ``dead`` after the last attempt.

        Returns the job's new status, or ``lost`` when the lease had passed to another worker."""
        with self.store.ledger.transaction() as tx:
            held = tx.conn.fetchone(
                "SELECT 1 FROM evolve_jobs WHERE key = ? AND status = 'running' AND lease_owner = ? AND attempts = ?",
                (job.key, job.lease_owner, job.attempts),
            )
            if held is None:
                return "lost"  # another worker holds it now; its outcome counts
            if job.attempts >= self.max_attempts:
                self._set(tx.conn, job.key, status="dead", last_error=error[:2000], finished_us=now_us,
                          lease_owner=None, lease_until_us=None)  # fmt: skip
                return "dead"
            delay = self.backoff_us * 2 ** (job.attempts - 1)
            self._set(tx.conn, job.key, status="queued", last_error=error[:2000], not_before_us=now_us + delay,
                      lease_owner=None, lease_until_us=None)  # fmt: skip
            return "queued"

    def retry_dead(self, now_us: int) -> int:
        """Give every dead job a fresh set of attempts (an operator action); returns how many."""
        self.ensure()
        with self.store.ledger.transaction() as tx:
            cur = tx.conn.execute(
                "UPDATE evolve_jobs SET status = 'queued', attempts = 0, not_before_us = ?, finished_us = NULL "
                "WHERE status = 'dead'",
                (now_us,),
            )
            return cur.rowcount

    @staticmethod
    def _set(conn: Conn, key: str, **values: Any) -> None:
        cols = ", ".join(f"{k} = ?" for k in values)
        conn.execute(f"UPDATE evolve_jobs SET {cols} WHERE key = ?", (*values.values(), key))

    # --- reads ------------------------------------------------------------------------------

    def jobs(self, *, status: str | None = None, limit: int = 100) -> list[Job]:
        self.ensure()
        where, params = ("WHERE status = ?", [status]) if status else ("", [])
        rows = self.store.ledger.query(
            f"SELECT {_COLUMNS} FROM evolve_jobs {where} ORDER BY settled_seq DESC LIMIT ?", [*params, limit]
        )
        return [Job(*r) for r in rows]

    def counts(self) -> dict[str, int]:
        self.ensure()
        rows = self.store.ledger.query("SELECT status, COUNT(*) FROM evolve_jobs GROUP BY status", ())
        out = {"queued": 0, "running": 0, "done": 0, "dead": 0}
        out.update({s: n for s, n in rows})
        return out

    def lag(self) -> int:
        """Settled turns not yet queued (the cursor's distance from the head, in events)."""
        self.ensure()
        cur = stored_cursor(self.store.ledger, CURSOR)
        return self.store.ledger.head() - (cur.seq if cur is not None else 0)


_ALL = (
    "key, agent_id, turn_id, settled_seq, status, attempts, not_before_us, lease_owner, lease_until_us, "
    "last_error, created_us, finished_us"
)


def copy_queue(source: Conn, store: Store) -> int:
    """Copy the queue of another database (``holon storage migrate``) into ``store``'s, as stored.

    Jobs are not derivable from the ledger alone (which are done, which are dead, and why), so a
    moved home keeps them; the ``evolve`` cursor moves with them, so nothing is queued twice. The
    target's queue is made with its own engine's DDL and emptied first. ``source`` must have the
    ``evolve_jobs`` table (``Engine.has_table``). Returns the jobs copied (0, and nothing written,
    when the source's queue has no cursor)."""
    cursor = read_cursor(source, CURSOR)
    if cursor is None:
        return 0
    rows = source.fetchall(f"SELECT {_ALL} FROM evolve_jobs ORDER BY key", ())
    queue = JobQueue(store)
    queue.ensure()
    with store.ledger.transaction() as tx:
        tx.conn.execute("DELETE FROM evolve_jobs")
        tx.conn.executemany(f"INSERT INTO evolve_jobs({_ALL}) VALUES ({', '.join('?' * 12)})", [tuple(r) for r in rows])
        write_cursor(tx.conn, CURSOR, cursor.seq, cursor.version)
    return len(rows)
