"""``holon storage migrate`` (RFC 0008, section 6): a home's ledger copied between SQLite and a real
PostgreSQL, both ways, verified on arrival; the copy's events and blobs are the source's bytes.

The copy itself (``holon.ledger.move``) is tested in process; the command as a real subprocess
(exit codes, one-line errors, ``--json``)."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.damage import flip_byte
from helpers.factories import agent_created, make_event
from helpers.pg import PgDatabase

from holon.clock import FakeClock
from holon.config import HomePaths, load_settings
from holon.ledger import Ledger
from holon.ledger import events as ev
from holon.ledger.engine import Engine
from holon.ledger.move import TargetRefused, copy_ledger
from holon.ledger.pg.engine import PgEngine
from holon.ledger.rows import EVENT_COLUMNS
from holon.ledger.sqlite import Database, SqliteEngine
from holon.projections import Store

REPO = Path(__file__).resolve().parent.parent
AGENT = "agt_1"
BIG = "".join(f"line {i}: ünïcødé output ✓\n" for i in range(2_000))  # over the blob threshold
BLOBS = "hash, size, body, created_us, referenced_us, pruned_us"


@pytest.fixture
def source(home: HomePaths) -> HomePaths:
    """A SQLite home with an agent, a few events, two blobs (one pruned) and a unicode payload."""
    with Store.open(home, load_settings(home), clock=FakeClock()) as s:
        s.append(agent_created(AGENT, "alice"))
        for i in range(3):
            s.append(make_event(AGENT, ev.DecisionRecorded(text=f"décision {i} ✓")))
        cut = 0
        for i, out in enumerate((BIG, BIG + "tail")):
            tool = ev.ToolResulted(call_id=f"c{i}", tool="run_command", status="ok", output=out)
            s.append(make_event(AGENT, tool))
            cut = cut or s.ledger.clock.now_us()  # after the first blob, before the second
        assert s.ledger.prune_blobs(older_than_us=cut) == 1
    return home


def _sqlite(path: Path) -> SqliteEngine:
    return SqliteEngine(Database(path))


def _opened(engine: Engine) -> Ledger:
    return Ledger(engine, clock=FakeClock(), create=True)


def _rows(engine: Engine) -> tuple[list[Any], list[Any]]:
    with engine.reader() as c:
        events = [tuple(r) for r in c.fetchall(f"SELECT {EVENT_COLUMNS} FROM events ORDER BY seq")]
        blobs = [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in c.fetchall(
            f"SELECT {BLOBS} FROM blobs ORDER BY hash")]  # fmt: skip
    return events, blobs


def _copy(src: Engine, dst: Engine) -> Ledger:
    target = _opened(dst)
    res = copy_ledger(src, dst, chunk=2)  # several chunks, one blob of them pruned
    v = target.verify()
    assert v.ok and v.events == res.events == 6, v
    return target


def test_sqlite_to_postgresql_and_back_is_byte_identical(source: HomePaths, pg_db: PgDatabase, tmp_path: Path) -> None:
    src = _opened(_sqlite(source.db))
    pg = _copy(src.engine, PgEngine(pg_db.url))
    back = _copy(pg.engine, _sqlite(tmp_path / "back.db"))
    try:
        events, blobs = _rows(src.engine)
        assert len(blobs) == 2 and any(b[2] is None for b in blobs)  # one body pruned, copied as pruned
        assert _rows(pg.engine) == (events, blobs)
        assert _rows(back.engine) == (events, blobs)
        # The bytes SQLite stores, not only equal values: compare the files' rows as blobs.
        raw = [sqlite3.connect(p) for p in (source.db, tmp_path / "back.db")]
        q = f"SELECT {', '.join(f'CAST({c} AS BLOB)' for c in EVENT_COLUMNS.split(', '))} FROM events ORDER BY seq"
        assert raw[0].execute(q).fetchall() == raw[1].execute(q).fetchall()
        for r in raw:
            r.close()
    finally:
        for led in (src, pg, back):
            led.close()


def test_a_non_empty_target_is_refused(source: HomePaths, pg_db: PgDatabase) -> None:
    src = _opened(_sqlite(source.db))
    pg = _copy(src.engine, PgEngine(pg_db.url))
    try:
        with pytest.raises(TargetRefused, match="is not empty \\(6 events, 2 blobs\\)") as e:
            copy_ledger(src.engine, pg.engine)
        assert e.value.exit_code == 2
        assert pg.head() == 6
    finally:
        src.close()
        pg.close()


# --- the command ------------------------------------------------------------------------------


def _holon(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLON_")}
    env["HOLON_LEDGER_SYNCHRONOUS"] = "NORMAL"
    cmd = [sys.executable, "-m", "holon.cli.main", "--home", str(home), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False)


def _one_line_error(r: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    assert r.returncode == code, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("holon: error: ") and needle in lines[0], r


@pytest.mark.slow
def test_the_command_moves_a_home_and_refuses_a_second_copy(
    source: HomePaths, pg_db: PgDatabase, tmp_path: Path
) -> None:
    r = _holon(source.root, "storage", "migrate", "--to", pg_db.url, "--json")
    assert r.returncode == 0, r
    out = json.loads(r.stdout)
    assert out["copy"]["events"] == 6 and out["copy"]["blobs"] == 2
    assert out["verify"]["ok"] and out["verify"]["events"] == 6
    assert out["projections"]["rebuilt"] and out["projections"]["replay_ok"]
    _one_line_error(_holon(source.root, "storage", "migrate", "--to", pg_db.url), 2, "is not empty")
    back = tmp_path / "back.db"
    r = _holon(source.root, "storage", "migrate", "--from", pg_db.url, "--to", f"sqlite:///{back}")
    assert r.returncode == 0, r
    assert "verify on the target: ok" in r.stdout and "replay identical" in r.stdout
    assert _rows(_sqlite(back)) == _rows(_sqlite(source.db))


@pytest.mark.slow
def test_the_command_names_an_unreachable_or_bad_target_in_one_line(
    source: HomePaths, pg_new_db: Callable[..., PgDatabase]
) -> None:
    r = _holon(source.root, "storage", "migrate", "--to", "postgresql://root@127.0.0.1:1/x")
    _one_line_error(r, 2, "cannot reach PostgreSQL at 127.0.0.1:1")
    _one_line_error(_holon(source.root, "storage", "migrate", "--to", "mysql://x"), 2, "bad storage URL")
    foreign = pg_new_db(migrated=False)
    with foreign.connect() as conn:
        conn.execute("CREATE TABLE accounts (id int)")
    r = _holon(source.root, "storage", "migrate", "--to", foreign.url)
    _one_line_error(r, 2, "cannot use")


@pytest.mark.slow
def test_the_command_refuses_while_a_process_runs_the_home(source: HomePaths, tmp_path: Path) -> None:
    (source.root / "run").mkdir(exist_ok=True)
    with (source.root / "run" / "host.lock").open("a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running daemon holds (AgentHost.start)
        fh.write("4242")
        fh.flush()
        r = _holon(source.root, "storage", "migrate", "--to", f"sqlite:///{tmp_path / 'copy.db'}")
    _one_line_error(r, 4, "(pid 4242) is running agents in this home")
    assert not (tmp_path / "copy.db").exists()


@pytest.mark.slow
def test_a_tampered_source_fails_verification_on_arrival(source: HomePaths, tmp_path: Path) -> None:
    flip_byte(source.db, "décision 1".encode())  # the row still reads; its hash no longer matches
    r = _holon(source.root, "storage", "migrate", "--to", f"sqlite:///{tmp_path / 'copy.db'}", "--json")
    assert r.returncode == 1, r
    out = json.loads(r.stdout)
    assert not out["verify"]["ok"] and "hash" in out["verify"]["problem"]
    assert out["projections"] == {"rebuilt": False, "reason": "verification failed"}


JOBS = (
    "key, agent_id, turn_id, settled_seq, status, attempts, not_before_us, lease_owner, lease_until_us, "
    "last_error, created_us, finished_us"
)


def _jobs(engine: Engine) -> tuple[list[Any], Any]:
    with engine.reader() as c:
        jobs = [tuple(r) for r in c.fetchall(f"SELECT {JOBS} FROM evolve_jobs ORDER BY key")]
        cursor = c.fetchone("SELECT seq, version FROM projection_cursors WHERE name = 'evolve'")
    return jobs, tuple(cursor) if cursor else None


@pytest.mark.slow
def test_the_command_moves_the_evolve_queue_as_stored_both_ways(
    source: HomePaths, pg_db: PgDatabase, tmp_path: Path
) -> None:
    """RFC 0008 step 6: done and dead jobs (and why) are not derivable, so they move with the home,
    with the queue's cursor (nothing queued twice); times past 2**31 µs fit on PostgreSQL."""
    from holon.evolve.jobs import JobQueue

    big = 1_800_000_000_000_000
    with Store.open(source, load_settings(source), clock=FakeClock()) as s:
        JobQueue(s).ensure()
        with s.ledger.transaction() as tx:
            tx.conn.executemany(
                f"INSERT INTO evolve_jobs({JOBS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    ("turn:t1", AGENT, "t1", 3, "done", 1, 0, None, None, None, big, big + 5),
                    ("turn:t2", AGENT, "t2", 4, "dead", 5, big + 9, None, None, "RuntimeError: ünïcødé ✓", big, big),
                ],
            )
    want = _jobs(_sqlite(source.db))
    assert len(want[0]) == 2 and want[1] is not None
    r = _holon(source.root, "storage", "migrate", "--to", pg_db.url, "--json")
    assert r.returncode == 0, r
    assert json.loads(r.stdout)["evolve"] == {"jobs": 2}
    assert _jobs(PgEngine(pg_db.url)) == want
    back = tmp_path / "back.db"
    r = _holon(source.root, "storage", "migrate", "--from", pg_db.url, "--to", f"sqlite:///{back}")
    assert r.returncode == 0, r
    assert "evolve jobs copied as stored: 2" in r.stdout
    assert _jobs(_sqlite(back)) == want


@pytest.mark.slow
def test_the_command_moves_hook_tokens_from_the_home_file_into_the_table_and_says_when_it_cannot(
    source: HomePaths, pg_db: PgDatabase, tmp_path: Path
) -> None:
    """A moved home's hook URLs keep working: the file's tokens become ``hook_tokens`` rows; a
    SQLite target other than the home's file has nowhere to keep them, and the command says so."""
    from holon.daemon.hooks import HookTokens

    token = HookTokens(source.root).token(AGENT)
    r = _holon(source.root, "storage", "migrate", "--to", pg_db.url, "--json")
    assert r.returncode == 0, r
    assert json.loads(r.stdout)["hook_tokens"] == {"tokens": 1}
    engine = PgEngine(pg_db.url)
    try:
        with engine.reader() as c:
            assert [tuple(row) for row in c.fetchall("SELECT agent_id, token FROM hook_tokens", ())] == [(AGENT, token)]
    finally:
        engine.close()
    back = tmp_path / "back.db"
    r = _holon(source.root, "storage", "migrate", "--from", pg_db.url, "--to", f"sqlite:///{back}")
    assert r.returncode == 0, r
    assert "hook tokens copied: 0 (the target is not this home's file" in r.stdout
