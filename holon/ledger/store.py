"""The ledger: append-only, hash-chained, gapless events, on a storage engine (``holon.ledger.engine``).

``Ledger.append(*events)`` is one write transaction (``Engine.begin_append`` ... ``COMMIT``; on
SQLite ``BEGIN IMMEDIATE``): every
event in it, every blob it references, every projection row its hooks fold and every event those
hooks derive commit together or not at all. ``Ledger.transaction()`` opens the same kind of
transaction for callers that must read and append atomically.

Hooks (``TransactionHook``) are how synchronous projections ride along: ``apply`` folds events
as they are appended and may return derived events (appended in the same transaction), ``flush``
writes pending rows just before COMMIT, ``reset`` drops in-memory state after a rollback or when
another process moved the ledger head.

Everything here is engine-independent: the chain, encoding, idempotency, hooks and the order of
operations. The engine (``SqliteEngine`` by default, built from a ``Database``) opens and migrates
the database, takes the append lock with the head, stores rows and answers the reads whose SQL
cannot be common (RFC 0008, "The engine seam").
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

from holon.clock import Clock
from holon.errors import IdempotencyConflict, IntegrityError, LedgerError, NotFoundError
from holon.ids import new_id
from holon.ledger.anchor import Anchor, AnchorMark
from holon.ledger.codec import BlobBody, canonical_json, chain_hash_of, encode_payload
from holon.ledger.engine import QUICK_CHECK_SKIPPED, Engine, LedgerStats
from holon.ledger.envelope import EVENT_FIELDS, GENESIS_HASH, Event, NewEvent, header_values, new_event
from holon.ledger.events import BlobRef, LargeText
from holon.ledger.query import EventKey, EventQuery
from holon.ledger.rows import EVENT_COLUMNS, EVENT_INSERT, event_row, row_to_event
from holon.ledger.sql import Conn, Params, Row
from holon.ledger.sqlite import Database, SqliteEngine
from holon.ledger.verify import check_anchor, tail_check, verify_rows

__all__ = [
    "BlobText",
    "EVENT_COLUMNS",
    "EVENT_INSERT",
    "EventKey",
    "EventQuery",
    "Ledger",
    "LedgerStats",
    "Transaction",
    "TransactionHook",
    "VerifyResult",
    "event_row",
    "row_to_event",
]

_MAX_DERIVATION_DEPTH = 4


class TransactionHook(Protocol):
    def apply(self, tx: Transaction, events: Sequence[Event]) -> Sequence[NewEvent]:
        """Fold ``events``; return events to derive from them (appended in the same transaction)."""
        ...

    def flush(self, tx: Transaction) -> None:
        """Write pending state: just before COMMIT (unless the hook has a ``settle(tx)``, called
        there instead, which may keep it for a later commit), and whenever
        ``Transaction.flush_hooks`` asks (reads later in the same transaction must see it); a
        second call with nothing new is cheap."""
        ...

    def reset(self) -> None:
        """Forget in-memory state (after a rollback, or when another process appended)."""
        ...


def _log() -> Any:  # structlog's logger is dynamically typed
    from holon.logs import get_logger

    return get_logger("holon.ledger")


class Transaction:
    """An open write transaction. Obtain one from ``Ledger.transaction()``."""

    def __init__(self, ledger: Ledger, conn: Conn, head_seq: int, head_hash: str) -> None:
        self.ledger = ledger
        self.conn: Conn = conn
        """The transaction's connection, for projections' own rows: engine-neutral SQL only
        (``holon.ledger.sql``); events are written through ``append``, read through ``find``."""
        self.head_seq = head_seq
        self.head_hash = head_hash
        self.appended: list[Event] = []

    def append(self, *new: NewEvent) -> list[Event]:
        """Append events; returns the stored events (the originals for known idempotency keys)."""
        return self._insert(new)

    def _insert(self, new: Sequence[NewEvent]) -> list[Event]:
        """Encode, chain, fold and store ``new`` plus whatever the hooks derive, in one statement."""
        rows: list[tuple[Any, ...]] = []
        blobs: list[BlobBody] = []
        out, inserted = self._prepare(new, rows, blobs)
        fresh = inserted
        for _ in range(_MAX_DERIVATION_DEPTH):
            if not fresh:
                break
            self.appended.extend(fresh)
            derived: list[NewEvent] = []
            for hook in self.ledger.hooks:
                derived.extend(hook.apply(self, fresh))
            fresh = self._prepare(derived, rows, blobs)[1] if derived else []
        else:
            if fresh:
                raise LedgerError("derived events keep deriving more events; a hook is looping")
        if not rows:
            return out
        ledger = self.ledger
        # The clock is read only for blobs, as before the engine seam (a fake clock counts reads).
        ledger.engine.insert(self.conn, rows, blobs, now_us=ledger.clock.now_us() if blobs else 0)
        return out

    def _prepare(
        self,
        new: Sequence[NewEvent],
        rows: list[tuple[Any, ...]],
        blobs: list[BlobBody],
    ) -> tuple[list[Event], list[Event]]:
        """Turn ``new`` into rows (appended to ``rows``); returns (result per input, newly inserted)."""
        ledger = self.ledger
        out: list[Event] = []
        inserted: list[Event] = []
        seen_keys: dict[str, Event] = {}
        threshold, preview = ledger.blob_threshold, ledger.preview_chars
        now_us = ledger.clock.now_us
        seq, prev = self.head_seq, self.head_hash
        for ne in new:
            enc = encode_payload(ne.payload, blob_threshold=threshold, preview_chars=preview)
            key = ne.idempotency_key
            if key is not None:
                prior = seen_keys.get(key) or self._by_key(key)
                if prior is not None:
                    self._check_same(prior, ne, enc.text, key)
                    out.append(prior)
                    continue
            seq += 1
            # The payload is encoded once: its bytes are hashed, its text stored; the header is
            # a tuple in column order, hashed and stored as it is (no dict per event).
            header = header_values(ne, seq=seq, event_id=new_id("evt"), ts_us=now_us())
            prev = chain_hash_of(prev, header, enc.data)
            rows.append((*header, enc.text, prev))
            event = new_event(*header, enc.payload, prev)
            self.head_seq, self.head_hash = seq, prev
            if enc.blobs:
                blobs.extend(enc.blobs)
            inserted.append(event)
            out.append(event)
            if key is not None:
                seen_keys[key] = event
        return out, inserted

    def flush_hooks(self) -> None:
        """Write what the hooks hold (projection rows) now, so that reads later in this same
        transaction see it; COMMIT flushes again whatever changes after (group commit runs several
        callers' bodies in one transaction, each reading what the ones before it wrote)."""
        for hook in self.ledger.hooks:
            hook.flush(self)

    def find(self, q: EventQuery) -> list[Event]:
        """Events matching ``q`` as this transaction sees them (with what it has written), decoded."""
        return self.ledger.find(q)  # the ledger's one connection is this transaction's

    def find_keys(self, q: EventQuery) -> list[EventKey]:
        """``(seq, agent_id, type, turn_id)`` of events matching ``q`` in this transaction; nothing decoded."""
        return self.ledger.find_keys(q)

    def _by_key(self, key: str) -> Event | None:
        row = self.conn.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE idempotency_key = ?", (key,)).fetchone()
        return None if row is None else row_to_event(row)

    def _check_same(self, prior: Event, ne: NewEvent, text: str, key: str) -> None:
        row = self.conn.execute("SELECT payload FROM events WHERE seq = ?", (prior.seq,)).fetchone()
        if row is not None:
            prior_text = row[0]
        else:  # the prior is earlier in this same batch and not inserted yet: encode its stored form
            ledger = self.ledger
            prior_text = encode_payload(
                prior.payload, blob_threshold=ledger.blob_threshold, preview_chars=ledger.preview_chars
            ).text
        same_payload = prior_text == text
        if prior.agent_id != ne.agent_id or prior.type != ne.payload.type or not same_payload:
            raise IdempotencyConflict(
                f"idempotency key {key!r} was already used by event {prior.seq} with different content"
            )


@dataclass(frozen=True, slots=True)
class VerifyResult:
    ok: bool
    events: int
    first_bad_seq: int | None
    problem: str | None = None
    bad_rows: tuple[tuple[int, str], ...] = ()
    """Up to ``MAX_REPORTED`` bad rows as ``(seq, reason)``, in order."""
    bad_row_count: int = 0
    lost: int = 0
    """Events the anchor says were committed that the database no longer holds."""
    anchor_seq: int | None = None


@dataclass(frozen=True, slots=True)
class BlobText:
    """A large text read back from the blob store; ``text`` is ``None`` when its body was pruned."""

    hash: str
    size: int
    preview: str
    text: str | None

    @property
    def pruned(self) -> bool:
        return self.text is None


class Ledger:
    """The append-only event store of one holon home."""

    def __init__(
        self,
        db: Database | Engine,
        *,
        clock: Clock,
        blob_threshold: int = 16_384,
        preview_chars: int = 400,
        hooks: Sequence[TransactionHook] = (),
        anchor: Anchor | None = None,
        create: bool = True,
    ) -> None:
        """Open the ledger in ``db`` (a SQLite ``Database``, or any ``Engine``). ``create``: a
        missing database may be created (never an existing one); ``anchor``: where to record each
        commit outside the database."""
        self.engine: Engine = SqliteEngine(db) if isinstance(db, Database) else db
        self.clock = clock
        self.blob_threshold = blob_threshold
        self.preview_chars = preview_chars
        self.hooks: list[TransactionHook] = list(hooks)
        self._lock = threading.RLock()
        self._known_head: int | None = None
        self._read_head: int | None = None  # inside ``reading`` (under the lock)
        self._tx: Transaction | None = None  # the open write transaction (under the lock)
        self.anchor = anchor
        self._conn = self._open(create=create)
        self._refusal = self._check_anchor_on_open()

    @property
    def db(self) -> Database:
        """The SQLite engine's ``Database`` (its file, pragmas and raw connections), for what is
        SQLite's alone: benchmarks against raw ``sqlite3``, and tests that look inside the file."""
        engine = self.engine
        if not isinstance(engine, SqliteEngine):
            raise LedgerError(f"this ledger is not on SQLite but on {engine.dialect} ({engine.location})")
        return engine.db

    def _open(self, *, create: bool) -> Conn:
        """Open (creating only when absent and ``create`` is set, ``holon init``) and migrate.

        A database that is missing while its anchor says events were committed is not created
        afresh: that would hide a lost ledger behind a new, empty one.
        """
        engine = self.engine
        anchor = self.anchor
        if create and anchor is not None and not engine.exists():
            mark = anchor.read()
            if mark is not None and mark.seq > 0:
                raise LedgerError(
                    f"the ledger database {engine.location} is missing, but its anchor {anchor.path} (a file beside "
                    f"it) says {mark.seq} events were committed: restore the database from a backup, or remove the "
                    "anchor to start an empty ledger"
                )
        created = engine.open(create=create, now_us=self.clock.now_us)
        if created and anchor is not None:
            anchor.reset(0, GENESIS_HASH)
        return engine.connection()

    def _check_anchor_on_open(self) -> str | None:
        """Compare the anchor with the database (two lookups); a problem refuses every write.

        Appending to a ledger that lost committed events would overwrite the anchor's evidence of
        the loss; reads (verify, tail, export) still work.
        """
        if self.anchor is None:
            return None
        try:
            mark = self.anchor.read()
        except LedgerError as e:  # a damaged anchor: what was committed is unknown, so no writes
            return e.message
        if mark is None:  # a home older than anchors: start one at the current head
            seq, h, _ts = self.engine.head(self._conn)
            self.anchor.reset(seq, h)
            return None
        problem, _lost = check_anchor(self._conn, mark, text_bytes=self.engine.text_bytes)
        return problem

    # --- writing ----------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        with self._lock:
            tx = self._begin()
            try:
                yield tx
                self._commit(tx)
            except BaseException:
                self._abort(tx)
                raise
            finally:
                self._tx = None
            self._committed(tx)

    # ``transaction``'s steps, shared with ``append``, which runs them without the generator of a
    # context manager (one per call: 1.3 us of a single append's CPU; issue 18, step 5).

    def _begin(self) -> Transaction:
        """``BEGIN`` (the engine's append lock) with the head; hooks reset when another process
        moved it. Under the lock."""
        if self._refusal is not None:
            raise IntegrityError(f"{self._refusal}; writes are refused: run 'holon ledger verify'")
        conn, (seq, h, _ts) = self.engine.begin_append()
        tx = Transaction(self, conn, seq, h)
        try:
            if seq != self._known_head:
                for hook in self.hooks:
                    hook.reset()
        except BaseException:
            self._abort(tx)
            raise
        self._tx = tx
        return tx

    def _commit(self, tx: Transaction) -> None:
        for hook in self.hooks:
            # ``settle`` (optional) may keep rows for a later commit; ``flush`` writes them.
            getattr(hook, "settle", hook.flush)(tx)
        self.engine.commit(tx.conn)

    def _abort(self, tx: Transaction) -> None:
        self.engine.rollback(tx.conn)
        self._known_head = None
        for hook in self.hooks:
            hook.reset()

    def _committed(self, tx: Transaction) -> None:
        self._known_head = tx.head_seq
        if self.anchor is not None and tx.appended:
            self.anchor.record(tx.head_seq, tx.head_hash)

    @property
    def open_transaction(self) -> Transaction | None:
        """The write transaction open in this process, when the caller holds the ledger's lock
        inside it (a read in a transaction's body), else ``None``."""
        return self._tx

    @property
    def refusal(self) -> str | None:
        """Why writes are refused (the anchor says committed events are missing), or ``None``."""
        return self._refusal

    def append(self, *events: NewEvent) -> list[Event]:
        """Append ``events`` atomically; returns them as stored, in order. (``transaction``'s
        steps, inline.)"""
        with self._lock:
            tx = self._begin()
            try:
                out = tx._insert(events)
                self._commit(tx)
            except BaseException:
                self._abort(tx)
                raise
            finally:
                self._tx = None
            self._committed(tx)
            return out

    def add_hook(self, hook: TransactionHook) -> None:
        self.hooks.append(hook)
        self._known_head = None

    # --- reading ----------------------------------------------------------------------------

    def head(self) -> int:
        with self._lock:
            return self.engine.head(self._conn)[0]

    @contextmanager
    def reading(self) -> Iterator[int]:
        """Hold the ledger's lock over reads that must agree with each other and with the hooks'
        in-memory state; yields the head as the ledger's connection saw it when the outermost
        such block began (inside an open transaction: with what it appended). Nested blocks
        read no head of their own: a caller gathering many reads wraps them in one block. An
        append inside a block moves the head past the yielded one (a reader comparing it with
        the hooks' state then sees they differ)."""
        with self._lock:
            if self._read_head is not None:
                yield self._read_head
                return
            self._read_head = self.engine.head(self._conn)[0]
            try:
                yield self._read_head
            finally:
                self._read_head = None

    def get(self, seq: int) -> Event:
        with self._lock:
            row = self._conn.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE seq = ?", (seq,)).fetchone()
        if row is None:
            raise NotFoundError(f"no event with seq {seq}")
        return row_to_event(row)

    def read(
        self,
        after: int = 0,
        *,
        agent_id: str | None = None,
        limit: int | None = None,
        chunk: int = 2_000,
    ) -> Iterator[Event]:
        """Events with ``seq > after`` in order, optionally for one agent, fetched in chunks."""
        for row in self.read_rows(after, agent_id=agent_id, limit=limit, chunk=chunk):
            yield row_to_event(row)

    def read_rows(
        self, after: int = 0, *, agent_id: str | None = None, limit: int | None = None, chunk: int = 2_000
    ) -> Iterator[Row]:
        """Raw rows (columns as in ``EVENT_COLUMNS``) with ``seq > after``; for verify, replay, export."""
        remaining = limit
        cursor = after
        while remaining is None or remaining > 0:
            n = chunk if remaining is None else min(chunk, remaining)
            with self._lock:
                rows = self.engine.read_rows(self._conn, cursor, agent_id=agent_id, limit=n)
            if not rows:
                return
            yield from rows
            cursor = rows[-1][0]
            if remaining is not None:
                remaining -= len(rows)

    def tail(self, n: int, *, agent_id: str | None = None) -> list[Event]:
        where = "WHERE agent_id = ?" if agent_id else ""
        params: tuple[object, ...] = (agent_id, n) if agent_id else (n,)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {EVENT_COLUMNS} FROM events {where} ORDER BY seq DESC LIMIT ?", params
            ).fetchall()
        return [row_to_event(r) for r in reversed(rows)]

    def recent(self, agent_id: str, types: tuple[str, ...], *, limit: int, before: int | None = None) -> list[Event]:
        """The newest ``limit`` events of ``types`` for one agent (before seq ``before``), oldest first.

        Walks the agent's index backwards from the end, so the cost depends on how recent the
        matches are, not on how long the ledger is.
        """
        index = self.recent_index(agent_id, types, limit=limit, before=before)
        return self.get_many([seq for seq, _type, _turn in index])

    def recent_index(
        self, agent_id: str, types: tuple[str, ...], *, limit: int, before: int | None = None
    ) -> list[tuple[int, str, str | None]]:
        """Like ``recent`` but only ``(seq, type, turn_id)``: nothing decoded, for callers that cache.

        One bounded walk per type down the covering index ``events_agent_type`` (migration 4),
        merged: the newest ``limit`` overall are among each type's newest ``limit``. No table row is
        read, so the cost does not grow with the ledger.
        """
        upper = before if before is not None else 2**62
        with self._lock:
            found = self.engine.recent_index(
                self._conn, agent_id, list(dict.fromkeys(types)), limit=limit, before=upper
            )
        found.sort()
        return found[-limit:] if limit else []

    def get_many(self, seqs: list[int]) -> list[Event]:
        """Events by sequence number, in the order asked (missing ones are skipped)."""
        if not seqs:
            return []
        marks = ", ".join("?" for _ in seqs)
        with self._lock:
            rows = self._conn.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE seq IN ({marks})", seqs).fetchall()
        by_seq = {r[0]: row_to_event(r) for r in rows}
        return [by_seq[s] for s in seqs if s in by_seq]

    # --- named, typed reads (the storage seam: nothing outside holon.ledger/projections writes SQL
    # over ``events``; see RFC 0001, "The storage seam") ----------------------------------------

    def find(self, q: EventQuery) -> list[Event]:
        """Events matching ``q``, decoded (upcast) to their current payload models."""
        sql, params = self.engine.sql(q, EVENT_COLUMNS)
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return [row_to_event(r) for r in rows]

    def find_seqs(self, q: EventQuery) -> list[int]:
        """Only the sequence numbers of events matching ``q``: nothing is decoded."""
        sql, params = self.engine.sql(q, "seq")
        with self._lock:
            return [int(r[0]) for r in self._conn.execute(sql, params).fetchall()]

    def find_keys(self, q: EventQuery) -> list[EventKey]:
        """``(seq, agent_id, type, turn_id)`` of events matching ``q``: the envelope, no payload."""
        sql, params = self.engine.sql(q, "seq, agent_id, type, turn_id")
        with self._lock:
            return [EventKey(*r) for r in self._conn.execute(sql, params).fetchall()]

    def count(self, q: EventQuery) -> int:
        """How many events match ``q`` (``limit`` and order are ignored)."""
        sql, params = self.engine.count_sql(q)
        with self._lock:
            return int(self._conn.execute(sql, params).fetchone()[0])

    def exists(self, q: EventQuery) -> bool:
        return bool(self.find_seqs(replace(q, limit=1)))

    # Reads on the hot path of the API's reply tracking: the engine looks into the payload with
    # its own JSON operators down the covering index ``events_agent_type``, so nothing is decoded.

    def turn_taking(self, agent_id: str, input_seq: int) -> tuple[int, str] | None:
        """``(seq, turn id)`` of the agent's latest ``turn.started`` after ``input_seq`` that took that input."""
        with self._lock:
            return self.engine.turn_taking(self._conn, agent_id, input_seq)

    def turn_settled_seq(self, agent_id: str, turn_id: str, *, after: int) -> int | None:
        """The seq of the ``turn.settled`` of ``turn_id`` (after seq ``after``), or ``None`` while it runs."""
        with self._lock:
            return self.engine.turn_settled_seq(self._conn, agent_id, turn_id, after=after)

    def round_ended(self, turn_id: str, *, after: int, upto: int) -> bool:
        """Whether a model round of ``turn_id`` ended (a ``model.responded``) in ``(after, upto]``."""
        with self._lock:
            return self.engine.round_ended(self._conn, turn_id, after=after, upto=upto)

    def query(self, sql: str, params: Params = ()) -> list[Row]:
        """Run a read query on the ledger's connection (for projection reads on hot paths); the
        SQL is engine-neutral (``holon.ledger.sql``)."""
        with self._lock:
            return self._conn.fetchall(sql, params)

    def has_table(self, name: str) -> bool:
        """Whether the ledger's database holds a table ``name`` (a projection's bookkeeping)."""
        with self._lock:
            return self.engine.has_table(self._conn, name)

    def payload_text(self, seq: int) -> str:
        with self._lock:
            row = self._conn.execute("SELECT payload FROM events WHERE seq = ?", (seq,)).fetchone()
        if row is None:
            raise NotFoundError(f"no event with seq {seq}")
        return str(row[0])

    # --- blobs ------------------------------------------------------------------------------

    def resolve(self, value: LargeText | None) -> str | BlobText | None:
        """A ``LargeText`` as full text: plain strings as they are, blob refs read from the store."""
        if value is None or isinstance(value, str):
            return value
        return self.read_blob(value)

    def read_blob(self, ref: BlobRef) -> BlobText:
        with self._lock:
            body = self.engine.blob_body(self._conn, ref.blob)
        text = None if body is None else body.decode("utf-8")
        return BlobText(ref.blob, ref.size, ref.preview, text)

    def prune_blobs(self, *, older_than_us: int) -> int:
        """Drop bodies of blobs last referenced before ``older_than_us``; events stay intact."""
        now = self.clock.now_us()
        with self._lock:
            if self._refusal is not None:
                raise IntegrityError(f"{self._refusal}; writes are refused: run 'holon ledger verify'")
            return self.engine.prune_blobs(self._conn, older_than_us=older_than_us, now_us=now)

    # --- integrity and size -----------------------------------------------------------------

    def verify(self, *, check_blobs: bool = True) -> VerifyResult:
        """Check the storage (``Engine.verify_pages``: SQLite's ``PRAGMA quick_check``), every
        row's place in the gapless hash chain, the anchor outside the database, and blob bodies.
        Bad rows are listed as ``(seq, reason)``.

        Raises ``LedgerError`` (exit 5) when the file itself is damaged (the rows cannot be trusted
        or read); returns ``ok=False`` (exit 1) for bad rows, a broken chain or lost events.
        """
        engine = self.engine
        try:
            problem = engine.verify_pages()
            if problem is not None:
                raise LedgerError(problem)
            with engine.reader() as conn:
                # The anchor first, then the snapshot: a commit in between makes the database
                # longer than the anchor (fine), never the anchor longer than the snapshot.
                mark, unreadable = self._read_anchor()
                conn.execute("BEGIN")  # one snapshot for the rows and the anchor comparison
                try:
                    rows = verify_rows(conn, text_bytes=engine.text_bytes)
                    anchor_problem, lost = check_anchor(conn, mark, text_bytes=engine.text_bytes)
                    anchor_problem = anchor_problem or unreadable
                finally:
                    conn.execute("ROLLBACK")
            bad_blob = engine.first_bad_blob() if check_blobs else None
        except LedgerError:
            raise
        except Exception as e:
            err = engine.translate(e)
            if err is None:
                raise
            raise err from e
        first_bad = rows.bad[0][0] if rows.bad else None
        if rows.bad:
            seq, reason = rows.bad[0]
            more = f" (and {rows.bad_count - 1} more bad rows)" if rows.bad_count > 1 else ""
            problem = f"event {seq}: {reason}{more}"
        elif anchor_problem is not None:
            problem = anchor_problem
        elif bad_blob is not None:
            problem = f"blob {bad_blob}: body does not match its hash"
        else:
            problem = None
        if problem is not None and anchor_problem is not None and anchor_problem not in problem:
            problem = f"{problem}; {anchor_problem}"
        return VerifyResult(
            ok=problem is None,
            events=rows.events,
            first_bad_seq=first_bad,
            problem=problem,
            bad_rows=tuple(rows.bad),
            bad_row_count=rows.bad_count,
            lost=lost,
            anchor_seq=mark.seq if mark is not None else None,
        )

    def _read_anchor(self) -> tuple[AnchorMark | None, str | None]:
        """The anchor's mark, or the reason it cannot be read (a damaged anchor file)."""
        if self.anchor is None:
            return None, None
        try:
            return self.anchor.read(), None
        except LedgerError as e:
            return None, e.message

    def start_check(self, *, tail_rows: int = 64, quick_check_budget_s: float = 1.0, pages: bool = True) -> str | None:
        """The bounded check before serving: the storage's structure, the anchor, the last rows' chain.

        Returns the first problem, or ``None``. The engine's page check (SQLite's ``PRAGMA
        quick_check``, a pass over every page without matching indexes to tables) runs for at most
        ``quick_check_budget_s``: enough for a ledger of a few hundred MB; a larger one is left to
        ``holon ledger verify`` and the skip is logged. ``pages=False`` leaves it out (the daemon
        runs it in a thread of its own beside its start-up). The anchor and tail checks cost the
        same at any size.
        """
        engine = self.engine
        try:
            problem = engine.verify_pages(budget_s=quick_check_budget_s) if pages else None
            if problem == QUICK_CHECK_SKIPPED:
                _log().warning("ledger.start_check.partial", reason=problem, db=engine.location)
            elif problem is not None:
                return problem
            with engine.reader() as conn:
                mark = self.anchor.read() if self.anchor is not None else None  # before the snapshot
                conn.execute("BEGIN")
                try:
                    anchor_problem, _lost = check_anchor(conn, mark, text_bytes=engine.text_bytes)
                    rows = tail_check(conn, rows=tail_rows, text_bytes=engine.text_bytes)
                finally:
                    conn.execute("ROLLBACK")
        except LedgerError as e:
            return e.message
        except Exception as e:
            err = engine.translate(e)
            if err is None:
                raise
            return err.message
        if anchor_problem is not None:
            return anchor_problem
        if rows.bad:
            seq, reason = rows.bad[0]
            return f"event {seq}: {reason}"
        return None

    def stats(self) -> LedgerStats:
        """Counts over the whole ledger, read on a connection of its own (``Engine.stats``)."""
        return self.engine.stats()

    def close(self) -> None:
        with self._lock:
            if self.anchor is not None:
                self.anchor.close()
            self.engine.close()


def canonical_event(event: Event) -> bytes:
    """Canonical JSON of an event (envelope and payload), for display and comparisons."""
    values: dict[str, Any] = {name: getattr(event, name) for name in EVENT_FIELDS}
    values["payload"] = event.payload.model_dump(mode="json")
    return canonical_json(values)
