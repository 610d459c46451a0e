"""Bad conditions on PostgreSQL (RFC 0008 section 6, "Lost mid-run"): the daemon's database
connections terminated under it (``pg_terminate_backend``, as a server restart or a failover of
the database does). A request that meets the lost connection answers 503 with ``Retry-After``
(never a 500, never a 2xx without a commit); the daemon reconnects on its own, and the client's
retry with the same idempotency key is acknowledged once and answered."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.api_server import ApiServer, api_server
from helpers.pg import PgDatabase
from helpers.tcp_proxy import TcpProxy
from helpers.turn_cli import REPO, cli_env, holon_argv
from helpers.wait import wait_for

from holon.clock import FakeClock
from holon.config import load_settings, resolve_home
from holon.ledger.pg.connect import connect
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.testing.fake_llm import FakeLLM


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
    seen_503 = 0  # answers that met the loss (for the eye: a race, see below)
    acked: list[int] = []
    for i in range(3):
        assert _terminate_others(pg_db.url) >= 1  # the writer, the readers, the listener
        status, refused = _retried(lambda: client.get("/v1/status"))
        assert status.status_code == 200, status.text  # "storage_error" while it reconnects
        seen_503 += len(refused) + ("storage_error" in status.json())
        _terminate_others(pg_db.url)  # whatever reconnected meanwhile
        body = {"text": f"after loss {i}", "idempotency_key": f"k{i + 1}"}
        answer, refused = _retried(lambda body=body: client.post("/v1/agents/ada/inputs", json=body))  # type: ignore[misc]
        assert answer.status_code == 202, answer.text
        seen_503 += len(refused)
        again = client.post("/v1/agents/ada/inputs", json=body)  # the same key: the same input, once
        assert again.status_code in (200, 202) and again.json()["seq"] == answer.json()["seq"], again.text
        acked.append(answer.json()["seq"])
    # Whether a request meets the lost connection or the daemon's own loops (the watcher reads
    # every 50 ms) replace it first is a race: the proxy test below meets it for certain.
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


# --- a real daemon behind a TCP proxy that is cut and restored -----------------------------------


def _answered(url: str, input_seq: int) -> bool:
    """Whether a turn that took input ``input_seq`` settled ``completed``."""
    with connect(url, timeout_s=10) as conn:
        rows = conn.execute(
            "SELECT type, turn_id, payload FROM events WHERE type IN ('turn.started', 'turn.settled') ORDER BY seq"
        ).fetchall()
    turns = {tu for t, tu, p in rows if t == "turn.started" and input_seq in json.loads(p).get("inputs", [])}
    return any(t == "turn.settled" and tu in turns and json.loads(p)["outcome"] == "completed" for t, tu, p in rows)


def _turn_started(url: str, input_seq: int) -> bool:
    with connect(url, timeout_s=10) as conn:
        rows = conn.execute("SELECT payload FROM events WHERE type = 'turn.started'").fetchall()
    return any(input_seq in json.loads(p).get("inputs", []) for (p,) in rows)


@pytest.mark.slow
@pytest.mark.parametrize("node", [None, "a"], ids=["single", "node"])
def test_a_daemon_whose_database_goes_away_answers_503_says_so_and_resumes_on_its_own(
    node: str | None, tmp_path: Path, pg_new_db: Callable[..., PgDatabase], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``holon serve`` (a real process) on PostgreSQL through a TCP proxy. The proxy is cut while
    a turn waits on the (fake) model: the turn fails retryably, an input posted meanwhile gets 503
    with ``Retry-After`` (never a 500 or a 2xx), ``GET /v1/status`` and ``holon daemon status``
    say "storage unavailable: …"; once the proxy is back the daemon reconnects by itself, the
    retried input is acknowledged once, and every acknowledged input is answered."""
    db = pg_new_db(migrated=False)
    slow = {"slow one"}

    def step(body: dict[str, Any]) -> dict[str, Any]:
        if any(marker in json.dumps(body.get("messages", [])) for marker in slow):
            return {"content": "late answer", "delay": 2.0}
        return {"content": "pong"}

    with TcpProxy("127.0.0.1", 5432) as proxy, FakeLLM(step) as fake:
        url = db.url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
        assert url != db.url
        env = cli_env(HOLON_STORAGE_URL=url, HOLON_NODE_LEASE_S="3")
        home = tmp_path / "home"
        assert _holon(home, "init", env=env).returncode == 0
        with monkeypatch.context() as m:
            m.setenv("HOLON_STORAGE_URL", url)
            paths = resolve_home(home)
            store = Store.open(paths, load_settings(paths))
            try:
                create_agent(store, "ada", settings={"model": "openai/fake", "api_base": fake.url})
            finally:
                store.close()
        log = home / "serve.out"
        with log.open("a") as out:
            proc = subprocess.Popen(
                holon_argv("--home", home, "serve", *(("--node", node) if node else ()), "--port", "0"),
                stdout=out, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO,
            )  # fmt: skip
        try:
            wait_for("the daemon is up", lambda: _api(home) is not None, timeout=60, proc=proc)
            api, token = _api(home)  # type: ignore[misc]
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=api, headers=headers, timeout=30) as client:
                first = client.post("/v1/agents/ada/inputs", json={"text": "hello", "idempotency_key": "k0"})
                assert first.status_code == 202, first.text
                wait_for("the first input answered", lambda: _answered(db.url, first.json()["seq"]), timeout=30)
                slow_in = client.post("/v1/agents/ada/inputs", json={"text": "slow one", "idempotency_key": "k1"})
                assert slow_in.status_code == 202, slow_in.text
                wait_for("the slow turn waits on the model", lambda: _turn_started(db.url, slow_in.json()["seq"]))
                proxy.cut()
                body = {"text": "while lost", "idempotency_key": "k2"}
                r = client.post("/v1/agents/ada/inputs", json=body)
                assert r.status_code == 503, r.text
                assert r.headers.get("Retry-After") and r.json()["error"]["code"] == "unavailable", r.text

                def says_unavailable() -> bool:
                    s = client.get("/v1/status")
                    assert s.status_code in (200, 503), s.text
                    return s.status_code == 200 and "storage unavailable" in str(s.json().get("storage_error"))

                wait_for("/v1/status says storage unavailable", says_unavailable, timeout=30, proc=proc)
                wait_for(
                    "holon daemon status says so",
                    lambda: "storage unavailable" in _holon(home, "daemon", "status", env=env).stdout,
                    timeout=30,
                )
                slow.clear()

                def turn_failed_retryably() -> bool:  # the model answered; its append met the loss
                    lines = (home / "logs" / "holon.log").read_text().splitlines()
                    held = any(
                        '"agent held back after a failure"' in ln and "storage unavailable" in ln for ln in lines
                    )
                    # a node may pass its own lease deadline first: the turn is cancelled, the lease
                    # re-acquired once the database is back, and recovery settles the turn
                    lost = any('"node.lost"' in ln or '"turn fenced out"' in ln for ln in lines)
                    return held or (node is not None and lost)

                wait_for("the turn fails retryably", turn_failed_retryably, timeout=30, proc=proc)
                proxy.restore()
                restored_at = time.monotonic()

                def resumed() -> int | None:  # the client's retry with the same key is the poll
                    r = client.post("/v1/agents/ada/inputs", json=body)
                    assert r.status_code in (202, 503), r.text
                    return int(r.json()["seq"]) if r.status_code == 202 else None

                acked = wait_for("the daemon resumes and acknowledges the retry", resumed, timeout=60, proc=proc)
                print(f"\nstorage back: the retried input acknowledged {time.monotonic() - restored_at:.2f} s later")
                for seq in (slow_in.json()["seq"], acked):
                    wait_for(f"input {seq} answered", lambda seq=seq: _answered(db.url, seq), timeout=60, proc=proc)
                status = client.get("/v1/status")
                assert status.status_code == 200 and "storage_error" not in status.json(), status.text
            assert proc.poll() is None, "the daemon keeps running through the outage"
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        with connect(db.url, timeout_s=10) as conn:
            received = conn.execute(
                "SELECT count(*) FROM events WHERE type = 'message.received' AND payload LIKE '%while lost%'"
            ).fetchone()
        assert received == (1,)
        with connect(db.url, timeout_s=10) as conn:  # the turn that met the loss: settled, not lost
            settled = [
                json.loads(p)["outcome"]
                for (p,) in conn.execute(
                    "SELECT payload FROM events WHERE type = 'turn.settled' ORDER BY seq"
                ).fetchall()
            ]
        assert "interrupted" in settled, settled
        assert _holon(home, "ledger", "verify", env=cli_env(HOLON_STORAGE_URL=db.url)).returncode == 0


