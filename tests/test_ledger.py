"""The ledger: append-only and gapless in the database itself, hash chain, idempotency, atomicity, blobs."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from helpers.engines import sqlite_only
from helpers.factories import agent_created, make_event

from holon.clock import FakeClock
from holon.config import load_settings
from holon.errors import ConflictError, IdempotencyConflict, NotFoundError
from holon.ledger import BlobText, NewEvent
from holon.ledger import events as ev
from holon.ledger.events import BlobRef
from holon.ledger.store import EVENT_COLUMNS
from holon.projections import Store

if TYPE_CHECKING:
    from conftest import EngineTarget

AGENT = "agt_alice"


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``), but those
    marked ``sqlite_only``."""
    return engine


def decision(i: int, **envelope: object) -> NewEvent:
    return make_event(AGENT, ev.DecisionRecorded(text=f"decision {i}"), **envelope)


@pytest.fixture
def seeded(store: Store) -> Store:
    """A store with an agent and ten decisions (seq 1..11)."""
    store.append(agent_created(AGENT, "alice"))
    for i in range(10):
        store.append(decision(i))
    assert store.ledger.head() == 11
    return store


class Intruder:
    """A plain connection of the driver to the ledger's database beside holon's, as an intruder
    would use (``?`` placeholders on both engines). ``refused`` is what a trigger's refusal raises."""

    def __init__(self, store: Store) -> None:
        self.pg = store.ledger.engine.dialect == "postgresql"
        if self.pg:
            import psycopg

            self.conn: Any = psycopg.connect(store.settings.storage.url, autocommit=True)
            self.refused: type[Exception] = psycopg.Error
        else:
            self.conn = sqlite3.connect(store.paths.db, isolation_level=None)
            self.refused = sqlite3.IntegrityError

    def execute(self, sql: str, params: Sequence[object] = ()) -> Any:
        if self.pg:
            from holon.ledger.pg.conn import pg_sql

            return self.conn.execute(pg_sql(sql), params)
        return self.conn.execute(sql, params)

    def without(self, trigger: str) -> None:
        """Switch a guard off as the database's owner could: SQLite drops the trigger; PostgreSQL
        (a superuser) turns every trigger off for the session."""
        if self.pg:
            self.conn.execute("SET session_replication_role = replica")
        else:
            self.conn.execute(f"DROP TRIGGER {trigger}")

    def close(self) -> None:
        self.conn.close()


def raw(store: Store) -> Intruder:
    return Intruder(store)


# --- enforced by the database -----------------------------------------------------------------


def test_update_and_delete_are_refused_by_the_database(seeded: Store) -> None:
    conn = raw(seeded)
    with pytest.raises(conn.refused, match="append-only"):
        conn.execute("UPDATE events SET payload = '{}' WHERE seq = 5")
    with pytest.raises(conn.refused, match="append-only"):
        conn.execute("UPDATE events SET ts_us = ts_us + 1")
    with pytest.raises(conn.refused, match="append-only"):
        conn.execute("DELETE FROM events WHERE seq = 11")
    with pytest.raises(conn.refused, match="append-only"):
        conn.execute("DELETE FROM events")
    conn.close()
    assert seeded.ledger.head() == 11
    assert seeded.ledger.verify().ok


def _row(store: Store, seq: int) -> list[object]:
    conn = raw(store)
    row = conn.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE seq = ?", (seq,)).fetchone()
    conn.close()
    return list(row)


def test_only_the_next_sequence_number_may_be_inserted(seeded: Store) -> None:
    placeholders = ", ".join("?" * 15)
    insert = f"INSERT INTO events ({EVENT_COLUMNS}) VALUES ({placeholders})"
    template = _row(seeded, 11)
    conn = raw(seeded)
    for bad_seq in (13, 100, 0, -1, 5):
        row = [bad_seq, f"evt_bad_{bad_seq}", *template[2:]]
        with pytest.raises(conn.refused, match="next sequence number"):
            conn.execute(insert, row)
    assert seeded.ledger.head() == 11
    # The next number is accepted by the trigger; the forged row then fails verification.
    conn.execute(insert, [12, "evt_forged", *template[2:]])
    conn.close()
    result = seeded.ledger.verify()
    assert not result.ok
    assert result.first_bad_seq == 12


