"""The ledger: append-only, hash-chained, gapless events in SQLite.

``Ledger.append(*events)`` is one write transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``): every
event in it, every blob it references, every projection row its hooks fold and every event those
hooks derive commit together or not at all. ``Ledger.transaction()`` opens the same kind of
transaction for callers that must read and append atomically.

Hooks (``TransactionHook``) are how synchronous projections ride along: ``apply`` folds events
as they are appended and may return derived events (appended in the same transaction), ``flush``
writes pending rows just before COMMIT, ``reset`` drops in-memory state after a rollback or when
another process moved the ledger head.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any, Protocol

from holon.clock import Clock
from holon.errors import EventValidationError, IdempotencyConflict, IntegrityError, LedgerError, NotFoundError
from holon.ids import new_id
from holon.ledger.anchor import Anchor, AnchorMark
from holon.ledger.codec import (
    BlobBody,
    canonical_json,
    chain_hash_of,
    decode_payload,
    encode_payload,
)
from holon.ledger.damage import empty_file_error, file_state, inspect_existing, translate
from holon.ledger.db import Database, SqliteConn
from holon.ledger.envelope import EVENT_FIELDS, GENESIS_HASH, Event, NewEvent, header_values
from holon.ledger.events import BlobRef, LargeText, Payload
from holon.ledger.migrations import create_database, migrate
from holon.ledger.query import EventKey, EventQuery
from holon.ledger.sql import Conn, Params, Row
from holon.ledger.verify import QUICK_CHECK_SKIPPED, check_anchor, quick_check, tail_check, verify_rows
from holon.paths import tighten

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

EVENT_COLUMNS = ", ".join(EVENT_FIELDS)
"""The ``events`` columns in ``Event`` field order (a row read with them decodes by ``row_to_event``)."""
EVENT_INSERT = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES ({', '.join('?' for _ in EVENT_FIELDS)})"
"""One row of ``events``: values in ``EVENT_FIELDS`` order (``event_row``)."""
_INSERT_BLOB = (
    "INSERT INTO blobs(hash, size, body, created_us, referenced_us) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT(hash) DO UPDATE SET referenced_us = excluded.referenced_us, "
    "body = coalesce(blobs.body, excluded.body), "
    "pruned_us = CASE WHEN blobs.body IS NULL THEN NULL ELSE blobs.pruned_us END"
)
_MAX_DERIVATION_DEPTH = 4


class TransactionHook(Protocol):
    def apply(self, tx: Transaction, events: Sequence[Event]) -> Sequence[NewEvent]:
        """Fold ``events``; return events to derive from them (appended in the same transaction)."""
        ...

    def flush(self, tx: Transaction) -> None:
        """Write pending state: just before COMMIT, and whenever ``Transaction.flush_hooks`` asks
        (reads later in the same transaction must see it); a second call with nothing new is cheap."""
        ...

    def reset(self) -> None:
        """Forget in-memory state (after a rollback, or when another process appended)."""
        ...


def _log() -> Any:  # structlog's logger is dynamically typed
    from holon.logs import get_logger

    return get_logger("holon.ledger")


_row_values = itemgetter(*EVENT_FIELDS)


def row_to_event(row: Sequence[Any]) -> Event:  # Any: a sqlite3 row's values
    """An ``events`` row (``EVENT_COLUMNS``) as an ``Event``, its payload decoded and upcast."""
    # Positional (rows come in EVENT_FIELDS order, the payload second to last): no dict per row.
    seq, id_, agent, type_, version, ts_us, origin, authority, turn, work_item, task, episode, key, payload, hash_ = row
    return Event(
        seq, id_, agent, type_, version, ts_us, origin, authority, turn, work_item, task, episode, key,
        _decode(seq, type_, version, payload), hash_,
    )  # fmt: skip


def event_row(envelope: Mapping[str, Any], payload_text: str, hash_: str) -> tuple[Any, ...]:
    """The ``events`` row (``EVENT_INSERT``'s values) of a header envelope, its payload text and hash."""
    values: tuple[Any, ...] = _row_values({**envelope, "payload": payload_text, "hash": hash_})
    return values


def _decode(seq: int, type_: str, version: int, payload: str | bytes) -> Payload:
    try:
        return decode_payload(type_, version, payload)
    except EventValidationError as e:
        raise EventValidationError(f"event {seq} cannot be read: {e}; run 'holon ledger verify'") from e


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
        try:
            if blobs:
                now = self.ledger.clock.now_us()
                self.conn.executemany(_INSERT_BLOB, [(b.hash, len(b.data), b.data, now, now) for b in blobs])
            self.conn.executemany(EVENT_INSERT, rows)
        except self.conn.IntegrityError as e:
            raise LedgerError(f"append refused by the database: {e}") from e
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
            event = Event(*header, enc.payload, prev)
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


@dataclass(frozen=True, slots=True)
class LedgerStats:
    events: int
    head_seq: int
    by_type: dict[str, dict[str, int]]
    """type -> {"count": n, "payload_bytes": b}"""
    blobs: int
    blob_bytes: int
    blobs_pruned: int
    db_bytes: int


class Ledger:
    """The append-only event store of one holon home."""

    def __init__(
        self,
        db: Database,
        *,
        clock: Clock,
        blob_threshold: int = 16_384,
        preview_chars: int = 400,
        hooks: Sequence[TransactionHook] = (),
        anchor: Anchor | None = None,
        create: bool = True,
    ) -> None:
        """Open the ledger in ``db``. ``create``: a missing database file may be created (never an
        existing one); ``anchor``: where to record each commit outside the database file."""
        self.db = db
        self.clock = clock
        self.blob_threshold = blob_threshold
        self.preview_chars = preview_chars
        self.hooks: list[TransactionHook] = list(hooks)
        self._lock = threading.RLock()
        self._known_head: int | None = None
        self._read_head: int | None = None  # inside ``reading`` (under the lock)
        self.anchor = anchor
        self._conn = self._open(create=create)
        self._refusal = self._check_anchor_on_open()

    def _open(self, *, create: bool) -> SqliteConn:
        """Connect, creating the file only when it is absent and ``create`` is set (``holon init``).

        An empty (0-byte) file or a SQLite file without holon's schema is refused, never migrated
        into: that would hide a truncated or a wrong database behind a fresh, empty ledger.
        """
        path = self.db.path
        state = file_state(path)
        if state == "empty":
            raise empty_file_error(path)
        if state == "absent":
            if not create:
                raise LedgerError(f"there is no ledger database at {path} (run 'holon init')")
            anchor = self.anchor
            mark = anchor.read() if anchor is not None else None
            if anchor is not None and mark is not None and mark.seq > 0:
                raise LedgerError(
                    f"the ledger database {path} is missing, but its anchor {anchor.path} (a file beside it) "
                    f"says {mark.seq} events were committed: restore the database from a backup, or remove the "
                    "anchor to start an empty ledger"
                )
            try:
                created = create_database(path, now_us=self.clock.now_us())
            except OSError as e:
                raise LedgerError(f"cannot create the ledger database {path}: {e.strerror}") from e
            except sqlite3.Error as e:
                raise LedgerError(f"cannot create the ledger database {path}: {e}") from e
            if created and self.anchor is not None:
                self.anchor.reset(0, GENESIS_HASH)
        for suffix in ("", "-wal", "-shm"):
            tighten(path.with_name(path.name + suffix))
        try:
            inspect_existing(path)
            conn = self.db.connection()
            migrate(conn, now_us=self.clock.now_us(), create=False)
        except LedgerError:
            self.db.close()
            raise
        except Exception as e:
            err = translate(e, path)
            self.db.close()
            if err is None:
                raise
            raise err from e
        return conn

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
            seq, h = self._head(self._conn)
            self.anchor.reset(seq, h)
            return None
        problem, _lost = check_anchor(self._conn, mark)
        return problem

    # --- writing ----------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        with self._lock:
            if self._refusal is not None:
                raise IntegrityError(f"{self._refusal}; writes are refused: run 'holon ledger verify'")
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                seq, h = self._head(conn)
                if seq != self._known_head:
                    for hook in self.hooks:
                        hook.reset()
                tx = Transaction(self, conn, seq, h)
                yield tx
                for hook in self.hooks:
                    hook.flush(tx)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                self._known_head = None
                for hook in self.hooks:
                    hook.reset()
                raise
            self._known_head = tx.head_seq
            if self.anchor is not None and tx.appended:
                self.anchor.record(tx.head_seq, tx.head_hash)

    @property
    def refusal(self) -> str | None:
        """Why writes are refused (the anchor says committed events are missing), or ``None``."""
        return self._refusal

    def append(self, *events: NewEvent) -> list[Event]:
        """Append ``events`` atomically; returns them as stored, in order."""
        with self.transaction() as tx:
            return tx.append(*events)

    def add_hook(self, hook: TransactionHook) -> None:
        self.hooks.append(hook)
        self._known_head = None

    # --- reading ----------------------------------------------------------------------------

    @staticmethod
    def _head(conn: Conn) -> tuple[int, str]:
        row = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        return (0, GENESIS_HASH) if row is None else (row[0], row[1])

    def head(self) -> int:
        with self._lock:
            return self._head(self._conn)[0]

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
            self._read_head = self._head(self._conn)[0]
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
    ) -> Iterator[tuple[Any, ...]]:  # Any: a sqlite3 row's values
        """Raw rows (columns as in ``EVENT_COLUMNS``) with ``seq > after``; for verify, replay, export."""
        remaining = limit
        cursor = after
        where = "seq > ?" + (" AND agent_id = ?" if agent_id else "")
        while remaining is None or remaining > 0:
            n = chunk if remaining is None else min(chunk, remaining)
            params: tuple[object, ...] = (cursor, agent_id, n) if agent_id else (cursor, n)
            with self._lock:
                rows = self._conn.execute(
                    f"SELECT {EVENT_COLUMNS} FROM events WHERE {where} ORDER BY seq LIMIT ?", params
                ).fetchall()
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
        sql = (
            "SELECT seq, type, turn_id FROM events INDEXED BY events_agent_type "
            "WHERE agent_id = ? AND type = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
        )
        upper = before if before is not None else 2**62
        found: list[tuple[int, str, str | None]] = []
        with self._lock:
            for type_ in dict.fromkeys(types):
                found += self._conn.execute(sql, (agent_id, type_, upper, limit)).fetchall()
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
        sql, params = q.sql(EVENT_COLUMNS)
        with self._lock:
            rows = self._conn.execute(sql, params).fetchall()
        return [row_to_event(r) for r in rows]

    def find_seqs(self, q: EventQuery) -> list[int]:
        """Only the sequence numbers of events matching ``q``: nothing is decoded."""
        sql, params = q.sql("seq")
        with self._lock:
            return [int(r[0]) for r in self._conn.execute(sql, params).fetchall()]

    def find_keys(self, q: EventQuery) -> list[EventKey]:
        """``(seq, agent_id, type, turn_id)`` of events matching ``q``: the envelope, no payload."""
        sql, params = q.sql("seq, agent_id, type, turn_id")
        with self._lock:
            return [EventKey(*r) for r in self._conn.execute(sql, params).fetchall()]

    def count(self, q: EventQuery) -> int:
        """How many events match ``q`` (``limit`` and order are ignored)."""
        sql, params = q.count_sql()
        with self._lock:
            return int(self._conn.execute(sql, params).fetchone()[0])

    def exists(self, q: EventQuery) -> bool:
        return bool(self.find_seqs(replace(q, limit=1)))

    # Reads on the hot path of the API's reply tracking. They walk the covering index
    # ``events_agent_type`` (migration 4) and look into the payload with SQLite's JSON functions,
    # so nothing is decoded; the JSON layout stays the ledger's business.

    def turn_taking(self, agent_id: str, input_seq: int) -> tuple[int, str] | None:
        """``(seq, turn id)`` of the agent's latest ``turn.started`` after ``input_seq`` that took that input."""
        sql = (
            "SELECT seq, json_extract(payload, '$.turn_id') FROM events INDEXED BY events_agent_type "
            "WHERE agent_id = ? AND type = 'turn.started' AND seq > ? "
            "AND EXISTS (SELECT 1 FROM json_each(events.payload, '$.inputs') WHERE value = ?) "
            "ORDER BY seq DESC LIMIT 1"
        )
        with self._lock:
            row = self._conn.execute(sql, (agent_id, input_seq, input_seq)).fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def turn_settled_seq(self, agent_id: str, turn_id: str, *, after: int) -> int | None:
        """The seq of the ``turn.settled`` of ``turn_id`` (after seq ``after``), or ``None`` while it runs."""
        sql = (
            "SELECT seq FROM events INDEXED BY events_agent_type WHERE agent_id = ? AND type = 'turn.settled' "
            "AND seq > ? AND json_extract(payload, '$.turn_id') = ? LIMIT 1"
        )
        with self._lock:
            row = self._conn.execute(sql, (agent_id, after, turn_id)).fetchone()
        return None if row is None else int(row[0])

    def round_ended(self, turn_id: str, *, after: int, upto: int) -> bool:
        """Whether a model round of ``turn_id`` ended (a ``model.responded``) in ``(after, upto]``."""
        sql = (
            "SELECT 1 FROM events WHERE seq > ? AND seq <= ? AND type = 'model.responded' "
            "AND json_extract(payload, '$.turn_id') = ? LIMIT 1"
        )
        with self._lock:
            return self._conn.execute(sql, (after, upto, turn_id)).fetchone() is not None

    def query(self, sql: str, params: Params = ()) -> list[Row]:
        """Run a read query on the ledger's connection (for projection reads on hot paths); the
        SQL is engine-neutral (``holon.ledger.sql``)."""
        with self._lock:
            return self._conn.fetchall(sql, params)

    def has_table(self, name: str) -> bool:
        """Whether the ledger's database holds a table ``name`` (a projection's bookkeeping)."""
        with self._lock:
            return (
                self._conn.fetchone("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,))
                is not None
            )

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
            row = self._conn.execute("SELECT body FROM blobs WHERE hash = ?", (ref.blob,)).fetchone()
        if row is None:
            raise NotFoundError(f"no blob {ref.blob}")
        body = row[0]
        text = None if body is None else bytes(body).decode("utf-8")
        return BlobText(ref.blob, ref.size, ref.preview, text)

    def prune_blobs(self, *, older_than_us: int) -> int:
        """Drop bodies of blobs last referenced before ``older_than_us``; events stay intact."""
        now = self.clock.now_us()
        with self._lock:
            if self._refusal is not None:
                raise IntegrityError(f"{self._refusal}; writes are refused: run 'holon ledger verify'")
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                cur = conn.execute(
                    "UPDATE blobs SET body = NULL, pruned_us = ? WHERE body IS NOT NULL AND referenced_us < ?",
                    (now, older_than_us),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return int(cur.rowcount)

    # --- integrity and size -----------------------------------------------------------------

    def verify(self, *, check_blobs: bool = True) -> VerifyResult:
        """Check the file (``PRAGMA quick_check``), every row's place in the gapless hash chain,
        the anchor outside the file, and blob bodies. Bad rows are listed as ``(seq, reason)``.

        Raises ``LedgerError`` (exit 5) when the file itself is damaged (the rows cannot be trusted
        or read); returns ``ok=False`` (exit 1) for bad rows, a broken chain or lost events.
        """
        try:
            with self.db.reader() as conn:
                problem = quick_check(conn, self.db.path)
                if problem is not None:
                    raise LedgerError(problem)
                # The anchor first, then the snapshot: a commit in between makes the database
                # longer than the anchor (fine), never the anchor longer than the snapshot.
                mark, unreadable = self._read_anchor()
                conn.execute("BEGIN")  # one snapshot for the rows and the anchor comparison
                try:
                    rows = verify_rows(conn)
                    anchor_problem, lost = check_anchor(conn, mark)
                    anchor_problem = anchor_problem or unreadable
                finally:
                    conn.execute("ROLLBACK")
            bad_blob = self._first_bad_blob() if check_blobs else None
        except LedgerError:
            raise
        except Exception as e:
            err = translate(e, self.db.path)
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
        """The bounded check before serving: the file's structure, the anchor, the last rows' chain.

        Returns the first problem, or ``None``. ``PRAGMA quick_check`` (a pass over every page,
        without matching indexes to tables) runs for at most ``quick_check_budget_s``: enough
        for a ledger of a few hundred MB; a larger one is left to ``holon ledger verify`` and
        the skip is logged. ``pages=False`` leaves it out (the daemon runs it in a thread of its
        own beside its start-up). The anchor and tail checks cost the same at any size.
        """
        try:
            with self.db.reader() as conn:
                problem = quick_check(conn, self.db.path, budget_s=quick_check_budget_s) if pages else None
                if problem == QUICK_CHECK_SKIPPED:
                    _log().warning("ledger.start_check.partial", reason=problem, db=str(self.db.path))
                elif problem is not None:
                    return problem
                mark = self.anchor.read() if self.anchor is not None else None  # before the snapshot
                conn.execute("BEGIN")
                try:
                    anchor_problem, _lost = check_anchor(conn, mark)
                    rows = tail_check(conn, rows=tail_rows)
                finally:
                    conn.execute("ROLLBACK")
        except LedgerError as e:
            return e.message
        except Exception as e:
            err = translate(e, self.db.path)
            if err is None:
                raise
            return err.message
        if anchor_problem is not None:
            return anchor_problem
        if rows.bad:
            seq, reason = rows.bad[0]
            return f"event {seq}: {reason}"
        return None

    def _first_bad_blob(self) -> str | None:
        with self.db.reader() as conn:
            for h, body in conn.execute("SELECT hash, body FROM blobs WHERE body IS NOT NULL"):
                if hashlib.sha256(bytes(body)).hexdigest() != h:
                    return str(h)
        return None

    def stats(self) -> LedgerStats:
        """Counts over the whole ledger, read on a connection of its own (see ``Database.reader``)."""
        with self.db.reader() as conn:
            conn.execute("BEGIN")  # one snapshot for every count below
            by_type = {
                t: {"count": n, "payload_bytes": b}
                for t, n, b in conn.execute(
                    "SELECT type, count(*), sum(length(CAST(payload AS BLOB))) FROM events GROUP BY type ORDER BY type"
                )
            }
            blobs, blob_bytes, pruned = conn.execute(
                "SELECT count(*), coalesce(sum(length(body)), 0), count(pruned_us) FROM blobs"
            ).fetchone()
            page_count = conn.execute("PRAGMA page_count").fetchone()[0]
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
            head = self._head(conn)[0]
            conn.execute("COMMIT")
        total = sum(v["count"] for v in by_type.values())
        return LedgerStats(total, head, by_type, blobs, blob_bytes, pruned, page_count * page_size)

    def close(self) -> None:
        with self._lock:
            if self.anchor is not None:
                self.anchor.close()
            self.db.close()


def canonical_event(event: Event) -> bytes:
    """Canonical JSON of an event (envelope and payload), for display and comparisons."""
    values: dict[str, Any] = {name: getattr(event, name) for name in EVENT_FIELDS}
    values["payload"] = event.payload.model_dump(mode="json")
    return canonical_json(values)
