"""Bad conditions on PostgreSQL (RFC 0008 section 6, "Lost mid-run"): the daemon's database
connections terminated under it (``pg_terminate_backend``, as a server restart or a failover of
the database does). A request that meets the lost connection answers 503 with ``Retry-After``
(never a 500, never a 2xx without a commit); the daemon reconnects on its own, and the client's
retry with the same idempotency key is acknowledged once and answered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers.api_server import ApiServer, api_server
from helpers.pg import PgDatabase

from holon.clock import FakeClock
from holon.ledger.pg.connect import connect


@pytest.fixture
def server(
    tmp_path: Path, fast_ledger: None, pg_db: PgDatabase, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ApiServer]:
    monkeypatch.setenv("HOLON_STORAGE_URL", pg_db.url)
    with api_server(tmp_path / "home", clock=FakeClock()) as s:
        yield s


def _terminate_others(url: str) -> int:
    with connect(url, timeout_s=10) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def _retried(send: object, attempts: int = 8) -> tuple[httpx.Response, list[httpx.Response]]:
    """``send()`` until it is not a 503; returns the last answer and the 503s before it, each
    checked to carry ``Retry-After`` and the ``unavailable`` code."""
    refused: list[httpx.Response] = []
    for _ in range(attempts):
        r = send()  # type: ignore[operator]
        if r.status_code != 503:
            return r, refused
        assert r.headers.get("Retry-After"), r.headers
        assert r.json()["error"]["code"] == "unavailable", r.text
        refused.append(r)
    raise AssertionError(f"still 503 after {attempts} attempts: {refused[-1].text}")


@pytest.mark.slow
def test_connections_lost_mid_run_answer_503_and_the_daemon_resumes(
    server: ApiServer, client: httpx.Client, pg_db: PgDatabase
) -> None:
    r = client.post("/v1/agents", json={"name": "ada"})
    assert r.status_code == 201, r.text
    first = client.post("/v1/agents/ada/inputs", json={"text": "before", "idempotency_key": "k0"})
    assert first.status_code == 202, first.text
    server.wait_idle()
    seen_503 = 0
    acked: list[int] = []
    for i in range(3):
        assert _terminate_others(pg_db.url) >= 1  # the writer, the readers, the listener
        status, refused = _retried(lambda: client.get("/v1/status"))
        assert status.status_code == 200, status.text
        seen_503 += len(refused)
        assert _terminate_others(pg_db.url) >= 1
        body = {"text": f"after loss {i}", "idempotency_key": f"k{i + 1}"}
        answer, refused = _retried(lambda body=body: client.post("/v1/agents/ada/inputs", json=body))  # type: ignore[misc]
        assert answer.status_code == 202, answer.text
        seen_503 += len(refused)
        again = client.post("/v1/agents/ada/inputs", json=body)  # the same key: the same input, once
        assert again.status_code in (200, 202) and again.json()["seq"] == answer.json()["seq"], again.text
        acked.append(answer.json()["seq"])
    assert seen_503 >= 1, "no request met the lost connection"
    server.wait_idle(timeout_s=30)
    page = client.get("/v1/agents/ada/events", params={"stream": "false", "limit": 500}).json()
    events = page["events"]
    texts = [json.dumps(e["payload"]) for e in events]
    for i in range(3):
        assert (
            sum(f"after loss {i}" in t for t, e in zip(texts, events, strict=True) if e["type"] == "message.received")
            == 1
        )
        assert any(f"echo: after loss {i}" in t for t in texts), f"input {i} not answered"
    verify = client.get("/v1/status")
    assert verify.status_code == 200