def test_verify_finds_the_first_tampered_event(seeded: Store) -> None:
    assert seeded.ledger.verify() == seeded.ledger.verify()
    good = seeded.ledger.verify()
    assert good.ok and good.events == 11 and good.first_bad_seq is None
    conn = raw(seeded)
    conn.without("events_no_update")
    conn.execute("UPDATE events SET payload = ? WHERE seq = 6", ('{"text":"decision 4 (edited)","work_item_id":null}',))
    conn.close()
    result = seeded.ledger.verify()
    assert not result.ok
    assert result.first_bad_seq == 6
    assert result.events == 11  # every row is read; the bad ones are listed, the chain goes on
    assert result.bad_rows == ((6, "hash does not match its content"),)
    assert "6" in (result.problem or "")


@pytest.mark.parametrize(
    ("column", "value"),
    [("ts_us", 1), ("agent_id", "agt_mallory"), ("authority", "operator"), ("hash", "0" * 64), ("turn_id", "t")],
)
def test_verify_covers_every_envelope_field(seeded: Store, column: str, value: object) -> None:
    conn = raw(seeded)
    conn.without("events_no_update")
    conn.execute(f"UPDATE events SET {column} = ? WHERE seq = 4", (value,))
    conn.close()
    result = seeded.ledger.verify()
    assert not result.ok
    assert result.first_bad_seq == 4


def test_verify_finds_a_deleted_event(seeded: Store) -> None:
    conn = raw(seeded)
    conn.without("events_no_delete")
    conn.execute("DELETE FROM events WHERE seq = 7")
    conn.close()
    result = seeded.ledger.verify()
    assert not result.ok
    assert result.first_bad_seq == 7
    assert "gap" in (result.problem or "")


def test_verify_empty_ledger(store: Store) -> None:
    result = store.ledger.verify()
    assert result.ok and result.events == 0 and result.first_bad_seq is None


@sqlite_only("SQLite's pragmas")
def test_pragmas_are_applied(store: Store) -> None:
    conn = store.ledger.db.connection()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL, from HOLON_LEDGER_SYNCHRONOUS
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000


# --- idempotency ------------------------------------------------------------------------------


def test_idempotency_key_returns_the_original(seeded: Store) -> None:
    [first] = seeded.append(decision(99, idempotency_key="k-1"))
    [again] = seeded.append(decision(99, idempotency_key="k-1"))
    assert again == first
    assert again.seq == 12
    assert seeded.ledger.head() == 12
    assert seeded.ledger.stats().by_type["decision.recorded"]["count"] == 11
    # Mixed with new events: the known one is returned in place, the new one appended.
    out = seeded.append(decision(100), decision(99, idempotency_key="k-1"))
    assert [e.seq for e in out] == [13, 12]
    assert seeded.ledger.head() == 13
    assert seeded.ledger.verify().ok
    assert seeded.replay().ok


def test_idempotency_key_reused_with_other_content_is_a_conflict(seeded: Store) -> None:
    seeded.append(decision(99, idempotency_key="k-1"))
    with pytest.raises(IdempotencyConflict):
        seeded.append(decision(98, idempotency_key="k-1"))
    with pytest.raises(IdempotencyConflict):
        seeded.append(make_event("agt_other", ev.DecisionRecorded(text="decision 99"), idempotency_key="k-1"))
    with pytest.raises(IdempotencyConflict):
        seeded.append(make_event(AGENT, ev.FileTouched(path="decision 99"), idempotency_key="k-1"))
    # A conflicting batch leaves nothing behind, not even its other events.
    with pytest.raises(IdempotencyConflict):
        seeded.append(decision(200), decision(98, idempotency_key="k-1"))
    assert seeded.ledger.head() == 12
    assert isinstance(IdempotencyConflict("x"), ConflictError)


