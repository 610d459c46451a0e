"""The ``Engine`` contract (``holon.ledger.engine``): what every storage engine must do, on a real one.

Each test runs once per engine of ``ENGINES`` through the ``engine_factory`` fixture: SQLite (a
file per name) and PostgreSQL (RFC 0008 step 4: an empty database of the test's own per name,
from ``pg_new_db``, dropped after it). Nothing below names a driver, a file or engine-specific SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from holon.clock import FakeClock
from holon.errors import LedgerError, NotFoundError
from holon.ledger import EventQuery, Ledger, NewEvent
from holon.ledger import events as ev
from holon.ledger.engine import Engine
from holon.ledger.envelope import GENESIS_HASH
from holon.ledger.rows import EVENT_COLUMNS
from holon.ledger.sqlite import Database, SqliteEngine

ENGINES = ["sqlite", "postgresql"]
"""The engines the contract runs on."""

EngineFactory = Callable[[str], Engine]
"""``make(name)``: a new, unopened engine on a database of its own named ``name`` (the same name
twice: the same database, as a second process would see it)."""


def _make(kind: str, root: Path, name: str, urls: dict[str, str], request: pytest.FixtureRequest) -> Engine:
    if kind == "sqlite":
        return SqliteEngine(Database(root / f"{name}.db", synchronous="OFF"))
    if kind == "postgresql":
        from holon.ledger.pg.engine import PgEngine

        if name not in urls:
            urls[name] = request.getfixturevalue("pg_new_db")(migrated=False).url
        return PgEngine(urls[name])
    raise AssertionError(f"no such engine {kind!r}")


@pytest.fixture(params=ENGINES)
def engine_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EngineFactory]:
    made: list[Engine] = []
    urls: dict[str, str] = {}

    def make(name: str = "ledger") -> Engine:
        engine = _make(request.param, tmp_path, name, urls, request)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.close()


def _ledger(engine: Engine, *, blob_threshold: int = 16_384) -> Ledger:
    return Ledger(engine, clock=FakeClock(), blob_threshold=blob_threshold)


def _seed(ledger: Ledger) -> None:
    """Two agents; a turn of ``a`` that took input 1, had a model round and settled."""
    ledger.append(NewEvent(agent_id="a", payload=ev.MessageReceived(text="hello"), idempotency_key="k1"))
    ledger.append(NewEvent(agent_id="b", payload=ev.MessageReceived(text="other")))
    ledger.append(
        NewEvent(agent_id="a", payload=ev.TurnStarted(turn_id="turn_1", inputs=[1]), turn_id="turn_1"),
        NewEvent(agent_id="a", payload=ev.ModelResponded(turn_id="turn_1", round=0, model="m", content="hi")),
        NewEvent(agent_id="a", payload=ev.TurnSettled(turn_id="turn_1", outcome="completed", reply="hi")),
    )


# --- lifecycle -----------------------------------------------------------------------------------


def test_open_creates_only_when_asked_and_migrates_once(engine_factory: EngineFactory) -> None:
    engine = engine_factory("ledger")
    assert not engine.exists()
    with pytest.raises(LedgerError, match="no ledger database"):
        engine.open(create=False, now_us=lambda: 1)
    assert not engine.exists()
    assert engine.open(create=True, now_us=lambda: 1) is True
    assert engine.exists()
    assert engine.migrate(now_us=2) == []
    conn = engine.connection()
    assert conn.dialect == engine.dialect
    assert engine.has_table(conn, "events") and engine.has_table(conn, "projection_rows")
    assert not engine.has_table(conn, "no_such_table")
    again = engine_factory("ledger")  # another process on the same database
    assert again.open(create=True, now_us=lambda: 3) is False


def test_an_empty_ledger_has_the_genesis_head(engine_factory: EngineFactory) -> None:
    engine = engine_factory("ledger")
    engine.open(create=True, now_us=lambda: 1)
    assert engine.head(engine.connection()) == (0, GENESIS_HASH, 0)
    conn, head = engine.begin_append()
    assert head == (0, GENESIS_HASH, 0)
    engine.rollback(conn)
    engine.rollback(conn)  # safe when nothing is open (after a failed COMMIT)


# --- the append path -----------------------------------------------------------------------------


def test_the_head_is_the_last_committed_event(engine_factory: EngineFactory) -> None:
    ledger = _ledger(engine_factory("ledger"))
    _seed(ledger)
    last = ledger.get(ledger.head())
    engine = ledger.engine
    assert engine.head(engine.connection()) == (last.seq, last.hash, last.ts_us)
    conn, head = engine.begin_append()
    try:
        assert head == (last.seq, last.hash, last.ts_us)
    finally:
        engine.rollback(conn)


def test_rows_are_stored_and_read_back_as_they_are(engine_factory: EngineFactory) -> None:
    ledger = _ledger(engine_factory("ledger"))
    _seed(ledger)
    engine = ledger.engine
    rows = engine.read_rows(engine.connection(), 0, limit=100)
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5]
    assert [r[0] for r in engine.read_rows(engine.connection(), 2, limit=2)] == [3, 4]
    assert [r[0] for r in engine.read_rows(engine.connection(), 0, agent_id="b", limit=100)] == [2]
    assert tuple(rows[0]) == tuple(
        engine.connection().execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE seq = ?", (1,)).fetchone()
    )

    copy = engine_factory("copy")
    copy.open(create=True, now_us=lambda: 1)
    assert copy.load_rows(rows) == 5
    assert [tuple(r) for r in copy.read_rows(copy.connection(), 0, limit=100)] == [tuple(r) for r in rows]
    copied = _ledger(copy)
    assert copied.verify().ok and copied.verify().events == 5


def test_a_rollback_leaves_nothing_and_a_gap_is_refused(engine_factory: EngineFactory) -> None:
    ledger = _ledger(engine_factory("ledger"))
    _seed(ledger)
    engine = ledger.engine
    rows = engine.read_rows(engine.connection(), 0, limit=100)
    conn, (seq, _hash, _ts) = engine.begin_append()
    engine.insert(conn, [(seq + 1, "evt_x", *rows[-1][2:])], [], now_us=0)
    engine.rollback(conn)
    assert engine.head(engine.connection())[0] == seq

    conn, (seq, _hash, _ts) = engine.begin_append()
    try:
        with pytest.raises(LedgerError, match="refused"):  # from insert, or from the commit that sends the rows
            engine.insert(conn, [(seq + 2, "evt_gap", *rows[-1][2:])], [], now_us=0)
            engine.commit(conn)
    finally:
        engine.rollback(conn)
    assert ledger.verify().ok


def test_the_appended_ledger_verifies_and_counts(engine_factory: EngineFactory) -> None:
    ledger = _ledger(engine_factory("ledger"))
    _seed(ledger)
    assert ledger.engine.verify_pages() is None
    result = ledger.verify()
    assert result.ok and result.events == 5
    stats = ledger.engine.stats()
    assert (stats.events, stats.head_seq) == (5, 5)
    assert stats.by_type["message.received"]["count"] == 2
    assert stats.db_bytes > 0


# --- reads ---------------------------------------------------------------------------------------


def test_event_queries_run_on_the_engines_connection(engine_factory: EngineFactory) -> None:
    ledger = _ledger(engine_factory("ledger"))
    _seed(ledger)
    engine, conn = ledger.engine, ledger.engine.connection()
    sql, params = engine.sql(EventQuery(agent_id="a", types=("turn.started", "turn.settled")), "seq")
    assert [r[0] for r in conn.execute(sql, params).fetchall()] == [3, 5]
    sql, params = engine.sql(EventQuery(types=()), "seq")
    assert conn.execute(sql, params).fetchall() == []
    sql, params = engine.count_sql(EventQuery(agent_id="a"))
    assert conn.execute(sql, params).fetchone()[0] == 4


def test_the_named_reads_look_into_payloads(engine_factory: EngineFactory) -> None:
    ledger = _ledger(engine_factory("ledger"))
    _seed(ledger)
    engine, conn = ledger.engine, ledger.engine.connection()
    assert engine.turn_taking(conn, "a", 1) == (3, "turn_1")
    assert engine.turn_taking(conn, "a", 2) is None
    assert engine.turn_settled_seq(conn, "a", "turn_1", after=3) == 5
    assert engine.turn_settled_seq(conn, "a", "turn_1", after=5) is None
    assert engine.round_ended(conn, "turn_1", after=3, upto=4)
    assert not engine.round_ended(conn, "turn_1", after=4, upto=5)
    found = engine.recent_index(conn, "a", ["message.received", "turn.settled"], limit=1, before=2**62)
    assert sorted(found) == [(1, "message.received", None), (5, "turn.settled", None)]


def test_text_bytes_reads_the_stored_bytes(engine_factory: EngineFactory) -> None:
    ledger = _ledger(engine_factory("ledger"))
    _seed(ledger)
    engine, conn = ledger.engine, ledger.engine.connection()
    raw = conn.execute(f"SELECT {engine.text_bytes('payload')} FROM events WHERE seq = ?", (1,)).fetchone()[0]
    assert bytes(raw) == ledger.payload_text(1).encode("utf-8")


def test_projection_sql_runs_in_a_transaction(engine_factory: EngineFactory) -> None:
    """``Transaction.conn`` takes the common SQL the projections write (upsert, fetch helpers)."""
    ledger = _ledger(engine_factory("ledger"))
    with ledger.transaction() as tx:
        upsert = (
            "INSERT INTO projection_cursors(name, seq, version) VALUES (?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET seq = excluded.seq, version = excluded.version"
        )
        tx.conn.execute(upsert, ("x", 1, 1))
        tx.conn.executemany(upsert, [("x", 2, 1), ("y", 3, 1)])
        assert tx.conn.fetchone("SELECT seq FROM projection_cursors WHERE name = ?", ("x",)) == (2,)
    assert ledger.query("SELECT name, seq FROM projection_cursors ORDER BY name") == [("x", 2), ("y", 3)]
    with pytest.raises(ledger.engine.connection().IntegrityError), ledger.transaction() as tx:
        tx.conn.execute("INSERT INTO projection_cursors(name, seq, version) VALUES (?, ?, ?)", ("x", 9, 1))
    assert ledger.query("SELECT seq FROM projection_cursors WHERE name = ?", ("x",)) == [(2,)]


# --- blobs ---------------------------------------------------------------------------------------


def test_blobs_are_stored_read_and_pruned(engine_factory: EngineFactory) -> None:
    ledger = _ledger(engine_factory("ledger"), blob_threshold=64)
    big = "x" * 500
    [event] = ledger.append(NewEvent(agent_id="a", payload=ev.MessageReceived(text=big)))
    ref = event.payload.text
    assert not isinstance(ref, str)
    engine, conn = ledger.engine, ledger.engine.connection()
    assert engine.blob_body(conn, ref.blob) == big.encode("utf-8")
    with pytest.raises(NotFoundError):
        engine.blob_body(conn, "0" * 64)
    assert engine.first_bad_blob() is None
    assert engine.prune_blobs(conn, older_than_us=2**62, now_us=1) == 1
    assert engine.blob_body(conn, ref.blob) is None
    assert ledger.verify().ok


# --- errors --------------------------------------------------------------------------------------


def test_translate_names_only_driver_errors(engine_factory: EngineFactory) -> None:
    engine = engine_factory("ledger")
    engine.open(create=True, now_us=lambda: 1)
    assert engine.translate(ValueError("not a database error")) is None
    conn = engine.connection()
    with pytest.raises(conn.Error) as caught:
        conn.execute("SELECT no_such_column FROM events")
    err = engine.translate(caught.value)
    assert isinstance(err, LedgerError) and engine.location in err.message
