"""The anchor outside the database notices what SQLite cannot: a lost WAL, a cut tail (finding 7).

A store in a subprocess commits N events (each its own transaction, so each is acknowledged and
recorded in ``ledger.anchor``) and is killed with SIGKILL, so the commits live only in the WAL.
Deleting or truncating the WAL then leaves a database that is consistent but shorter; ``verify``
must say how many events were lost and exit 1, and the daemon must refuse to serve it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli import REPO, assert_error, cli_env, holon

from holon.ledger.anchor import Anchor, read_anchor

WRITER = Path(__file__).parent / "helpers" / "anchor_writer.py"


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("anchor") / "home"
    assert holon("--home", home, "init").code == 0
    assert holon("--home", home, "agent", "create", "alice").code == 0
    return home


@pytest.fixture
def killed_writer(home_copy: Path) -> Iterator[tuple[Path, int]]:
    """Commit 50 events in a subprocess, then SIGKILL it: ``(home, head it acknowledged)``."""
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(home_copy), "50"],
        stdout=subprocess.PIPE, text=True, env=cli_env(), cwd=REPO,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("committed "), line
        head = int(line.split()[1])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        yield home_copy, head
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


@pytest.mark.slow
def test_the_anchor_follows_each_commit(killed_writer: tuple[Path, int]) -> None:
    home, head = killed_writer
    mark = read_anchor(home / "ledger.anchor")
    assert mark is not None and mark.seq == head == 51
    r = holon("--home", home, "ledger", "verify", "--json")
    assert r.code == 0 and r.json()["ok"] and r.json()["events"] == 51, r
    assert "anchor at seq 51" in holon("--home", home, "ledger", "verify").out


@pytest.mark.slow
def test_a_deleted_wal_is_noticed_and_counted(killed_writer: tuple[Path, int]) -> None:
    home, head = killed_writer
    assert head == 51
    wal = home / "holon.db-wal"
    assert wal.stat().st_size > 0  # the 50 commits are only there
    wal.unlink()
    (home / "holon.db-shm").unlink(missing_ok=True)
    r = holon("--home", home, "ledger", "verify", "--json")
    assert r.code == 1, r
    data = r.json()
    assert data["ok"] is False and data["lost"] == 50 and data["events"] == 1, data
    human = holon("--home", home, "ledger", "verify")
    assert human.code == 1, human
    assert "the ledger ends at seq 1 but its anchor says 51 was committed: 50 events lost" in human.out, human


@pytest.mark.slow
def test_a_truncated_wal_is_noticed(killed_writer: tuple[Path, int]) -> None:
    home, head = killed_writer
    wal = home / "holon.db-wal"
    with wal.open("r+b") as fh:
        fh.truncate(wal.stat().st_size // 2)
    (home / "holon.db-shm").unlink(missing_ok=True)
    r = holon("--home", home, "ledger", "verify", "--json")
    assert r.code == 1, r
    data = r.json()
    assert 0 < data["lost"] < 50 and data["events"] == head - data["lost"], data


@pytest.mark.slow
def test_a_damaged_wal_frame_is_noticed(killed_writer: tuple[Path, int]) -> None:
    home, _head = killed_writer
    wal = home / "holon.db-wal"
    data = bytearray(wal.read_bytes())
    data[len(data) // 3] ^= 0xFF  # a frame whose checksum fails: SQLite drops it and all after it
    wal.write_bytes(bytes(data))
    (home / "holon.db-shm").unlink(missing_ok=True)
    r = holon("--home", home, "ledger", "verify", "--json")
    assert r.code == 1 and r.json()["lost"] > 0, r


@pytest.mark.slow
def test_the_daemon_refuses_a_ledger_that_lost_events(killed_writer: tuple[Path, int]) -> None:
    home, _head = killed_writer
    (home / "holon.db-wal").unlink()
    (home / "holon.db-shm").unlink(missing_ok=True)
    for argv in (("serve", "--no-http"), ("daemon", "start", "--no-http")):
        line = assert_error(holon("--home", home, *argv, timeout=120), 5, "50 events lost")
        assert f"holon ledger verify --home {home}" in line
    # Writes are refused too, so new events cannot overwrite the anchor's evidence of the loss.
    assert_error(holon("--home", home, "agent", "create", "bob"), 5, "writes are refused")
    r = holon("--home", home, "ledger", "verify", "--json")
    assert r.code == 1 and r.json()["lost"] == 50, r


def test_anchor_slots_survive_a_torn_write(tmp_path: Path) -> None:
    anchor = Anchor(tmp_path / "ledger.anchor", sync_every=1)
    for seq in range(1, 6):
        anchor.record(seq, f"{seq:064x}")
    anchor.close()
    raw = bytearray((tmp_path / "ledger.anchor").read_bytes())
    raw[5 % 2 * 128 + 40] ^= 0x01  # the slot of seq 5 is torn: the other slot still holds seq 4
    (tmp_path / "ledger.anchor").write_bytes(bytes(raw))
    mark = read_anchor(tmp_path / "ledger.anchor")
    assert mark is not None and mark.seq == 4 and mark.hash == f"{4:064x}"


def test_verify_beside_a_busy_writer_never_reports_a_false_loss(tmp_path: Path, fast_ledger: None) -> None:
    """The anchor is read before verify's snapshot: commits during a verify make the database
    longer than the anchor it read, never the anchor longer than the database it sees."""
    import threading

    from holon.config import load_settings, resolve_home
    from holon.ledger import NewEvent
    from holon.ledger import events as ev
    from holon.projections import Store

    paths = resolve_home(tmp_path / "home")
    writer = Store.open(paths, load_settings(paths))
    reader = Store.open(paths, load_settings(paths), create=False)
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            writer.append(NewEvent("agt_w", ev.DecisionRecorded(text="busy")))

    thread = threading.Thread(target=write)
    thread.start()
    results = []
    deadline = time.monotonic() + 60
    try:
        while (not results or results[-1].events < 300) and time.monotonic() < deadline:
            results.append(reader.ledger.verify(check_blobs=False))
    finally:
        stop.set()
        thread.join(30)
        reader.close()
        writer.close()
    assert all(r.ok for r in results), [r.problem for r in results if not r.ok]
    assert results[-1].events >= 300 and len(results) > 5  # the writer really wrote during the checks


@pytest.mark.slow
def test_a_damaged_anchor_is_reported_not_fatal(home_copy: Path) -> None:
    (home_copy / "ledger.anchor").write_bytes(b"\x00garbage" * 30)
    r = holon("--home", home_copy, "ledger", "verify")
    assert r.code == 1 and "anchor" in r.out and "damaged" in r.out, r
    assert holon("--home", home_copy, "ledger", "tail").code == 0
    assert_error(holon("--home", home_copy, "agent", "create", "bob"), 5, "anchor", "writes are refused")
    assert_error(holon("--home", home_copy, "serve", "--no-http"), 5, "anchor")
    (home_copy / "ledger.anchor").unlink()  # the operator accepts the ledger as it is: a new anchor at the head
    assert holon("--home", home_copy, "ledger", "verify").code == 0
    assert holon("--home", home_copy, "agent", "create", "bob").code == 0