def test_idempotency_key_repeated_within_one_batch(seeded: Store) -> None:
    out = seeded.append(decision(1, idempotency_key="dup"), decision(1, idempotency_key="dup"))
    assert [e.seq for e in out] == [12, 12]
    assert seeded.ledger.head() == 12
    with pytest.raises(IdempotencyConflict):
        seeded.append(decision(5, idempotency_key="dup2"), decision(6, idempotency_key="dup2"))
    assert seeded.ledger.head() == 12


def test_idempotency_across_appends_in_one_transaction(seeded: Store) -> None:
    with seeded.ledger.transaction() as tx:
        [a] = tx.append(decision(1, idempotency_key="tx-k"))
        [b] = tx.append(decision(1, idempotency_key="tx-k"))
    assert a == b
    assert seeded.ledger.head() == 12


# --- atomicity --------------------------------------------------------------------------------


def test_transaction_that_raises_leaves_nothing(seeded: Store) -> None:
    before = seeded.ledger.stats()
    wm_before = seeded.working_memory(AGENT)

    class Boom(Exception):
        pass

    with pytest.raises(Boom), seeded.ledger.transaction() as tx:
        tx.append(make_event(AGENT, ev.WorkItemOpened(work_item_id="wi_1", title="ghost")))
        tx.append(decision(1000), make_event(AGENT, ev.FileTouched(path="ghost.py")))
        assert tx.head_seq == 14
        raise Boom
    assert seeded.ledger.head() == 11
    assert seeded.ledger.stats() == before
    assert seeded.ledger.verify().ok
    assert seeded.state("work_item", "wi_1") is None
    # The projector forgot what it folded in the rolled-back transaction.
    assert seeded.working_memory(AGENT) == wm_before
    [e] = seeded.append(decision(11))
    assert e.seq == 12
    wm = seeded.working_memory(AGENT)
    assert wm["active_work_item"] is None
    assert "ghost.py" not in wm["recent_files"]
    assert "decision 1000" not in wm["recent_decisions"]
    assert seeded.ledger.verify().ok
    assert seeded.replay().ok


def test_projection_failure_rolls_back_the_batch(seeded: Store) -> None:
    with pytest.raises(ConflictError, match="alice"):
        seeded.append(agent_created("agt_alice2", "alice"))
    assert seeded.ledger.head() == 11
    with pytest.raises(ConflictError):
        seeded.append(decision(50), agent_created("agt_bob", "bob"), agent_created("agt_bob2", "bob"))
    assert seeded.ledger.head() == 11
    with pytest.raises(NotFoundError):
        seeded.agent("bob")
    assert seeded.agent("alice").agent_id == AGENT
    assert seeded.ledger.verify().ok
    assert seeded.replay().ok
    [e] = seeded.append(agent_created("agt_bob", "bob"))
    assert e.seq == 12
    assert seeded.agent("bob").agent_id == "agt_bob"
    assert "decision 50" not in seeded.working_memory(AGENT)["recent_decisions"]
    assert seeded.replay().ok


def test_failed_append_then_other_store_appends(seeded: Store, clock: FakeClock) -> None:
    """After a rollback and appends by another connection, this store's projections stay exact."""
    other = Store.open(seeded.paths, seeded.settings, clock=clock)
    with pytest.raises(ConflictError):
        seeded.append(make_event(AGENT, ev.FileTouched(path="a.py")), agent_created("agt_x", "alice"))
    other.append(make_event(AGENT, ev.FileTouched(path="b.py")))
    seeded.append(make_event(AGENT, ev.FileTouched(path="c.py")))
    other.append(make_event(AGENT, ev.FileTouched(path="d.py")))
    assert seeded.working_memory(AGENT)["recent_files"] == ["d.py", "c.py", "b.py"]
    assert seeded.replay().ok
    other.close()


