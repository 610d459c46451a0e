"""The search engine (``holon.memory.engine``, tantivy) on its own: owner filtering, terms that are
never syntax, idempotent rewrites (a batch folded again after a crash), and a reader in another
process while this one holds the directory's writer lock (the daemon indexing, the CLI searching).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers.props import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from holon.memory.engine import DIR_NAME, Engine, Row, engine_at
from holon.memory.text import engine_term, index_terms, plan_query

REPO = Path(__file__).resolve().parents[1]


def _row(doc_id: int, owner: str, text: str, kind: str = "message") -> Row:
    return Row(doc_id, owner, kind, 1_700_000_000_000_000 + doc_id, "", index_terms(text), index_terms(kind))


def _ids(engine: Engine, query: str, owners: list[str], **kw: object) -> list[int]:
    terms = engine.analyze(engine_term(t) for t in plan_query(query).terms)
    hits, _n = engine.top(terms, owners=owners, limit=100, **kw)  # type: ignore[arg-type]
    return [i for i, _score in hits]


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    e = engine_at(tmp_path)
    e.write(
        [
            _row(1, "agent:a", "The heron nests by the old mill"),
            _row(2, "agent:b", "The heron of agent b is private"),
            _row(3, "agent:a", "猫和狗在花园里"),
            _row(4, "agent:a", "painted the shed", kind="decision"),
        ]
    )
    return e


def test_owners_are_filtered_inside_the_engine(engine: Engine) -> None:
    assert _ids(engine, "heron", ["agent:a"]) == [1]
    assert _ids(engine, "heron", ["agent:b"]) == [2]
    assert sorted(_ids(engine, "heron", ["agent:a", "agent:b"])) == [1, 2]
    assert _ids(engine, "heron", []) == []
    assert _ids(engine, "painting", ["agent:a"], kinds=("decision",)) == [4]  # stemmed on both sides
    assert _ids(engine, "painting", ["agent:a"], kinds=("message",)) == []


def test_unsegmented_text_is_found_by_one_or_two_characters(engine: Engine) -> None:
    assert _ids(engine, "花园", ["agent:a"]) == [3]
    assert _ids(engine, "狗", ["agent:a"]) == [3]
    assert _ids(engine, "猫", ["agent:b"]) == []


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300) | st.sampled_from(['"', "NEAR(a b)", "body:x", "*", "\x00", "a" * 5000, "(((", "\\"]))
def test_any_string_is_terms_never_syntax(engine: Engine, query: str) -> None:
    got = _ids(engine, query, ["agent:a"])
    assert set(got) <= {1, 3, 4}


def test_a_batch_written_twice_leaves_one_document_per_id(engine: Engine) -> None:
    """What a crash between the engine's commit and SQLite's leads to: the batch again, same ids."""
    again = [_row(1, "agent:a", "The heron nests by the old mill"), _row(5, "agent:a", "a new heron")]
    engine.write(again)
    engine.write(again)
    assert engine.num_docs() == 5
    assert sorted(_ids(engine, "heron", ["agent:a"])) == [1, 5]
    engine.write([], [5])
    assert engine.num_docs() == 4
    engine.write([], owners=["agent:b"])
    assert _ids(engine, "heron", ["agent:b"]) == []


@pytest.mark.slow  # starts a reader process
def test_a_reader_in_another_process_searches_while_the_writer_is_held(engine: Engine, tmp_path: Path) -> None:
    writer = engine.index.writer(heap_size=15_000_000, num_threads=1)  # as the daemon while it indexes
    try:
        with pytest.raises(ValueError, match="LockBusy"):
            engine.index.writer(heap_size=15_000_000, num_threads=1)
        code = textwrap.dedent(
            f"""
            from pathlib import Path
            from holon.memory.engine import engine_at
            e = engine_at(Path({str(tmp_path)!r}))
            hits, n = e.top(e.analyze(["heron"]), owners=["agent:a"], limit=10)
            print([i for i, _ in hits], n)
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "[1] 1"
        assert _ids(engine, "heron", ["agent:a"]) == [1]
    finally:
        writer.rollback()
        writer.wait_merging_threads()
    assert (tmp_path / DIR_NAME).is_dir()
