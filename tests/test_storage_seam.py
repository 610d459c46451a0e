"""The storage seam holds: no module outside ``holon.ledger`` and ``holon.projections`` writes SQL
over the ledger's tables or decodes a stored payload by hand.

import-linter cannot see SQL strings, so this reads the source: every string literal (docstrings
excepted) of every module under ``holon/`` is searched for ``FROM events`` / ``INTO events`` /
``UPDATE events`` (any case, any whitespace), the same over the projection tables (rows, cursors,
migrations) and the ledger's ``blobs`` and ``schema_migrations``, and every ``json.loads`` /
``orjson.loads`` call for an argument named like a payload. Tables owned higher up are named in SQL
by their owner only (``TABLE_OWNERS``: ``search_*`` by ``holon.memory``, ``evolve_*`` by
``holon.evolve``), whether through ``ledger.query(...)`` or anything else. Reads go through
``EventQuery`` and the named reads of ``Ledger`` and ``Store`` instead (RFC 0001, "The storage seam").

And ``sqlite3`` is imported only by the engines (``holon/ledger/sqlite/``, later ``holon/ledger/pg/``)
and the search index's SQLite sidecar (``holon/memory/``), with the benchmarks' raw-SQLite peers
listed by name (``SQLITE3_ALLOWED``): everything else runs on ``holon.ledger.sql.Conn`` and
``holon.ledger.engine.Engine`` (RFC 0008, "The engine seam").
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import holon

ROOT = Path(holon.__file__).parent
OWNERS = ("ledger", "projections")
"""The packages that own the tables and the codec: SQL and payload JSON live here only."""

# Modules outside the owners that may still hold such SQL, each with its reason. Keep it short.
ALLOWED: dict[str, str] = {
    "bench/ledger.py": "the benchmark's physical baseline: raw sqlite3 reads of the same events table",
    "bench/cluster.py": "the cluster benchmark's physical baseline (raw psycopg inserts into the same events "
    "table, after its head) and its audit of the run's turns straight from the shared table",
}

EVENTS_SQL = re.compile(r"\b(?:from|into|update)\s+events\b", re.IGNORECASE)
PROJECTION_SQL = re.compile(
    r"\b(?:from|into|update|join)\s+projection_(?:rows|cursors|migrations)\b|\bdelete\s+from\s+projection_",
    re.IGNORECASE,
)
LEDGER_TABLES_SQL = re.compile(
    r"\b(?:from|into|update|join)\s+(?:blobs|schema_migrations)\b|\bdelete\s+from\s+(?:blobs|schema_migrations)\b",
    re.IGNORECASE,
)
"""The ledger's other tables: the blob store and its own migrations."""

TABLE_OWNERS: dict[str, str] = {"search_": "memory", "evolve_": "evolve"}
"""A table prefix and the package that owns those tables (DDL, reads and writes, through
``Ledger.query``/``execute`` or a connection): nobody else names them in SQL."""


def _owned_sql(prefix: str) -> re.Pattern[str]:
    return re.compile(
        rf"\b(?:from|into|update|join|table(?:\s+if\s+(?:not\s+)?exists)?)\s+{prefix}\w+|\bdelete\s+from\s+{prefix}\w+",
        re.IGNORECASE,
    )


def _modules(owners: tuple[str, ...] = OWNERS) -> Iterator[tuple[str, ast.Module]]:
    """Every module of ``holon/`` outside the packages ``owners``."""
    for rel, tree in _parsed():
        if rel.split("/", 1)[0] not in owners:
            yield rel, tree


