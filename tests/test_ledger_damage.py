"""A damaged ledger is detected and named, never a traceback (issue 14, finding 7).

Every command of the ``ledger`` and ``trace`` groups runs in a subprocess on a home damaged the
way disks, crashes and bad copies damage files: a flipped payload byte (still UTF-8, no longer
UTF-8, no longer JSON), a truncated file, a 0-byte file, a foreign SQLite database, a file that is
not SQLite at all. Each must answer with its documented exit code and at most one error line.
``verify`` exits 1 for bad rows (listed as seq and reason) and 5 for a damaged file; an empty or
foreign database is never initialised over and never served.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.damage import flip_byte, make_foreign, make_garbage, overwrite_page, truncate_pages, zero
from test_cli import Result, assert_error, holon

pytestmark = pytest.mark.slow  # every test here starts a process

ALICE = b'"name":"alice"'


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with agents alice and bob (seq 1, 2): read-only, copied per test."""
    home = tmp_path_factory.mktemp("damage") / "home"
    assert holon("--home", home, "init").code == 0
    for name in ("alice", "bob"):
        assert holon("--home", home, "agent", "create", name).code == 0
    return home


def _flip_letter(db: Path) -> None:
    flip_byte(db, ALICE, offset=9)  # "alice" -> "amice": still UTF-8 and JSON, the hash no longer matches


def _flip_utf8(db: Path) -> None:
    flip_byte(db, ALICE, offset=9, to=0xFF)  # no longer UTF-8


def _flip_json(db: Path) -> None:
    flip_byte(db, ALICE, offset=6)  # the ':' becomes ';': no longer JSON


def _truncate(db: Path) -> None:
    truncate_pages(db, keep_bytes=4096 * 3 + 100)


def _junk_page(db: Path) -> None:
    overwrite_page(db, 3)


DAMAGES: dict[str, Callable[[Path], None]] = {
    "flip-letter": _flip_letter,
    "flip-utf8": _flip_utf8,
    "flip-json": _flip_json,
    "truncated": _truncate,
    "junk-page": _junk_page,
    "zero-bytes": zero,
    "foreign": make_foreign,
    "garbage": make_garbage,
}
ROW_DAMAGE = ("flip-letter", "flip-utf8", "flip-json")

COMMANDS: dict[str, tuple[str, ...]] = {
    "verify": ("ledger", "verify"),
    "replay": ("ledger", "replay"),
    "tail": ("ledger", "tail"),
    "show": ("ledger", "show", "1"),
    "stats": ("ledger", "stats"),
    "prune": ("ledger", "prune"),
    "trace-stats": ("trace", "stats"),
    "trace-export": ("trace", "export", "--out", "{tmp}/out.jsonl"),
}


def _expected(damage: str, command: str) -> set[int]:
    """The documented exit codes: verify and replay 1 for bad rows; 5 for a damaged or foreign file.

    A command that does not read the damaged row may succeed (0); one that does reads it as a
    damaged ledger (5, one line naming the event and ``holon ledger verify``)."""
    if damage in ROW_DAMAGE:
        return {1} if command in ("verify", "replay") else {0, 5}
    if damage in ("truncated", "junk-page"):
        return {5} if command == "verify" else {0, 5}
    return {5}


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_every_ledger_and_trace_command_on_a_damaged_home(home_copy: Path, tmp_path: Path, damage: str) -> None:
    DAMAGES[damage](home_copy / "holon.db")
    for command, argv in COMMANDS.items():
        args = [a.format(tmp=tmp_path) for a in argv]
        for json_flag in ((), ("--json",)) if command in ("verify", "replay") else ((),):
            r = holon("--home", home_copy, *args, *json_flag)
            assert "Traceback" not in r.err and "Traceback" not in r.out, (command, r)
            assert r.code in _expected(damage, command), (command, json_flag, r)
            if r.code not in (0, 1):
                assert_error(r, r.code)
    if damage not in ROW_DAMAGE:  # never initialised over: the damaged bytes are still there
        assert (
            (home_copy / "holon.db").stat().st_size == 0
            or not _is_holon(home_copy / "holon.db")
            or damage
            in (
                "truncated",
                "junk-page",
            )
        )


