"""Hook tokens (RFC 0008 step 6): the file on a SQLite home, the ``hook_tokens`` table on PostgreSQL.

Both give the same map through ``hook_tokens(store)``: minted once, rotated (the old token refused at
once, also by a second store on the same database, as another node would be), forgotten; never in
the ledger."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest

from holon.daemon.hooks import DbHookTokens, HookTokens, hook_tokens
from holon.projections import Store
from holon.runtime.agents import create_agent

if TYPE_CHECKING:
    from conftest import EngineTarget
    from helpers.api_server import ApiServer


@pytest.fixture(autouse=True)
def _both_engines(engine: EngineTarget) -> EngineTarget:
    """Every test here runs on SQLite and on PostgreSQL (``store`` follows ``engine``)."""
    return engine


def test_tokens_are_minted_once_rotated_and_forgotten(store: Store, engine: EngineTarget) -> None:
    tokens = hook_tokens(store)
    assert isinstance(tokens, DbHookTokens if engine.name == "postgresql" else HookTokens)
    first = tokens.token("agt_a")
    assert tokens.token("agt_a") == first and len(first) >= 40
    other = tokens.token("agt_b")
    assert other != first
    assert tokens.agent_for(first) == "agt_a" and tokens.agent_for(other) == "agt_b"
    assert tokens.agent_for("not-a-token") is None and tokens.agent_for("") is None

    rotated = tokens.rotate("agt_a")
    assert rotated != first
    assert tokens.agent_for(first) is None and tokens.agent_for(rotated) == "agt_a"
    assert hook_tokens(store).token("agt_a") == rotated  # a fresh map reads the same record

    tokens.forget("agt_a")
    assert tokens.agent_for(rotated) is None
    assert tokens.token("agt_a") not in (first, rotated)  # minted anew
    tokens.forget("agt_unknown")  # nothing to forget is not an error


def test_where_the_tokens_live_and_never_in_the_ledger(store: Store, engine: EngineTarget) -> None:
    token = hook_tokens(store).token("agt_a")
    file = store.paths.root / "run" / "external_tokens.json"
    if engine.name == "postgresql":
        assert not file.exists()
        assert store.ledger.query("SELECT agent_id, token FROM hook_tokens", ()) == [("agt_a", token)]
    else:
        assert file.exists() and (file.stat().st_mode & 0o777) == 0o600
        assert not store.ledger.has_table("hook_tokens")
    assert not store.ledger.query("SELECT seq FROM events WHERE payload LIKE ?", (f"%{token}%",))


def test_a_rotation_through_one_store_is_seen_at_once_by_another_on_the_same_storage(
    store: Store, engine: EngineTarget
) -> None:
    """Two stores on one database stand for two nodes: no cache may keep the old token alive."""
    agent = create_agent(store, "ada")
    old = hook_tokens(store).token(agent.agent_id)
    with Store.open(store.paths, store.settings) as other:
        assert hook_tokens(other).agent_for(old) == agent.agent_id
        new = hook_tokens(other).rotate(agent.agent_id)
    assert hook_tokens(store).agent_for(old) is None
    assert hook_tokens(store).agent_for(new) == agent.agent_id


def test_the_api_mints_rotates_and_refuses_an_old_hook_url_on_either_engine(
    engine: EngineTarget, server: ApiServer, client: httpx.Client
) -> None:
    """The daemon's real HTTP API (in this process, on the storage ``engine`` names): the hook path
    goes through ``hook_tokens(store)``, so on PostgreSQL the URL's token is a row of the table."""
    r = client.post("/v1/agents", json={"name": "ada"})
    assert r.status_code == 201, r.text
    agent_id = r.json()["agent_id"]
    first = client.get("/v1/agents/ada/hook").json()["path"]
    assert client.get("/v1/agents/ada/hook").json()["path"] == first
    second = client.post("/v1/agents/ada/hook/rotate").json()["path"]
    assert second != first
    assert client.post(first, json={"n": 1}).status_code == 404
    accepted = client.post(second, json={"n": 2})
    assert accepted.status_code == 202, accepted.text
    store = server.port.store  # type: ignore[union-attr]
    event = server.call(lambda: store.ledger.get(accepted.json()["seq"]))
    assert event.agent_id == agent_id and event.origin == "external:hook"
    file = store.paths.root / "run" / "external_tokens.json"
    assert file.exists() == (engine.name == "sqlite")
    if engine.name == "postgresql":
        rows = server.call(lambda: store.ledger.query("SELECT agent_id, token FROM hook_tokens", ()))
        assert rows == [(agent_id, second.removeprefix("/v1/hooks/"))]
