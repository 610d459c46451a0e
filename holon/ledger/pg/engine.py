"""``PgEngine``: the ledger in a PostgreSQL database, behind ``Engine`` (RFC 0008, step 4).

Mirrors ``holon.ledger.sqlite.engine.SqliteEngine``: one dedicated writer connection (autocommit;
holon sends ``BEGIN``/``COMMIT`` itself) that every write transaction and the ledger's own reads
use, and a pool of readers, opened on first use, for the long reads beside it (verify, stats,
replay) in ``REPEATABLE READ`` so that one ``BEGIN`` is one snapshot, as under SQLite's WAL.
What is PostgreSQL's alone lives here: the ledger lock with the head (``holon_begin_append()``,
``append.begin_append``), jsonb operators in the named reads, ``convert_to`` for stored bytes,
``pg_total_relation_size`` for sizes. There are no pages to check (the server checksums them
when the cluster enables it).

"Creating" the ledger means applying migration 1 to an empty database: a database holding
tables but no ``schema_migrations`` is refused, never migrated into, as a foreign SQLite file is.

An append costs two round trips: ``BEGIN`` + the lock and head (pipelined), then the rows (the
fence, blobs and events) + ``pg_notify`` + ``COMMIT`` in one pipeline. ``insert`` holds its rows
back (``PgConn.held``) until the commit, or until the next statement of the transaction, which
sends them first so that it sees them (a projection hook's rows, an idempotency lookup): then the
rows take a round trip of their own, as they always did before. A refusal of held rows (the
fence, the gapless trigger) surfaces where they are sent: at the commit, or at that statement;
either way the transaction is rolled back and the caller gets the same ``FencedOut`` /
``LedgerError`` (RFC 0008, "Two round trips per append").
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from holon.errors import FencedOut, HolonError, LedgerError, NotFoundError
from holon.ledger.codec import BlobBody
from holon.ledger.engine import CommonReads, Head, LedgerStats
from holon.ledger.envelope import EVENT_FIELDS, GENESIS_HASH
from holon.ledger.pg import append as pg_append
from holon.ledger.pg.conn import PgConn, Raw, lost, pg_sql, translate
from holon.ledger.pg.connect import connect, open_pool, parse_url
from holon.ledger.pg.fence import FENCE_SETTING, Fence
from holon.ledger.pg.migrations import UNFENCED_TYPES, migrate
from holon.ledger.pg.notify import CHANNEL, notification
from holon.ledger.rows import EVENT_COLUMNS, EVENT_INSERT
from holon.ledger.sql import Conn, Row

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool
    from sqlalchemy import Engine as SaEngine
    from sqlmodel import Session

__all__ = ["PgEngine"]

_INSERT_BLOB = pg_sql(
    "INSERT INTO blobs(hash, size, body, created_us, referenced_us) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT(hash) DO UPDATE SET referenced_us = excluded.referenced_us, "
    "body = coalesce(blobs.body, excluded.body), "
    "pruned_us = CASE WHEN blobs.body IS NULL THEN NULL ELSE blobs.pruned_us END"
)
_INSERT_EVENT = pg_sql(EVENT_INSERT)
_COPY_EVENTS: Final = f"COPY events ({EVENT_COLUMNS}) FROM STDIN"
_HEAD = "SELECT seq, hash, ts_us FROM events ORDER BY seq DESC LIMIT 1"
_EMPTY_HEAD: Final = Head(0, GENESIS_HASH, 0)

# The reply tracking's reads (SQLite: JSON1 with ``INDEXED BY events_agent_type``): jsonb
# operators on the payload text, down the same covering index, which the planner picks by itself
# for the ``agent_id = ? AND type = ?`` prefix. ``@>`` (not jsonb's ``?``, which is a placeholder
# to ``Conn``) tests membership of the input's seq in ``inputs``.
_TURN_TAKING = (
    "SELECT seq, payload::jsonb ->> 'turn_id' FROM events "
    "WHERE agent_id = ? AND type = 'turn.started' AND seq > ? "
    "AND payload::jsonb -> 'inputs' @> to_jsonb(?::bigint) ORDER BY seq DESC LIMIT 1"
)
_TURN_SETTLED = (
    "SELECT seq FROM events WHERE agent_id = ? AND type = 'turn.settled' "
    "AND seq > ? AND payload::jsonb ->> 'turn_id' = ? ORDER BY seq LIMIT 1"
)
_ROUND_ENDED = (
    "SELECT 1 FROM events WHERE seq > ? AND seq <= ? AND type = 'model.responded' "
    "AND payload::jsonb ->> 'turn_id' = ? LIMIT 1"
)
_RECENT = "SELECT seq, type, turn_id FROM events WHERE agent_id = ? AND type = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
_TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename"
_READER_OPTIONS = r"-c default_transaction_isolation=repeatable\ read"
_TYPE, _AGENT = EVENT_FIELDS.index("type"), EVENT_FIELDS.index("agent_id")
_UNFENCED = frozenset(UNFENCED_TYPES)

Fencer = Callable[[Sequence[str]], Fence | None]
"""Given the agents a transaction's rows append fenced events for, the fence to send with them
(``holon.daemon.cluster.Node.fence_of``): ``FencedOut`` before anything is sent for an agent the
node believed it held past its self-fencing deadline; ``None``: no fence (a single node)."""
"""Readers' transactions are snapshots (``BEGIN`` on a reader = one consistent view, as SQLite's)."""


class PgEngine(CommonReads):
    """The ledger in the PostgreSQL database at ``url``. Nothing is connected before ``open``."""

    dialect: Final = "postgresql"

    def __init__(self, url: str, *, timeout_s: float = 5.0, pool_size: int = 8, prepare: bool = True) -> None:
        self.url = url
        self.pg = parse_url(url)
        self._timeout_s = timeout_s
        self._pool_size = pool_size
        self._prepare = prepare
        self._conn: PgConn | None = None
        self._pool: ConnectionPool[Raw] | None = None
        self._sa: SaEngine | None = None
        self.fencer: Fencer | None = None
        """Set by a node (``holon serve --node``): every append carries its fence (RFC 0008 section 3)."""
        self.notify = True
        """Every append transaction that stored events ends with ``pg_notify`` (in the COMMIT's
        pipeline: no round trip), which wakes the other nodes' listeners (RFC 0008 section 4)."""
        self._pending: list[Row] = []
        """The open transaction's rows, for its notification."""
        self._held: list[tuple[Fence | None, Sequence[BlobBody], Sequence[Row], int]] = []
        """Inserts not sent yet (``insert``): each one's fence, blobs, rows and time, in order."""

    @property
    def location(self) -> str:
        pg = self.pg
        user = f"{pg.user}@" if pg.user else ""
        return f"postgresql://{user}{pg.where}/{pg.dbname}"

    # --- lifecycle ------------------------------------------------------------------------------

    def _connect(self) -> Raw:
        return connect(self.url, timeout_s=self._timeout_s, prepare=self._prepare)

    def _tables(self, raw: Raw) -> list[str]:
        return [str(r[0]) for r in raw.execute(_TABLES).fetchall()]

    def exists(self) -> bool:
        if self._conn is not None:
            return bool(self._tables(self._conn._live()))
        with self._connect() as raw:
            return bool(self._tables(raw))

    def open(self, *, create: bool, now_us: Callable[[], int]) -> bool:
        """Connect the writer; apply migration 1 to an empty database only when ``create`` is set
        (``holon init``); refuse a database with tables but no holon schema; migrate forwards."""
        created = False
        raw = self._connect()
        try:
            tables = self._tables(raw)
            if not tables:
                if not create:
                    raise LedgerError(f"there is no ledger database at {self.location} (run 'holon init')")
                migrate(raw, now_us=now_us(), create=True)
                created = True
            elif "schema_migrations" not in tables or "events" not in tables:
                shown = ", ".join(tables[:5])
                raise LedgerError(
                    f"{self.location} is a PostgreSQL database that is not a holon ledger (it has tables {shown} "
                    "but no holon ledger); holon does not initialise over it: name an empty database"
                )
            self._conn = PgConn(raw, where=self.pg.where, reopen=self._connect)
            self.migrate(now_us=now_us(), create=False)
        except HolonError:
            raw.close()
            self.close()
            raise
        except Exception as e:
            raw.close()
            self.close()
            err = self.translate(e)
            if err is None:
                raise
            raise err from e
        return created

    def migrate(self, *, now_us: int, create: bool = True) -> list[int]:
        conn = self.connection()
        try:
            return migrate(conn._live(), now_us=now_us, create=create)
        except psycopg.OperationalError as e:
            raise lost(self.pg.where, e) from e

    def connection(self) -> PgConn:
        if self._conn is None:
            self._conn = PgConn(self._connect(), where=self.pg.where, reopen=self._connect)
        return self._conn

    @contextmanager
    def reader(self) -> Iterator[PgConn]:
        if self._pool is None:
            given = conninfo_to_dict(self.url).get("options")
            url = make_conninfo(self.url, options=f"{given} {_READER_OPTIONS}" if given else _READER_OPTIONS)
            self._pool = open_pool(
                url, size=self._pool_size, timeout_s=self._timeout_s, prepare=self._prepare, name="holon-readers"
            )
        with self._pool.connection() as raw:
            yield PgConn(raw, where=self.pg.where)

    def session(self) -> Session:
        """A SQLModel session on a connection of its own (SQLAlchemy's psycopg dialect; not a hot path)."""
        from sqlmodel import Session, create_engine

        if self._sa is None:
            self._sa = create_engine(
                "postgresql+psycopg://",
                creator=lambda: connect(self.url, timeout_s=self._timeout_s, autocommit=False, prepare=False),
                pool_size=1,
                max_overflow=4,
            )
        return Session(self._sa)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        sa, self._sa = self._sa, None
        if sa is not None:
            sa.dispose()

    def translate(self, e: BaseException) -> HolonError | None:
        return translate(e, where=self.pg.where, location=self.location)

    # --- the append path --------------------------------------------------------------------------

    def begin_append(self) -> tuple[PgConn, Head]:
        conn = self.connection()
        h = pg_append.begin_append(conn._live())
        conn.in_write = True
        self._pending = []
        return conn, Head(h.seq, h.hash, h.ts_us)

    def insert(self, conn: Conn, rows: Sequence[Row], blobs: Sequence[BlobBody], *, now_us: int) -> None:
        pg = _pg(conn)
        fence = self._fence(rows)  # FencedOut here, before anything is sent, for a lease past its deadline
        self._held.append((fence, blobs, rows, now_us))
        self._pending.extend(rows)
        pg.held = self._send_held  # before the transaction's next statement; else with the COMMIT

    def _send_held(self) -> None:
        """Send the held inserts in one round trip (a statement of the transaction needs them)."""
        raw = self.connection().raw
        try:
            with raw.pipeline():
                self._queue_held(raw.cursor())
        except psycopg.Error as e:
            raise self._refused(raw, e, "append") from e

    def _queue_held(self, cur: psycopg.Cursor[Any]) -> None:
        """Queue the held inserts on ``cur`` (inside the caller's pipeline): fence, blobs, events."""
        held, self._held = self._held, []
        for fence, blobs, rows, now_us in held:
            if fence is not None:  # transaction-local; set again by each insert of the transaction
                cur.execute("SELECT set_config(%s, %s, true)", (FENCE_SETTING, fence.setting()))
            if blobs:
                cur.executemany(_INSERT_BLOB, [(b.hash, len(b.data), b.data, now_us, now_us) for b in blobs])
            cur.executemany(_INSERT_EVENT, rows)

    def _fence(self, rows: Sequence[Row]) -> Fence | None:
        """The fence for ``rows`` from the node's ``fencer``: the agents they append fenced
        events for (the database decides the rest: an unfenced type passes without one)."""
        if self.fencer is None:
            return None
        agents = sorted({str(r[_AGENT]) for r in rows if r[_TYPE] not in _UNFENCED})
        return self.fencer(agents) if agents else None

    def _refused(self, raw: Raw, e: psycopg.Error, what: str) -> HolonError:
        if e.sqlstate == pg_append.FENCE_REFUSED and not raw.closed:  # before "lost": psycopg maps
            diag = e.diag.message_primary or str(e).strip().splitlines()[0]  # class HL to OperationalError
            return FencedOut(f"{what} refused by the database: {diag}", agent_id=e.diag.message_detail or "")
        if raw.broken or raw.closed:
            return lost(self.pg.where, e)
        diag = e.diag.message_primary or str(e).strip().splitlines()[0]
        return LedgerError(f"{what} refused by the database: {diag}")

    def commit(self, conn: Conn) -> None:
        pg = _pg(conn)
        raw = pg.raw
        pg.held = None
        rows, self._pending = self._pending, []
        try:
            if self._held or (self.notify and rows):
                with raw.pipeline():  # held rows, notification and COMMIT: one round trip
                    cur = raw.cursor()
                    self._queue_held(cur)
                    if self.notify and rows:  # delivered at COMMIT, in commit order; never if it fails
                        cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, notification(rows)))
                    cur.execute("COMMIT")
            else:
                raw.execute("COMMIT")
        except psycopg.Error as e:
            raise self._refused(raw, e, "append") from e
        pg.in_write = False

    def rollback(self, conn: Conn) -> None:
        pg = _pg(conn)
        pg.in_write = False
        pg.held = None
        self._pending, self._held = [], []
        raw = pg.raw
        if raw.closed:
            return  # the server dropped it: the transaction went with it
        if raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.OperationalError):  # lost meanwhile: nothing left to end
                raw.execute("ROLLBACK")

    def head(self, conn: Conn) -> Head:
        row = conn.execute(_HEAD).fetchone()
        return _EMPTY_HEAD if row is None else Head(int(row[0]), str(row[1]), int(row[2]))

    def load_rows(self, rows: Iterable[Row]) -> int:
        conn = self.connection()
        raw = conn._live()
        batch = list(rows)
        pg_append.begin_append(raw)  # the ledger lock: the gapless trigger then checks each row
        try:
            # COPY: one stream instead of a statement per row (``storage migrate``, RFC 0008 section 6).
            with raw.cursor().copy(_COPY_EVENTS) as copy:
                for row in batch:
                    copy.write_row(row)
            raw.execute("COMMIT")
        except psycopg.Error as e:
            err = self._refused(raw, e, "rows")
            self.rollback(conn)
            raise err from e
        except BaseException:
            self.rollback(conn)
            raise
        return len(batch)

    # --- reads ------------------------------------------------------------------------------------

    def text_bytes(self, column: str) -> str:
        # convert_to gives the stored UTF-8 bytes; ``::bytea`` would read backslashes as escapes.
        return f"convert_to({column}, 'UTF8')"

    def has_table(self, conn: Conn, name: str) -> bool:
        sql = "SELECT 1 FROM pg_tables WHERE schemaname = current_schema() AND tablename = ?"
        return conn.fetchone(sql, (name,)) is not None

    def recent_index(
        self, conn: Conn, agent_id: str, types: Sequence[str], *, limit: int, before: int
    ) -> list[tuple[int, str, str | None]]:
        found: list[tuple[int, str, str | None]] = []
        for type_ in types:
            found += conn.fetchall(_RECENT, (agent_id, type_, before, limit))
        return found

    def turn_taking(self, conn: Conn, agent_id: str, input_seq: int) -> tuple[int, str] | None:
        row = conn.fetchone(_TURN_TAKING, (agent_id, input_seq, input_seq))
        return None if row is None else (int(row[0]), str(row[1]))

    def turn_settled_seq(self, conn: Conn, agent_id: str, turn_id: str, *, after: int) -> int | None:
        row = conn.fetchone(_TURN_SETTLED, (agent_id, after, turn_id))
        return None if row is None else int(row[0])

    def round_ended(self, conn: Conn, turn_id: str, *, after: int, upto: int) -> bool:
        return conn.fetchone(_ROUND_ENDED, (after, upto, turn_id)) is not None

    # --- blobs ------------------------------------------------------------------------------------

    def blob_body(self, conn: Conn, hash_: str) -> bytes | None:
        row = conn.fetchone("SELECT body FROM blobs WHERE hash = ?", (hash_,))
        if row is None:
            raise NotFoundError(f"no blob {hash_}")
        return None if row[0] is None else bytes(row[0])

    def prune_blobs(self, conn: Conn, *, older_than_us: int, now_us: int) -> int:
        conn.execute("BEGIN")
        _pg(conn).in_write = True
        try:
            cur = conn.execute(
                "UPDATE blobs SET body = NULL, pruned_us = ? WHERE body IS NOT NULL AND referenced_us < ?",
                (now_us, older_than_us),
            )
            conn.execute("COMMIT")
        except BaseException:
            self.rollback(conn)
            raise
        _pg(conn).in_write = False
        return int(cur.rowcount)

    def first_bad_blob(self) -> str | None:
        after = ""
        with self.reader() as conn:
            while True:  # in chunks by hash: bodies are large, the client would hold them all
                rows = conn.fetchall(
                    "SELECT hash, body FROM blobs WHERE body IS NOT NULL AND hash > ? ORDER BY hash LIMIT 256", (after,)
                )
                if not rows:
                    return None
                for h, body in rows:
                    if hashlib.sha256(bytes(body)).hexdigest() != h:
                        return str(h)
                after = str(rows[-1][0])

    # --- integrity and size -----------------------------------------------------------------------

    def verify_pages(self, *, budget_s: float | None = None) -> str | None:
        return None  # no page check a client can run; the server checksums pages when enabled

    def stats(self) -> LedgerStats:
        with self.reader() as conn:
            conn.execute("BEGIN")  # a reader's transaction is one snapshot (REPEATABLE READ)
            try:
                by_type = {
                    str(t): {"count": int(n), "payload_bytes": int(b)}
                    for t, n, b in conn.fetchall(
                        "SELECT type, count(*), sum(octet_length(payload))::bigint FROM events "
                        "GROUP BY type ORDER BY type"
                    )
                }
                row: Any = conn.fetchone(
                    "SELECT count(*), coalesce(sum(octet_length(body)), 0)::bigint, count(pruned_us) FROM blobs"
                )
                size: Any = conn.fetchone(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
                    "AND c.relkind = 'r'"
                )
                head = self.head(conn)[0]
            finally:
                conn.execute("ROLLBACK")
        total = sum(v["count"] for v in by_type.values())
        return LedgerStats(total, head, by_type, int(row[0]), int(row[1]), int(row[2]), int(size[0]))


def _pg(conn: Conn) -> PgConn:
    if not isinstance(conn, PgConn):
        raise TypeError(f"the PostgreSQL engine was given a {type(conn).__name__}, not its own connection")
    return conn