@functools.cache
def _parsed() -> tuple[tuple[str, ast.Module], ...]:
    """Every module of ``holon/``, parsed once for all the scans (they only read the trees)."""
    return tuple(
        (path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        for path in sorted(ROOT.rglob("*.py"))
    )


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring constants (prose may say "read from events")."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _strings(tree: ast.Module) -> list[tuple[int, str]]:
    """The string constants (docstrings aside) and f-strings' literal parts of ``tree``, with lines."""
    key = id(tree)
    if key not in _STRINGS:
        _STRINGS[key] = (tree, list(_scan_strings(tree)))
    return _STRINGS[key][1]


_STRINGS: dict[int, tuple[ast.Module, list[tuple[int, str]]]] = {}  # the tree kept: its id stays its own


def _scan_strings(tree: ast.Module) -> Iterator[tuple[int, str]]:
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value
        elif isinstance(node, ast.JoinedStr):  # an f-string: its literal parts joined, values as {}
            parts = [v.value if isinstance(v, ast.Constant) else "{}" for v in node.values]
            yield node.lineno, "".join(str(p) for p in parts)


def _names(node: ast.AST) -> Iterator[str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            yield sub.id
        elif isinstance(sub, ast.Attribute):
            yield sub.attr
        elif isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant):
            yield str(sub.slice.value)


def _payload_loads(tree: ast.Module) -> Iterator[int]:
    """Lines of ``json.loads(payload)``, ``orjson.loads(row.payload)``, ``loads(r["payload"])`` ..."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name == "loads" and any("payload" in n.lower() for n in _names(node.args[0])):
            yield node.lineno


def _violations(pattern: re.Pattern[str]) -> list[str]:
    return [
        f"holon/{rel}:{line}: {text.strip()[:80]!r}"
        for rel, tree in _modules()
        if rel not in ALLOWED
        for line, text in _strings(tree)
        if pattern.search(text)
    ]


def test_no_sql_over_events_outside_the_ledger() -> None:
    assert _violations(EVENTS_SQL) == [], "use EventQuery and Ledger.find/find_seqs/find_keys/count/exists"


def test_no_sql_over_projection_tables_outside_the_projections() -> None:
    assert _violations(PROJECTION_SQL) == [], "use Store's named reads (state, rows, durable_entries, cursors ...)"


def test_no_sql_over_the_ledgers_other_tables_outside_the_ledger() -> None:
    assert _violations(LEDGER_TABLES_SQL) == [], "blobs and schema_migrations belong to holon.ledger (Ledger's methods)"


@pytest.mark.parametrize("prefix", sorted(TABLE_OWNERS))
def test_each_owned_table_is_named_in_sql_by_its_owner_only(prefix: str) -> None:
    """``search_*`` only in ``holon.memory``, ``evolve_*`` only in ``holon.evolve``: another package
    asks the owner's named methods (the index's, the job queue's), never ``ledger.query(...)``."""
    pattern = _owned_sql(prefix)
    found = [
        f"holon/{rel}:{line}: {text.strip()[:80]!r}"
        for rel, tree in _modules((TABLE_OWNERS[prefix],))
        if not rel.startswith("bench/")  # the benchmarks' peers keep tables of their own, in databases of their own
        for line, text in _strings(tree)
        if pattern.search(text)
    ]
    assert found == [], f"{prefix}* tables belong to holon.{TABLE_OWNERS[prefix]}"


SQLITE3_HOMES = ("ledger/sqlite/", "ledger/pg/", "memory/")
"""Where ``sqlite3`` may be imported: the SQLite engine, the PostgreSQL engine (which will keep a
node-local sidecar) and the search index, which stays on SQLite whatever holds the ledger (RFC
0008, decision 5). Everything else reaches storage through ``Ledger``, ``Transaction.conn``
(``holon.ledger.sql.Conn``) and ``holon.ledger.engine.Engine``."""

SQLITE3_ALLOWED: dict[str, str] = {
    "bench/ledger.py": "the benchmark's physical baseline: raw sqlite3 inserts into the same events table",
    "bench/ledger_peers.py": "the raw-sqlite3 peers holon's append is measured against",
    "bench/search.py": "sizes of the index tables (dbstat) and the SQLite version, reported beside the figures",
    "bench/search_peers.py": "the raw FTS5 peer the search engine is measured against, in a database of its own",
}
"""Modules outside ``SQLITE3_HOMES`` that import ``sqlite3``, each with its reason."""


def _imports(tree: ast.Module, module: str) -> Iterator[int]:
    """Lines of ``import module`` / ``from module import ...`` (a submodule counts)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            names = [node.module]
        else:
            continue
        if any(n == module or n.startswith(f"{module}.") for n in names):
            yield node.lineno


def _sqlite3_importers() -> list[str]:
    return [
        f"holon/{rel}:{line}"
        for rel, tree in _parsed()
        if not rel.startswith(SQLITE3_HOMES) and rel not in SQLITE3_ALLOWED
        for line in _imports(tree, "sqlite3")
    ]


def test_sqlite3_is_imported_only_by_the_engines_and_the_search_sidecar() -> None:
    assert _sqlite3_importers() == [], (
        "reach storage through Ledger, Transaction.conn (holon.ledger.sql.Conn) or the Engine; "
        "SQLite specifics live in holon/ledger/sqlite/"
    )


def test_the_sqlite3_allowlist_names_only_files_that_still_import_it() -> None:
    trees = dict(_parsed())
    assert [rel for rel in SQLITE3_ALLOWED if rel not in trees or not any(_imports(trees[rel], "sqlite3"))] == []


def test_the_import_scan_sees_what_it_must() -> None:
    tree = ast.parse(
        "import sqlite3\nimport os, sqlite3 as s\nfrom sqlite3 import Error\nfrom sqlite3x import y\nimport sqlite30\n"
    )
    assert list(_imports(tree, "sqlite3")) == [1, 2, 3]


SQLITE_ONLY_SQL = re.compile(
    r"\binsert\s+or\s+(?:ignore|replace)\b|\bsqlite_\w+|\bpragma\s|\bjson_(?:extract|each)\b|\bindexed\s+by\b"
    r"|\b(?:temp|main)\.\w|\bautoincrement\b|\bstrict\b",
    re.IGNORECASE,
)
"""Constructs only SQLite accepts. SQL above the engine (``holon.projections``, ``holon.evolve``) is
written in the subset SQLite and PostgreSQL share (``holon.ledger.sql``); what cannot be common
is an ``Engine`` method (RFC 0008, step 1). ``holon.memory`` keeps its SQLite SQL (its sidecar)."""

COMMON_SQL_PACKAGES = ("projections", "evolve")
SQLITE_ONLY_ALLOWED: dict[str, str] = {
    "projections/framework.py": "STRICT appended to projection_migrations' DDL on SQLite only (conn.dialect)",
    "projections/local.py": "the node-local projection file is a SQLite file by design (RFC 0008 section 5)",
}


def test_sql_above_the_engine_is_in_the_common_subset() -> None:
    found = [
        f"holon/{rel}:{line}: {text.strip()[:80]!r}"
        for rel, tree in _parsed()
        if rel.split("/", 1)[0] in COMMON_SQL_PACKAGES and rel not in SQLITE_ONLY_ALLOWED
        for line, text in _strings(tree)
        if SQLITE_ONLY_SQL.search(text)
    ]
    assert found == [], "write SQL both SQLite and PostgreSQL accept, or ask the engine (holon.ledger.engine)"
    trees = dict(_parsed())
    stale = [rel for rel in SQLITE_ONLY_ALLOWED if not any(SQLITE_ONLY_SQL.search(t) for _, t in _strings(trees[rel]))]
    assert stale == [], "an allowlisted module no longer needs it"


def test_the_common_subset_scan_sees_what_it_must() -> None:
    bad = [
        "INSERT OR IGNORE INTO t VALUES (?)",
        "SELECT 1 FROM sqlite_master",
        "PRAGMA page_count",
        "SELECT json_extract(payload, '$.x')",
        "FROM events INDEXED BY events_agent_type",
        "DELETE FROM temp.replay_rows",
        "CREATE TABLE t (x) STRICT",
    ]
    good = ["INSERT INTO t VALUES (?) ON CONFLICT (k) DO NOTHING", "SELECT main_id FROM t", "CREATE TEMP TABLE x (y)"]
    assert [q for q in bad if not SQLITE_ONLY_SQL.search(q)] == []
    assert [q for q in good if SQLITE_ONLY_SQL.search(q)] == []


def test_no_payload_json_decoded_outside_the_ledger() -> None:
    found = [f"holon/{rel}:{line}" for rel, tree in _modules() if rel not in ALLOWED for line in _payload_loads(tree)]
    assert found == [], "payloads are decoded (and upcast) by the codec: read Event.payload"


def test_the_allowlist_names_only_files_that_still_need_it() -> None:
    """An allowlisted module that no longer holds SQL over the ledger's tables leaves the list."""
    trees = dict(_modules())
    stale = [
        rel
        for rel in ALLOWED
        if rel in trees
        and not any(
            EVENTS_SQL.search(t) or PROJECTION_SQL.search(t) or LEDGER_TABLES_SQL.search(t)
            for _, t in _strings(trees[rel])
        )
        and not any(_payload_loads(trees[rel]))
    ]
    missing = [rel for rel in ALLOWED if rel not in trees]
    assert stale == [] and missing == []


def test_the_scan_sees_what_it_must() -> None:
    """The detectors themselves: each catches its pattern in any case and spacing, docstrings aside."""
    src = '''
"""Built from events alone."""
a = "select seq FROM\\n   events where x"
b = f"INSERT  into events ({cols})"
c = "update Events set"
d = "SELECT state FROM projection_rows"
e = json.loads(row.payload)
f = orjson.loads(payload)
g = json.loads(body)
h = ledger.query("SELECT version FROM projection_migrations")
i = "DELETE FROM blobs WHERE body IS NULL"
j = ledger.query("SELECT rowid FROM search_fts WHERE search_fts MATCH ?")
k = "CREATE TABLE IF NOT EXISTS evolve_jobs (id)"
'''
    tree = ast.parse(src)
    assert sorted({line for line, text in _strings(tree) if EVENTS_SQL.search(text)}) == [3, 4, 5]
    assert sorted({line for line, text in _strings(tree) if PROJECTION_SQL.search(text)}) == [6, 10]
    assert sorted({line for line, text in _strings(tree) if LEDGER_TABLES_SQL.search(text)}) == [11]
    assert sorted({line for line, text in _strings(tree) if _owned_sql("search_").search(text)}) == [12]
    assert sorted({line for line, text in _strings(tree) if _owned_sql("evolve_").search(text)}) == [13]
    assert sorted(_payload_loads(tree)) == [7, 8]


@pytest.mark.slow
def test_opening_a_home_and_appending_imports_no_sqlalchemy(tmp_path: Path) -> None:
    """SQLAlchemy and SQLModel cost more start-up than a CLI command: the ledger, the projections
    and a round trip through them run on plain ``sqlite3`` (RFC 0001, "The storage seam")."""
    script = """
import sys
from pathlib import Path
from holon.config import load_settings, resolve_home
from holon.ledger import EventQuery, NewEvent
from holon.ledger.events import MessageReceived
from holon.projections import Store

home = resolve_home(Path(sys.argv[1]))
with Store.open(home, load_settings(home)) as store:
    store.append(NewEvent(agent_id="a", payload=MessageReceived(text="hi")))
    assert [e.payload.text for e in store.ledger.find(EventQuery(agent_id="a"))] == ["hi"]
    store.replay()
print(sorted(m for m in ("sqlalchemy", "sqlmodel") if m in sys.modules))
"""
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "home")], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_api_event_model_follows_the_envelope() -> None:
    from holon.api.models import envelope_drift

    assert envelope_drift() == []
