"""The PostgreSQL engine behind ``Ledger`` (RFC 0008 step 4), beyond the shared contract
(``test_engine_contract.py``): the same events give the same rows and hashes on both engines,
``?`` placeholders, a lost connection, a foreign database."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.pg import PgDatabase

from holon.clock import FakeClock
from holon.errors import LedgerError, StorageUnavailable
from holon.ledger import Ledger, NewEvent
from holon.ledger import events as ev
from holon.ledger.engine import Engine
from holon.ledger.engine import translate as any_translate
from holon.ledger.pg.conn import pg_sql
from holon.ledger.pg.engine import PgEngine
from holon.ledger.sqlite import Database, SqliteEngine


def test_placeholders_are_translated_once_outside_quotes() -> None:
    assert pg_sql("SELECT a FROM t WHERE b = ? AND c = ?") == "SELECT a FROM t WHERE b = %s AND c = %s"
    assert pg_sql("SELECT 5 % 2, ?") == "SELECT 5 %% 2, %s"
    assert (
        pg_sql("SELECT '?', \"a?\", ? FROM t WHERE x LIKE 'a%'") == "SELECT '?', \"a?\", %s FROM t WHERE x LIKE 'a%%'"
    )
    assert pg_sql("SELECT 'it''s ?', ?") == "SELECT 'it''s ?', %s"
    assert pg_sql("COMMIT") == "COMMIT"


@pytest.fixture
def pg_engine(pg_db: PgDatabase) -> Iterator[PgEngine]:
    engine = PgEngine(pg_db.url)
    yield engine
    engine.close()


def _script(ledger: Ledger) -> None:
    """Blobs, non-ASCII text, an escaped NUL, idempotent repeats, several events per transaction."""
    ledger.append(NewEvent(agent_id="a", payload=ev.MessageReceived(text="héllo ✓ \x00 end"), idempotency_key="k1"))
    ledger.append(NewEvent(agent_id="a", payload=ev.MessageReceived(text="héllo ✓ \x00 end"), idempotency_key="k1"))
    ledger.append(NewEvent(agent_id="b", payload=ev.MessageReceived(text="x" * 300 + "\\ 100% ?")))
    for i in range(20):
        ledger.append(
            NewEvent(agent_id="a", payload=ev.TurnStarted(turn_id=f"turn_{i}", inputs=[1]), turn_id=f"turn_{i}"),
            NewEvent(
                agent_id="a", payload=ev.ModelResponded(turn_id=f"turn_{i}", round=0, model="m", content="hi" * i)
            ),
            NewEvent(agent_id="a", payload=ev.TurnSettled(turn_id=f"turn_{i}", outcome="completed", reply="ok")),
        )


def _run(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    counter = itertools.count(1)
    monkeypatch.setattr("holon.ledger.store.new_id", lambda prefix: f"{prefix}_{next(counter):032x}")
    ledger = Ledger(engine, clock=FakeClock(), blob_threshold=256)
    try:
        _script(ledger)
        assert ledger.verify().ok
        rows = [tuple(r) for r in ledger.read_rows(0)]
        blobs = [tuple(r) for r in ledger.query("SELECT hash, size, body, created_us FROM blobs ORDER BY hash")]
    finally:
        ledger.close()
    return rows, [(h, s, bytes(b), c) for h, s, b, c in blobs]


def test_the_same_events_give_the_same_rows_and_hashes_on_both_engines(
    tmp_path: Path, pg_new_db: Callable[..., PgDatabase], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ledgers created by ``Ledger`` (the clock is read alike while opening), same script."""
    sqlite_rows, sqlite_blobs = _run(SqliteEngine(Database(tmp_path / "l.db", synchronous="OFF")), monkeypatch)
    pg_rows, pg_blobs = _run(PgEngine(pg_new_db(migrated=False).url), monkeypatch)
    assert len(sqlite_rows) == 62 and len(sqlite_blobs) == 1
    assert pg_rows == sqlite_rows
    assert pg_blobs == sqlite_blobs