def _is_holon(db: Path) -> bool:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'events'").fetchone() is not None
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return False


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("flip-letter", "hash does not match its content"),
        ("flip-utf8", "not valid UTF-8"),
        ("flip-json", "not JSON"),
    ],
)
def test_verify_names_the_bad_row(home_copy: Path, damage: str, reason: str) -> None:
    DAMAGES[damage](home_copy / "holon.db")
    r = holon("--home", home_copy, "ledger", "verify", "--json")
    assert r.code == 1, r
    data = r.json()
    assert data["ok"] is False and data["events"] == 2
    assert [row["seq"] for row in data["bad_rows"]] == [1], data
    assert reason in data["bad_rows"][0]["reason"], data
    human = holon("--home", home_copy, "ledger", "verify")
    assert human.code == 1 and "event 1:" in human.out and "Traceback" not in human.err, human


def test_replay_names_an_unreadable_row(home_copy: Path) -> None:
    _flip_json(home_copy / "holon.db")
    r = holon("--home", home_copy, "ledger", "replay", "--json")
    assert r.code == 1, r
    assert r.json()["bad_rows"][0]["seq"] == 1
    human = holon("--home", home_copy, "ledger", "replay")
    assert human.code == 1 and "run 'holon ledger verify'" in human.out, human


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        ("zero-bytes", "is empty (0 bytes)"),
        ("foreign", "not a holon ledger"),
        ("garbage", "not a SQLite database"),
        ("truncated", "damaged"),
        ("junk-page", "damaged"),
    ],
)
def test_a_damaged_file_is_exit_5_with_one_line(home_copy: Path, damage: str, needle: str) -> None:
    DAMAGES[damage](home_copy / "holon.db")
    before = (home_copy / "holon.db").read_bytes()
    assert_error(holon("--home", home_copy, "ledger", "verify"), 5, needle)
    assert (home_copy / "holon.db").read_bytes() == before  # nothing was written, nothing initialised


@pytest.mark.parametrize("damage", ["zero-bytes", "foreign"])
def test_init_never_initialises_over_an_existing_file(home_copy: Path, damage: str) -> None:
    DAMAGES[damage](home_copy / "holon.db")
    before = (home_copy / "holon.db").read_bytes()
    r = holon("--home", home_copy, "init")
    assert_error(r, 5)
    assert (home_copy / "holon.db").read_bytes() == before


def test_a_lost_database_with_its_anchor_is_not_replaced_by_init(home_copy: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        (home_copy / f"holon.db{suffix}").unlink(missing_ok=True)
    assert_error(holon("--home", home_copy, "init"), 5, "anchor", "says 2 events were committed")
    assert not (home_copy / "holon.db").exists()


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["flip-letter", "zero-bytes", "foreign"])
def test_serve_refuses_a_damaged_ledger(home_copy: Path, damage: str) -> None:
    DAMAGES[damage](home_copy / "holon.db")
    before = (home_copy / "holon.db").read_bytes()
    for argv in (("serve", "--no-http"), ("daemon", "start", "--no-http"), ("chat", "alice")):
        r = holon("--home", home_copy, *argv, timeout=120)
        if argv[0] == "chat":  # chat says it is starting a daemon first
            assert r.err.startswith("holon: starting a daemon"), r
            r = Result(r.code, r.out, r.err.split("\n", 1)[1])
        line = assert_error(r, 5)
        assert "holon ledger verify" in line or "holon init" in line, r
    assert (home_copy / "holon.db").read_bytes() == before


def test_verify_result_is_stable(home_copy: Path) -> None:
    r: Result = holon("--home", home_copy, "ledger", "verify", "--json")
    assert r.code == 0 and r.json() == {"ok": True, "events": 2, "first_bad_seq": None}, r


def test_verify_runs_where_a_catch_up_could_not(home_copy: Path) -> None:
    """Projections behind the head (an upgrade, a crash) and a row they cannot fold: verify still reports it."""
    _flip_json(home_copy / "holon.db")
    conn = sqlite3.connect(home_copy / "holon.db", isolation_level=None)
    try:
        conn.execute("UPDATE projection_cursors SET seq = 0")
    finally:
        conn.close()
    assert_error(holon("--home", home_copy, "agent", "list"), 5, "event 1 cannot be read", "holon ledger verify")
    r = holon("--home", home_copy, "ledger", "verify", "--json")
    assert r.code == 1 and r.json()["bad_rows"][0]["seq"] == 1, r
