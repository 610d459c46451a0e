"""The ledger's invariants held by PostgreSQL itself (real PostgreSQL, RFC 0008): append-only
(UPDATE, DELETE and TRUNCATE refused by triggers), gapless (a row that does not follow the head is
refused, whoever sends it), one total order under concurrent writers through the append prototype
(``holon.ledger.pg.append``), the same bytes and hashes as holon's codec makes on SQLite; and an
unreachable server named in one line at start."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers.factories import agent_created, make_event
from helpers.pg import PgDatabase
from helpers.pg_appender import rows_for

from holon.errors import LedgerError, StorageUnavailable
from holon.ledger import GENESIS_HASH, NewEvent
from holon.ledger import events as ev
from holon.ledger.codec import BlobBody, chain_hash_of, decode_payload
from holon.ledger.envelope import EVENT_FIELDS
from holon.ledger.pg.append import Head, append, begin_append, insert_and_commit
from holon.ledger.pg.connect import connect, parse_url
from holon.projections import Store

Conn = psycopg.Connection[tuple[Any, ...]]
APPENDER = Path(__file__).parent / "helpers" / "pg_appender.py"


@pytest.fixture
def pg_db(pg_db: PgDatabase) -> Iterator[PgDatabase]:
    """The worker's database with the lease fence (migration 2) switched off for the test: these
    tests hold migration 1's invariants (append-only, gapless, the chain) with events of any type
    and no leases; the fence has its own tests (``test_pg_leases.py``)."""
    with pg_db.connect() as conn:
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_lease_fence")
    try:
        yield pg_db
    finally:
        with pg_db.connect() as conn:
            conn.execute("ALTER TABLE events ENABLE TRIGGER events_lease_fence")


def _events(agent: str, *texts: str) -> list[NewEvent]:
    return [NewEvent(agent, ev.DecisionRecorded(text=t), origin=f"agent:{agent}", authority="agent") for t in texts]


def _append(conn: Conn, *texts: str, agent: str = "agt_1", now_us: int = 1_700_000_000_000_000) -> Head:
    return append(conn, lambda head: rows_for(head, _events(agent, *texts), now_us=now_us))


def _check_chain(conn: Conn) -> list[tuple[Any, ...]]:
    """Every row in seq order: gapless from 1, each hash recomputed with holon's codec, each payload
    decodable; returns the rows."""
    rows = conn.execute(f"SELECT {', '.join(EVENT_FIELDS)} FROM events ORDER BY seq").fetchall()
    prev = GENESIS_HASH
    for i, row in enumerate(rows, start=1):
        *header, payload, stored = row
        assert header[0] == i, f"gap before seq {header[0]}"
        assert chain_hash_of(prev, tuple(header), payload.encode("utf-8")) == stored, f"hash of seq {i}"
        decode_payload(header[3], header[4], payload)
        prev = stored
    return rows


def test_append_chains_like_holon(pg_db: PgDatabase) -> None:
    with connect(pg_db.url) as conn:
        head = _append(conn, "one")
        assert (head.seq, head.ts_us) == (1, 1_700_000_000_000_000)
        head = _append(conn, "two", "three", now_us=5)  # a clock behind the head: time does not go back
        assert head.seq == 3 and head.ts_us == 1_700_000_000_000_000
        assert conn.execute("SELECT * FROM holon_begin_append()").fetchone() == (3, head.hash, head.ts_us)
        rows = _check_chain(conn)
        assert [decode_payload(r[3], r[4], r[13]).text for r in rows] == ["one", "two", "three"]  # type: ignore[union-attr]


def test_large_payloads_go_to_the_blob_store(pg_db: PgDatabase) -> None:
    big = "x" * 20_000
    with connect(pg_db.url) as conn:
        for now in (1, 2):
            append(
                conn,
                lambda head: rows_for(head, [NewEvent("agt_1", ev.MessageReceived(text=big))], now_us=0),
                now_us=now,
            )
        blobs = conn.execute("SELECT size, length(body), created_us, referenced_us FROM blobs").fetchall()
        assert blobs == [(20_000, 20_000, 1, 2)]  # stored once, referenced again
        _check_chain(conn)


def test_sqlite_rows_arrive_byte_for_byte(store: Store, pg_db: PgDatabase) -> None:
    """The same event bytes and hashes on both engines: a SQLite ledger's rows (derived events,
    text that is not ASCII, a NUL escaped by canonical JSON, a blob) stored on PostgreSQL as they
    are read back identical, and their chain recomputes there (what ``storage migrate`` relies on)."""
    store.append(agent_created("agt_1", "one"))
    store.append(
        make_event(
            "agt_1", ev.MessageReceived(text="héllo ✓ 🙂 \x00 end"), origin="operator:cli", authority="operator"
        ),
        make_event("agt_1", ev.MessageReceived(text="y" * 20_000)),
        make_event("agt_1", ev.DecisionRecorded(text="d"), idempotency_key="k-1"),
    )
    rows = list(store.ledger.read_rows())
    blobs = [BlobBody(h, bytes(body)) for h, body in store.ledger.query("SELECT hash, body FROM blobs")]
    assert len(rows) >= 4 and blobs
    with connect(pg_db.url) as conn:
        assert begin_append(conn) == Head(0, GENESIS_HASH, 0)
        insert_and_commit(conn, rows, blobs, now_us=1)
        assert _check_chain(conn) == rows
        assert conn.execute("SELECT hash, body FROM blobs").fetchall() == [(b.hash, b.data) for b in blobs]


@pytest.mark.parametrize(
    ("statement", "refusal"),
    [
        ("UPDATE events SET payload = '{}' WHERE seq = 1", "events are append-only: UPDATE refused"),
        ("DELETE FROM events WHERE seq = 2", "events are append-only: DELETE refused"),
        ("TRUNCATE events", "events are append-only: TRUNCATE refused"),
    ],
    ids=["update", "delete", "truncate"],
)
def test_events_are_append_only(pg_db: PgDatabase, statement: str, refusal: str) -> None:
    with connect(pg_db.url) as conn:
        _append(conn, "one", "two")
        with pytest.raises(psycopg.errors.RaiseException, match=refusal):
            conn.execute(statement)
        assert len(_check_chain(conn)) == 2


def test_a_gap_or_a_repeat_is_refused_whoever_sends_it(pg_db: PgDatabase) -> None:
    with connect(pg_db.url) as conn:
        _append(conn, "one")
        head = begin_append(conn)
        rows, _ = rows_for(head, _events("agt_1", "skip"), now_us=1)
        gap = (head.seq + 2, *rows[0][1:])
        with pytest.raises(
            LedgerError,
            match=r"append refused by the database: events.seq must be the next sequence number \(3 after 1\)",
        ):
            insert_and_commit(conn, [gap])
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # rolled back
        # a client that skips the lock (psql, a script) is serialized and checked all the same
        repeat = (1, *rows[0][1:])
        with pytest.raises(psycopg.errors.lookup("P0002"), match=r"\(1 after 1\)"):
            conn.execute(f"INSERT INTO events ({', '.join(EVENT_FIELDS)}) VALUES ({', '.join(['%s'] * 15)})", repeat)
        assert len(_check_chain(conn)) == 1


def test_a_failing_build_rolls_back_and_releases_the_lock(pg_db: PgDatabase) -> None:
    with connect(pg_db.url) as conn, connect(pg_db.url) as other:

        def boom(head: Head) -> Any:
            raise ValueError("encoding failed")

        with pytest.raises(ValueError, match="encoding failed"):
            append(conn, boom)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        _append(other, "after")  # would wait forever on the ledger lock if it were still held
        assert len(_check_chain(other)) == 1


def test_a_server_lost_mid_append_is_retryable_not_a_refusal(pg_db: PgDatabase) -> None:
    with connect(pg_db.url) as conn, connect(pg_db.url) as killer:
        head = begin_append(conn)
        rows, _ = rows_for(head, _events("agt_1", "lost"), now_us=1)
        killer.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        where = re.escape(parse_url(pg_db.url).where)
        with pytest.raises(StorageUnavailable, match=rf"^lost PostgreSQL at {where} during an append: "):
            insert_and_commit(conn, rows)
        assert conn.closed
        _append(killer, "after")  # the lock died with the backend
        assert len(_check_chain(killer)) == 1


@pytest.mark.slow  # starts four processes
def test_concurrent_appends_from_four_processes_keep_one_gapless_order(pg_db: PgDatabase, tmp_path: Path) -> None:
    workers, per_worker = 4, 150
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLON_")}
    procs = [
        subprocess.Popen(
            [sys.executable, str(APPENDER), pg_db.url, str(per_worker), str(w), str(tmp_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(workers)
    ]
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("ready-*"))) < workers:
            for p in procs:
                if p.poll() is not None:
                    pytest.fail(f"worker exited early ({p.returncode}): {p.communicate()[1]}")
            assert time.monotonic() < deadline, "workers never became ready"
            time.sleep(0.01)
        (tmp_path / "go").touch()
        for p in procs:
            _out, err = p.communicate(timeout=240)
            assert p.returncode == 0, err
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    with connect(pg_db.url) as conn:
        rows = _check_chain(conn)
    assert len(rows) == workers * per_worker
    ts = [r[5] for r in rows]
    assert ts == sorted(ts), "time went backwards in seq order"
    for w in range(workers):
        mine = [decode_payload(r[3], r[4], r[13]).text for r in rows if r[2] == f"agt_w{w}"]  # type: ignore[union-attr]
        assert mine == [f"w{w} #{i}" for i in range(per_worker)]
    agents_in_order = [r[2] for r in rows]
    switches = sum(1 for a, b in itertools.pairwise(agents_in_order) if a != b)
    assert switches > workers, "the writers never interleaved: the test did not test concurrency"


def _holon(*args: str, env_extra: dict[str, str], home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLON_")}
    env.update(env_extra, HOLON_HOME=str(home))
    return subprocess.run(
        [sys.executable, "-m", "holon.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow  # starts the CLI
def test_unreachable_postgresql_is_one_line_and_exit_2(tmp_path: Path) -> None:
    url = "postgresql://root:s3cret@127.0.0.1:1/holon"
    for command in (["init"], ["ledger", "verify"]):
        r = _holon(*command, env_extra={"HOLON_STORAGE_URL": url}, home=tmp_path / "home")
        assert r.returncode == 2, (command, r.stdout, r.stderr)
        assert r.stderr == "holon: error: cannot reach PostgreSQL at 127.0.0.1:1: connection refused\n", command
        assert "s3cret" not in r.stdout + r.stderr


@pytest.mark.slow  # starts the CLI
def test_a_whole_home_runs_on_postgresql_with_its_search_index_on_the_node(pg_db: PgDatabase, tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"HOLON_STORAGE_URL": pg_db.url}
    r = _holon("init", env_extra=env, home=home)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert pg_db.url.split("@", 1)[1] in r.stdout and not (home / "holon.db").exists()
    r = _holon("agent", "create", "alice", env_extra=env, home=home)
    assert r.returncode == 0, (r.stdout, r.stderr)
    for command in (
        ["ledger", "verify"],
        ["ledger", "replay"],
        ["memory", "reindex"],
        ["memory", "search", "alice", "x"],
    ):
        r = _holon(*command, env_extra=env, home=home)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (command, r.stdout, r.stderr)
    assert (home / "nodes" / "local" / "search.db").is_file() and not (home / "holon.db").exists()
    again = _holon("init", env_extra=env, home=home)
    assert again.returncode == 0 and "already" in again.stdout, (again.stdout, again.stderr)
    other = _holon("ledger", "verify", env_extra={}, home=home)  # the same home without the URL: no ledger there
    assert other.returncode != 0 and "no holon home" in other.stderr, (other.stdout, other.stderr)