# --- blobs ------------------------------------------------------------------------------------

BIG = "".join(f"line {i}: ünïcødé output ✓\n" for i in range(4_000))


def tool_result(output: str, call_id: str = "call_1") -> NewEvent:
    return make_event(AGENT, ev.ToolResulted(call_id=call_id, tool="run_command", status="ok", output=output))


def test_large_output_is_stored_as_a_blob(seeded: Store) -> None:
    body = BIG.encode("utf-8")
    assert len(body) > seeded.ledger.blob_threshold
    [e] = seeded.append(tool_result(BIG))
    ref = e.payload.output  # type: ignore[attr-defined]
    assert isinstance(ref, BlobRef)
    assert ref.blob == hashlib.sha256(body).hexdigest()
    assert ref.size == len(body)
    assert ref.preview == BIG[: seeded.settings.ledger.blob_preview_chars]
    read = seeded.ledger.get(e.seq)
    assert read.payload == e.payload
    assert len(seeded.ledger.payload_text(e.seq)) < 2_000  # the event row keeps only the reference
    full = seeded.ledger.resolve(read.payload.output)  # type: ignore[attr-defined]
    assert isinstance(full, BlobText)
    assert full.text == BIG and not full.pruned
    assert seeded.ledger.resolve("small") == "small"
    assert seeded.ledger.resolve(None) is None
    stats = seeded.ledger.stats()
    assert (stats.blobs, stats.blob_bytes, stats.blobs_pruned) == (1, len(body), 0)
    # The same body again is stored once.
    seeded.append(tool_result(BIG, "call_2"))
    assert seeded.ledger.stats().blobs == 1
    assert seeded.ledger.verify().ok
    with pytest.raises(NotFoundError):
        seeded.ledger.read_blob(BlobRef(blob="f" * 64, size=1, preview=""))


def test_pruned_blobs_keep_their_reference_and_the_chain(seeded: Store, clock: FakeClock) -> None:
    [e] = seeded.append(tool_result(BIG))
    ref = e.payload.output  # type: ignore[attr-defined]
    assert isinstance(ref, BlobRef)
    assert seeded.ledger.prune_blobs(older_than_us=1) == 0  # referenced after that: kept
    assert not seeded.ledger.read_blob(ref).pruned
    clock.advance(seconds=10)
    assert seeded.ledger.prune_blobs(older_than_us=2**62) == 1
    assert seeded.ledger.prune_blobs(older_than_us=2**62) == 0  # already pruned
    pruned = seeded.ledger.read_blob(ref)
    assert pruned.pruned and pruned.text is None
    assert (pruned.hash, pruned.size, pruned.preview) == (ref.blob, ref.size, ref.preview)
    assert seeded.ledger.get(e.seq).payload == e.payload
    assert seeded.ledger.verify().ok
    stats = seeded.ledger.stats()
    assert (stats.blobs, stats.blob_bytes, stats.blobs_pruned) == (1, 0, 1)
    assert seeded.replay().ok
    # Appending the same body again restores it.
    seeded.append(tool_result(BIG, "call_2"))
    restored = seeded.ledger.read_blob(ref)
    assert restored.text == BIG and not restored.pruned
    stats = seeded.ledger.stats()
    assert (stats.blobs, stats.blob_bytes, stats.blobs_pruned) == (1, len(BIG.encode()), 0)
    assert seeded.ledger.verify().ok


def test_prune_keeps_recently_referenced_blobs(seeded: Store, clock: FakeClock) -> None:
    seeded.append(tool_result(BIG))
    clock.advance(seconds=100)
    cutoff = clock.now_us()
    other = BIG.replace("output", "résultat")
    [e2] = seeded.append(tool_result(other, "call_2"))
    assert seeded.ledger.prune_blobs(older_than_us=cutoff) == 1
    assert seeded.ledger.resolve(e2.payload.output).text == other  # type: ignore[attr-defined, union-attr]