def _api(home: Path) -> tuple[str, str] | None:
    try:
        info = json.loads((home / "run" / "daemon.json").read_text())
    except (OSError, ValueError):
        return None
    api = str(info.get("api") or "")
    if info.get("state") != "running" or not api or api.endswith(":0"):
        return None
    return api, (home / "api.token").read_text().strip()


def _holon(home: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        holon_argv("--home", home, *args), capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False
    )


# --- schema versions between nodes (RFC 0008, "Schema versions") ---------------------------------


def test_migration_waits_for_older_live_nodes_and_a_newer_database_is_refused(
    pg_new_db: Callable[..., PgDatabase], monkeypatch: pytest.MonkeyPatch
) -> None:
    from holon.errors import SchemaMismatch
    from holon.ledger.pg import migrations
    from holon.ledger.pg.node import NodeSession

    db = pg_new_db()
    latest = migrations.latest_version()
    old = NodeSession(db.url, "old", lease_s=30.0)
    old.claim()  # registers schema_version = latest and holds the name's lock: live
    try:
        with monkeypatch.context() as m:  # this process now runs a newer holon, one migration ahead
            extra = migrations.Migration(latest + 1, "test_extra", ("CREATE TABLE test_extra (x INTEGER)",))
            m.setattr(migrations, "MIGRATIONS", (*migrations.MIGRATIONS, extra))
            with connect(db.url, timeout_s=10) as conn:
                with pytest.raises(SchemaMismatch) as refused:
                    migrations.migrate(conn, now_us=1, create=False)
                assert refused.value.exit_code == 2
                assert f"live nodes run an older holon: old (v{latest})" in refused.value.message
                assert "\n" not in refused.value.message
                assert migrations.current_version(conn) == latest  # nothing applied
                old.close()  # a stopped node (or a crashed one: its lock died with it) does not count
                assert migrations.migrate(conn, now_us=1, create=False) == [latest + 1]
        # back to this holon's own code: the database is now newer than it
        newer = f"schema v{latest + 1} is newer than this holon \\(v{latest}\\)"
        with connect(db.url, timeout_s=10) as conn, pytest.raises(SchemaMismatch, match=newer):
            migrations.migrate(conn, now_us=1, create=False)
        running = NodeSession(db.url, "n2", lease_s=30.0)
        running.claim()
        try:
            assert running.schema_ahead() == (
                f"the database schema v{latest + 1} is newer than this holon (v{latest}): upgrade holon on node n2; "
                "it takes no more turns"
            )
        finally:
            running.close()
    finally:
        old.close()


def _bump_schema(url: str) -> int:
    from holon.ledger.pg.migrations import latest_version

    with connect(url, timeout_s=10) as conn:
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_us) VALUES (%s, 'from the future', 1)",
            (latest_version() + 1,),
        )
    return latest_version() + 1


@pytest.mark.slow
def test_a_node_older_than_the_database_refuses_to_start(tmp_path: Path, pg_new_db: Callable[..., PgDatabase]) -> None:
    db = pg_new_db(migrated=False)
    env = cli_env(HOLON_STORAGE_URL=db.url)
    home = tmp_path / "home"
    assert _holon(home, "init", env=env).returncode == 0
    newer = _bump_schema(db.url)
    r = subprocess.run(
        holon_argv("--home", home, "serve", "--node", "a", "--port", "0"),
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"schema v{newer} is newer than this holon" in lines[0], r.stderr
    assert "Traceback" not in r.stderr + r.stdout