def test_a_lost_connection_is_retryable_and_the_next_statement_reconnects(
    pg_engine: PgEngine, pg_db: PgDatabase
) -> None:
    ledger = Ledger(pg_engine, clock=FakeClock())
    ledger.append(NewEvent(agent_id="a", payload=ev.MessageReceived(text="one")))
    pid = pg_engine.connection().raw.info.backend_pid
    with pg_db.connect() as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StorageUnavailable, match="lost the connection to PostgreSQL"):
        ledger.head()
    assert ledger.head() == 1  # a fresh connection
    ledger.append(NewEvent(agent_id="a", payload=ev.MessageReceived(text="two")))
    pid = pg_engine.connection().raw.info.backend_pid
    with pytest.raises(StorageUnavailable), ledger.transaction() as tx:
        tx.append(NewEvent(agent_id="a", payload=ev.MessageReceived(text="lost")))
        with pg_db.connect() as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        tx.append(NewEvent(agent_id="a", payload=ev.MessageReceived(text="after")))
    with pytest.raises(StorageUnavailable), ledger.transaction() as tx:
        pid = pg_engine.connection().raw.info.backend_pid  # a new connection since the last loss
        with pg_db.connect() as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        tx.append(NewEvent(agent_id="a", payload=ev.MessageReceived(text="lost too")))  # held for the commit
        with pytest.raises(StorageUnavailable):  # a caller that swallows the loss and goes on:
            ledger.head()  # the held rows go first, and meet the loss
        with pytest.raises(StorageUnavailable, match="open transaction went with it"):
            ledger.head()  # no fresh connection inside the transaction: its rows would commit alone
        tx.append(NewEvent(agent_id="a", payload=ev.MessageReceived(text="never alone")))  # not on a new connection
    ledger.append(NewEvent(agent_id="a", payload=ev.MessageReceived(text="three")))
    assert [e.seq for e in ledger.read()] == [1, 2, 3]
    assert [e.payload.text for e in ledger.read()] == ["one", "two", "three"]  # type: ignore[attr-defined]
    assert ledger.verify().ok
    ledger.close()


def test_a_database_with_foreign_tables_is_refused(pg_new_db: Callable[..., PgDatabase]) -> None:
    db = pg_new_db(migrated=False)
    with db.connect() as conn:
        conn.execute("CREATE TABLE customers (id int)")
    engine = PgEngine(db.url)
    with pytest.raises(LedgerError, match="not a holon ledger"):
        engine.open(create=True, now_us=lambda: 1)
    engine.close()


def test_driver_errors_are_translated_without_knowing_the_ledger(pg_engine: PgEngine) -> None:
    pg_engine.open(create=True, now_us=lambda: 1)
    conn = pg_engine.connection()
    with pytest.raises(conn.Error) as caught:
        conn.execute("SELECT nope FROM events")
    err = any_translate(caught.value)
    assert isinstance(err, LedgerError) and "cannot be read" in err.message
    assert "password" not in pg_engine.location


def test_two_ledgers_on_one_database_keep_one_chain(pg_db: PgDatabase) -> None:
    """Two writers (as two processes would be: an engine and a connection each) appending from
    threads at once: one gapless chain, each writer's hooks told when the other moved the head."""
    ledgers = [Ledger(PgEngine(pg_db.url), clock=FakeClock()) for _ in range(2)]
    errors: list[BaseException] = []

    def write(ledger: Ledger, name: str) -> None:
        try:
            for i in range(40):
                ledger.append(
                    *(NewEvent(agent_id=name, payload=ev.MessageReceived(text=f"{i}.{k}")) for k in range(i % 3 + 1))
                )
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=write, args=(ledger, f"w{n}")) for n, ledger in enumerate(ledgers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)
    events = list(ledgers[0].read())
    per_writer = sum(i % 3 + 1 for i in range(40))
    assert [e.seq for e in events] == list(range(1, 2 * per_writer + 1))
    for name in ("w0", "w1"):  # each writer's own order kept
        texts = [e.payload.text for e in events if e.agent_id == name]  # type: ignore[attr-defined]
        assert texts == [f"{i}.{k}" for i in range(40) for k in range(i % 3 + 1)]
    result = ledgers[1].verify()
    assert result.ok and result.events == 2 * per_writer
    for ledger in ledgers:
        ledger.close()


def test_typed_inspection_reads_through_sqlmodel(pg_engine: PgEngine) -> None:
    from sqlmodel import select

    from holon.ledger.schema import EventRow

    ledger = Ledger(pg_engine, clock=FakeClock())
    ledger.append(NewEvent(agent_id="a", payload=ev.MessageReceived(text="typed")))
    with pg_engine.session() as s:
        [row] = s.exec(select(EventRow)).all()
    assert (row.seq, row.agent_id, row.hash) == (1, "a", ledger.get(1).hash)
    ledger.close()