def test_verify_detects_a_corrupted_blob_body(seeded: Store) -> None:
    [e] = seeded.append(tool_result(BIG))
    conn = raw(seeded)
    conn.execute("UPDATE blobs SET body = ?", (b"not the body",))
    conn.close()
    result = seeded.ledger.verify()
    assert not result.ok and "blob" in (result.problem or "")
    assert seeded.ledger.verify(check_blobs=False).ok
    assert e.seq == 12


def test_blob_threshold_comes_from_settings(home, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOLON_LEDGER_BLOB_THRESHOLD_BYTES", "1024")
    monkeypatch.setenv("HOLON_LEDGER_BLOB_PREVIEW_CHARS", "7")
    with Store.open(home, load_settings(home), clock=FakeClock()) as s:
        [small, big] = s.append(tool_result("x" * 1024), tool_result("x" * 1025, "call_2"))
        assert small.payload.output == "x" * 1024  # type: ignore[attr-defined]
        assert big.payload.output == BlobRef(  # type: ignore[attr-defined]
            blob=hashlib.sha256(b"x" * 1025).hexdigest(), size=1025, preview="x" * 7
        )


# --- reading and stats ------------------------------------------------------------------------


def test_stats_count_events_by_type(seeded: Store) -> None:
    seeded.append(make_event("agt_bob", ev.FileTouched(path="x")), make_event("agt_bob", ev.FileTouched(path="y")))
    seeded.append(tool_result("short"))
    stats = seeded.ledger.stats()
    counts = {t: v["count"] for t, v in stats.by_type.items()}
    assert counts == {"agent.created": 1, "decision.recorded": 10, "file.touched": 2, "tool.resulted": 1}
    assert stats.events == stats.head_seq == 14
    for t, v in stats.by_type.items():
        texts = [seeded.ledger.payload_text(e.seq) for e in seeded.ledger.read() if e.type == t]
        assert v["payload_bytes"] == sum(len(x.encode()) for x in texts)
    assert stats.db_bytes > 0
    assert (stats.blobs, stats.blobs_pruned) == (0, 0)


def test_reads(seeded: Store) -> None:
    seeded.append(make_event("agt_bob", ev.FileTouched(path="x")), decision(10))
    ledger = seeded.ledger
    assert [e.seq for e in ledger.read()] == list(range(1, 14))
    assert [e.seq for e in ledger.read(5, limit=3)] == [6, 7, 8]
    assert [e.seq for e in ledger.read(0, chunk=4)] == list(range(1, 14))
    assert [e.seq for e in ledger.read(agent_id="agt_bob")] == [12]
    assert [e.seq for e in ledger.read(11, agent_id=AGENT)] == [13]
    assert [e.seq for e in ledger.tail(2)] == [12, 13]
    assert [e.seq for e in ledger.tail(2, agent_id=AGENT)] == [11, 13]
    assert ledger.get(3).payload == ev.DecisionRecorded(text="decision 1")
    assert [e.ts_us for e in ledger.read()] == sorted(e.ts_us for e in ledger.read())
    assert len({e.id for e in ledger.read()}) == 13
    with pytest.raises(NotFoundError):
        ledger.get(99)
    with pytest.raises(NotFoundError):
        ledger.payload_text(0)


def test_events_survive_reopening(seeded: Store, clock: FakeClock) -> None:
    events = list(seeded.ledger.read())
    seeded.close()
    with Store.open(seeded.paths, seeded.settings, clock=clock) as again:
        assert list(again.ledger.read()) == events
        assert again.ledger.verify().ok
        [e] = again.append(decision(10))
        assert e.seq == 12
        assert again.replay().ok


@sqlite_only("the home's database file")
def test_db_file_is_where_the_home_says(seeded: Store, tmp_path: Path) -> None:
    assert seeded.paths.db.is_file()
    assert seeded.paths.db.is_relative_to(tmp_path)
