"""Several ``holon serve --node`` processes on one PostgreSQL database (RFC 0008 steps 9-11).

Real PostgreSQL, real daemons in subprocesses (each node a home of its own sharing the database,
as on separate machines), the real HTTP API; only the model is fake. A short lease (3 s) keeps the
failover test short: a SIGKILLed node's agents must resume on the other node within ``lease_s`` + 5 s.

What is checked from the ledger alone (``lease.acquired`` / ``turn.started.node``): every turn ran
on the node holding the agent's lease when it started, and no event of a turn follows a change of
owner except the new owner's settlement of it, so no turn ran on two nodes at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.cluster import events, no_turn_on_two_nodes
from helpers.pg import PgDatabase
from helpers.turn_cli import REPO, cli_env, holon_argv
from helpers.wait import wait_for

from holon.config import load_settings, resolve_home
from holon.daemon.cluster import preferred
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.testing.fake_llm import FakeLLM

pytestmark = pytest.mark.slow

LEASE_S = 3.0


@dataclass
class Node:
    name: str
    home: Path
    proc: subprocess.Popen[str]
    log: Path

    def api(self) -> tuple[str, str]:
        info = json.loads((self.home / "run" / "daemon.json").read_text())
        return info["api"], (self.home / "api.token").read_text().strip()

    def post_input(self, agent: str, text: str, key: str | None = None) -> dict[str, Any]:
        url, token = self.api()
        body: dict[str, Any] = {"text": text}
        if key:
            body["idempotency_key"] = key
        r = httpx.post(
            f"{url}/v1/agents/{agent}/inputs", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        assert r.status_code == 202, r.text
        return dict(r.json())

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        url, token = self.api()
        r = httpx.request(method, f"{url}{path}", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert r.status_code < 300, (r.status_code, r.text)
        return r.json()

    def status(self) -> dict[str, Any]:
        url, token = self.api()
        r = httpx.get(f"{url}/v1/status", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert r.status_code == 200, r.text
        return dict(r.json())


def _env(url: str) -> dict[str, str]:
    return cli_env(HOLON_STORAGE_URL=url, HOLON_NODE_LEASE_S=str(LEASE_S))


def _holon(home: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        holon_argv("--home", home, *args), capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False
    )


def _home(root: Path, name: str, env: dict[str, str]) -> Path:
    home = root / name
    r = _holon(home, "init", env=env)
    assert r.returncode == 0, r
    return home


@contextlib.contextmanager
def _store(home: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    with monkeypatch.context() as m:
        m.setenv("HOLON_STORAGE_URL", url)
        paths = resolve_home(home)
        store = Store.open(paths, load_settings(paths))
        try:
            yield store
        finally:
            store.close()


def _agents_for_both(store: Store, fake: FakeLLM, per_node: int) -> dict[str, list[str]]:
    """Create agents until each of nodes a and b is preferred for ``per_node`` of them (the
    rendezvous policy: ``preferred``); returns node -> agent names."""
    made: dict[str, list[str]] = {"a": [], "b": []}
    n = 0
    while min(len(v) for v in made.values()) < per_node:
        agent = create_agent(store, f"ag{n}", settings={"model": "openai/fake", "api_base": fake.url})
        n += 1
        node = preferred(agent.agent_id, ["a", "b"])
        assert node is not None
        made[node].append(agent.name)
    return made


@pytest.fixture
def cluster(
    tmp_path: Path, pg_new_db: Callable[..., PgDatabase]
) -> Iterator[tuple[str, Callable[..., Node], list[Node]]]:
    db = pg_new_db(migrated=False)
    nodes: list[Node] = []

    def start(name: str, home: Path, storage_url: str | None = None) -> Node:
        """``holon serve --node name``; ``storage_url``: the database through another address (a proxy)."""
        log = home / f"serve-{name}.out"
        with log.open("a") as out:
            proc = subprocess.Popen(
                holon_argv("--home", home, "serve", "--node", name, "--port", "0"),
                stdout=out, stderr=subprocess.STDOUT, text=True, env=_env(storage_url or db.url), cwd=REPO,
            )  # fmt: skip
        node = Node(name, home, proc, log)
        nodes.append(node)
        return node

    try:
        yield db.url, start, nodes
    finally:
        for node in nodes:
            if node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
        for node in nodes:
            try:
                node.proc.wait(30)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(10)


def _up(node: Node) -> bool:
    assert node.proc.poll() is None, node.log.read_text()[-3000:]
    try:
        info = json.loads((node.home / "run" / "daemon.json").read_text())
    except (OSError, ValueError):
        return False
    api = str(info.get("api") or "")
    return info.get("state") == "running" and bool(api) and not api.endswith(":0")  # the bound port


def _owners(url: str) -> dict[str, tuple[str, bool]]:
    from holon.ledger.pg.connect import connect

    with connect(url) as conn:
        rows = conn.execute("SELECT agent_id, node, expires_at > clock_timestamp() FROM leases").fetchall()
    return {str(a): (str(n), bool(live)) for a, n, live in rows}


def _answered(url: str, input_seq: int, agent_id: str) -> bool:
    """Whether a turn that took input ``input_seq`` settled ``completed``."""
    turns = {
        tu
        for s, t, a, tu, _o, p in events(url, ("turn.started",))
        if a == agent_id and input_seq in p.get("inputs", [])
    }
    return any(
        t == "turn.settled" and tu in turns and p["outcome"] == "completed"
        for _s, t, _a, tu, _o, p in events(url, ("turn.settled",))
    )


def test_two_nodes_share_agents_refuse_a_second_name_answer_across_nodes_and_fail_over(
    cluster: tuple[str, Callable[..., Node], list[Node]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, start, _nodes = cluster
    slow_for: set[str] = set()

    def step(body: dict[str, Any]) -> dict[str, Any]:
        text = json.dumps(body.get("messages", []))
        if any(marker in text for marker in slow_for):
            return {"content": "late pong", "delay": 60}  # still running when its node is killed
        return {"content": "pong"}

    with FakeLLM(step) as fake:
        env = _env(url)
        home_a, home_b = _home(tmp_path, "a", env), _home(tmp_path, "b", env)
        with _store(home_a, url, monkeypatch) as store:
            by_node = _agents_for_both(store, fake, per_node=2)
            ids = {a.name: a.agent_id for a in store.agents()}
        a = start("a", home_a)
        wait_for("node a up", lambda: _up(a), timeout=60)
        b = start("b", home_b)
        wait_for("node b up", lambda: _up(b), timeout=60)

        # The same name again: refused at once, one line, exit 2, nothing started.
        r = _holon(_home(tmp_path, "c", env), "serve", "--node", "b", "--port", "0", env=env)
        assert r.returncode == 2, r
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "node b is already running" in lines[0] and "Traceback" not in r.stderr, r.stderr

        # Spread: each node owns the agents the rendezvous policy gives it.
        def spread() -> bool:
            owners = _owners(url)
            return all(owners.get(ids[name]) == (node, True) for node, names in by_node.items() for name in names)

        wait_for("agents spread over both nodes", spread, timeout=30)
        expected = {name: node for node, names in by_node.items() for name in names}

        def status_shows_spread() -> bool:  # the status is a's last scan's view, up to a scan behind the database
            status = a.status()["cluster"]
            live = {n["name"] for n in status["nodes"] if n["live"]}
            return live == {"a", "b"} and {o["agent"]: o["node"] for o in status["owners"]} == expected

        wait_for("a's status shows the spread", status_shows_spread, timeout=10)

        shown = _holon(home_a, "daemon", "status", env=env)
        assert shown.returncode == 0, shown
        assert "node a (lease 3.0 s)" in shown.stdout and f"{by_node['b'][0]} -> b" in shown.stdout, shown.stdout

        # An input posted to node a's API for an agent b owns: b runs the turn.
        b_agent = by_node["b"][0]
        acked = a.post_input(b_agent, "hello from a's API")
        wait_for("b answers an input a acknowledged", lambda: _answered(url, acked["seq"], ids[b_agent]), timeout=30)
        started = [p for _s, _t, ag, _tu, _o, p in events(url, ("turn.started",)) if ag == ids[b_agent]]
        assert started and all(p["node"] == "b" for p in started)

        # Reply tracking on the node that does not run the turn: a's synchronous route waits for b's turn.
        t0 = time.monotonic()
        reply = a.call("POST", f"/v1/agents/{b_agent}/messages?wait=30", {"text": "sync from a"})
        assert (reply["status"], reply["reply"]) == ("completed", "pong"), reply
        print(f"a's /messages answered by b's turn in {time.monotonic() - t0:.2f} s")

        # Operator commands through a's API for b's agent append unfenced types only (any node).
        a.call("POST", f"/v1/agents/{b_agent}/pause")
        a.call("POST", f"/v1/agents/{b_agent}/resume")
        timer = a.call("POST", f"/v1/agents/{by_node['b'][0]}/timers", {"schedule": "every 3s", "prompt": "tick"})

        def timer_turns() -> list[str]:
            """The node of each turn that took one of the timer's inputs, in order."""
            inputs = {
                s for s, _t, _a, _tu, o, _p in events(url, ("message.received",)) if o == f"timer:{timer['timer_id']}"
            }
            return [p["node"] for _s, _t, _a, _tu, _o, p in events(url, ("turn.started",)) if inputs & set(p["inputs"])]

        wait_for("the timer fires on b, its agent's owner", lambda: "b" in timer_turns(), timeout=30)
        assert set(timer_turns()) == {"b"}

        # A turn in flight on b, and an input acknowledged just before b dies.
        slow_for.add("slow one")
        busy = a.post_input(by_node["b"][1], "slow one")
        wait_for(
            "b's slow turn started",
            lambda: any(
                ag == ids[by_node["b"][1]] and busy["seq"] in p["inputs"]
                for _s, _t, ag, _tu, _o, p in events(url, ("turn.started",))
            ),
            timeout=30,
        )
        queued = b.post_input(b_agent, "queued before the crash")
        slow_for.clear()  # the new owner's retry of the interrupted turn answers at once
        killed_at = time.monotonic()
        os.kill(b.proc.pid, signal.SIGKILL)
        b.proc.wait(10)

        def taken_over() -> bool:
            owners = _owners(url)
            return all(owners.get(ids[name]) == ("a", True) for name in by_node["b"])

        wait_for("a takes b's agents over", taken_over, timeout=LEASE_S + 10)
        failover_s = time.monotonic() - killed_at
        assert failover_s <= LEASE_S + 5, failover_s
        print(f"failover: {failover_s:.2f} s after SIGKILL (lease_s {LEASE_S})")
        wait_for(
            "the interrupted turn and the queued input answered on a",
            lambda: _answered(url, busy["seq"], ids[by_node["b"][1]]) and _answered(url, queued["seq"], ids[b_agent]),
            timeout=30,
        )
        settled = [
            (ag, p["outcome"], o)
            for _s, _t, ag, _tu, o, p in events(url, ("turn.settled",))
            if p["outcome"] != "completed"
        ]
        assert (ids[by_node["b"][1]], "interrupted", "runtime:recovery") in settled, settled

        # The timer moved with its agent and each due time fired once cluster-wide.
        wait_for("the timer fires on a after the failover", lambda: timer_turns()[-1:] == ["a"], timeout=30)
        due = [
            p["scheduled_for_us"]
            for _s, _t, _a, _tu, _o, p in events(url, ("timer.fired",))
            if p["timer_id"] == timer["timer_id"]
        ]
        assert len(due) == len(set(due)), due

        # b comes back under its name (freed with its dead backend): a gives b's share back, between
        # turns; then a clean stop of a hands everything to b at once (released, not expired).
        b2 = start("b", home_b)
        wait_for("b back up", lambda: _up(b2), timeout=60)
        wait_for("b's share back on b", spread, timeout=30)
        a.proc.send_signal(signal.SIGTERM)
        assert a.proc.wait(60) == 0, a.log.read_text()[-3000:]
        stopped_at = time.monotonic()

        def all_on_b() -> bool:
            owners = _owners(url)
            return all(owners.get(ids[name]) == ("b", True) for names in by_node.values() for name in names)

        wait_for("b owns every agent after a's clean stop", all_on_b, timeout=30)
        handover_s = time.monotonic() - stopped_at
        assert handover_s < LEASE_S, handover_s  # released leases are taken at the next scan, not at expiry
        released = {
            ag
            for _s, _t, ag, _tu, _o, p in events(url, ("lease.released",))
            if p["node"] == "a" and p["reason"] == "stopped"
        }
        assert {ids[name] for name in by_node["a"]} <= released
        print(f"clean handover: {handover_s:.2f} s after SIGTERM")
        final = b2.post_input(by_node["a"][0], "after the handover")
        wait_for("b answers a's former agent", lambda: _answered(url, final["seq"], ids[by_node["a"][0]]), timeout=30)

    # Every acknowledged input answered; the ledger proves no turn ran on two nodes; chain intact.
    for seq, agent in ((acked["seq"], b_agent), (busy["seq"], by_node["b"][1]), (queued["seq"], b_agent)):
        assert _answered(url, seq, ids[agent]), (seq, agent)
    assert no_turn_on_two_nodes(url) >= 3
    r = _holon(home_a, "ledger", "verify", env=env)
    assert r.returncode == 0, r


def test_a_paused_node_stops_acting_for_agents_taken_over_while_it_slept(
    cluster: tuple[str, Callable[..., Node], list[Node]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGSTOP (a long GC pause, a frozen VM) of the node running a turn: the other node takes the
    agent over once the lease expires; when the paused node wakes, the model's answer to the old
    turn is refused (its own deadline, and the database's fence), so the turn's events all come
    from one node at a time."""
    url, start, _nodes = cluster
    slow: set[str] = {"pause me"}

    def step(body: dict[str, Any]) -> dict[str, Any]:
        if any(marker in json.dumps(body.get("messages", [])) for marker in slow):
            return {"content": "answer from the paused node", "delay": LEASE_S + 4}
        return {"content": "pong"}

    with FakeLLM(step) as fake:
        env = _env(url)
        home_a, home_b = _home(tmp_path, "a", env), _home(tmp_path, "b", env)
        with _store(home_a, url, monkeypatch) as store:
            by_node = _agents_for_both(store, fake, per_node=1)
            ids = {a.name: a.agent_id for a in store.agents()}
        a = start("a", home_a)
        b = start("b", home_b)
        wait_for("both nodes up", lambda: _up(a) and _up(b), timeout=60)
        x = by_node["b"][0]
        wait_for("b owns its agent", lambda: _owners(url).get(ids[x]) == ("b", True), timeout=30)
        sent = a.post_input(x, "pause me")

        def b_started() -> bool:
            return any(
                ag == ids[x] and sent["seq"] in p["inputs"] and p["node"] == "b"
                for _s, _t, ag, _tu, _o, p in events(url, ("turn.started",))
            )

        wait_for("b's turn waits on the model", b_started, timeout=30)
        os.kill(b.proc.pid, signal.SIGSTOP)
        try:
            slow.clear()  # a's retry of the input is answered at once
            wait_for("a takes the agent over", lambda: _owners(url).get(ids[x]) == ("a", True), timeout=LEASE_S + 10)
            wait_for("a answers the input", lambda: _answered(url, sent["seq"], ids[x]), timeout=30)
        finally:
            os.kill(b.proc.pid, signal.SIGCONT)
        # b wakes with the old turn's answer on its way (the fake model still holds it): whatever it
        # does, nothing of that turn is recorded after a took over, and b keeps running.
        paused_turn = next(
            tu
            for _s, _t, ag, tu, _o, p in events(url, ("turn.started",))
            if ag == ids[x] and sent["seq"] in p["inputs"] and p["node"] == "b"
        )

        def b_gave_up() -> bool:
            lines = (home_b / "logs" / "holon.log").read_text().splitlines()
            return any('"node.lost"' in ln and ids[x] in ln for ln in lines)  # deadline or heartbeat, first wins

        wait_for("b notices it lost the agent", b_gave_up, timeout=LEASE_S + 10)
        assert b.proc.poll() is None, "the paused node keeps running after it wakes"
        taken = max(s for s, t, ag, _tu, _o, p in events(url, ("lease.acquired",)) if ag == ids[x] and p["node"] == "a")
        late = [(s, t, o) for s, t, _ag, tu, o, _p in events(url) if tu == paused_turn and s > taken]
        assert all(o in ("runtime:recovery", "runtime:projector") for _s, _t, o in late), late
        assert not any(t == "model.responded" for _s, t, _o in late), late
    assert no_turn_on_two_nodes(url) >= 2


def test_a_client_frozen_inside_an_append_is_ended_by_a_live_nodes_watchdog(
    cluster: tuple[str, Callable[..., Node], list[Node]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process SIGSTOPped while it holds the ledger lock (inside an append: ``BEGIN`` and the lock
    pipelined, as holon appends) would stall every node's appends for as long as it sleeps; the live
    node's watchdog terminates its backend once it has been idle ``lease_s / 2``, and the input posted
    meanwhile is acknowledged and answered (RFC 0008 section 6, ``holon.ledger.pg.stall``)."""
    url, start, _nodes = cluster
    with FakeLLM(lambda body: {"content": "pong"}) as fake:
        env = _env(url)
        home_a = _home(tmp_path, "a", env)
        with _store(home_a, url, monkeypatch) as store:
            agent = create_agent(store, "solo", settings={"model": "openai/fake", "api_base": fake.url})
        a = start("a", home_a)
        wait_for("node a up", lambda: _up(a), timeout=60)
        wait_for("a owns the agent", lambda: _owners(url).get(agent.agent_id) == ("a", True), timeout=30)
        ready = tmp_path / "holder-ready"
        holder = subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "helpers" / "pg_lock_holder.py"), url, str(ready)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO,
        )  # fmt: skip
        try:
            wait_for("the holder holds the ledger lock", ready.exists, timeout=30, proc=holder)
            os.kill(holder.pid, signal.SIGSTOP)
            frozen_at = time.monotonic()
            sent = a.post_input("solo", "are you stuck?")  # its append waits on the lock until the watchdog
            acked_s = time.monotonic() - frozen_at
            wait_for("a answers the input", lambda: _answered(url, sent["seq"], agent.agent_id), timeout=30)
            answered_s = time.monotonic() - frozen_at
            print(f"\nfrozen holder: input acknowledged {acked_s:.2f} s, answered {answered_s:.2f} s after the freeze")
            log = (home_a / "logs" / "holon.log").read_text()
            assert '"ledger.ended_stalled_append"' in log
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(holder.pid, signal.SIGCONT)
            try:
                out, _ = holder.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                holder.kill()
                out, _ = holder.communicate(timeout=10)
        assert holder.returncode == 0 and "ended" in out, out  # it finds its connection gone
    _check = _holon(home_a, "ledger", "verify", env=env)
    assert _check.returncode == 0, _check


def test_a_running_node_stops_taking_turns_when_the_schema_moves_ahead(
    cluster: tuple[str, Callable[..., Node], list[Node]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another (newer) holon migrated the shared database while node a runs: a's heartbeat sees the
    schema ahead of its code, it gives its agents up between turns and takes no more turns, and its
    status says why (RFC 0008, "Schema versions")."""
    from holon.ledger.pg.connect import connect
    from holon.ledger.pg.migrations import latest_version

    url, start, _nodes = cluster
    with FakeLLM(lambda body: {"content": "pong"}) as fake:
        env = _env(url)
        home_a = _home(tmp_path, "a", env)
        with _store(home_a, url, monkeypatch) as store:
            agent = create_agent(store, "solo", settings={"model": "openai/fake", "api_base": fake.url})
        a = start("a", home_a)
        wait_for("node a up", lambda: _up(a), timeout=60)
        wait_for("a owns the agent", lambda: _owners(url).get(agent.agent_id) == ("a", True), timeout=30)
        first = a.post_input("solo", "hello")
        wait_for("a answers", lambda: _answered(url, first["seq"], agent.agent_id), timeout=30)
        newer = latest_version() + 1
        with connect(url, timeout_s=10) as conn:
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_us) VALUES (%s, 'from the future', 1)", (newer,)
            )

        def released() -> bool:
            return any(p.get("reason") == "schema newer" for *_r, p in events(url, ("lease.released",)))

        wait_for("a gives its agent up", released, timeout=LEASE_S + 10)
        cluster_status = a.status()["cluster"]
        assert f"schema v{newer} is newer than this holon" in cluster_status["schema_error"], cluster_status
        wait_for("a owns nothing", lambda: a.status()["cluster"]["owned"] == 0, timeout=30)
        shown = _holon(home_a, "daemon", "status", env=env).stdout
        assert "node stopped: the database schema" in shown and "upgrade holon on node a" in shown, shown
        sent = a.post_input("solo", "still there?")  # inputs are still stored; no turn takes them here
        wait_for("a's next scans", lambda: a.status()["cluster"]["owned"] == 0 and a.proc.poll() is None)
        assert not any(sent["seq"] in p.get("inputs", []) for *_r, p in events(url, ("turn.started",)))
        assert a.proc.poll() is None


def test_a_deleted_agents_lease_is_released_not_renewed(
    cluster: tuple[str, Callable[..., Node], list[Node]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, start, _nodes = cluster
    env = _env(url)
    home_a = _home(tmp_path, "a", env)
    with _store(home_a, url, monkeypatch) as store:
        agent = create_agent(store, "solo", settings={"model": "openai/fake", "api_base": "http://127.0.0.1:9/v1"})
    a = start("a", home_a)
    wait_for("node a up", lambda: _up(a), timeout=60)
    wait_for("a owns the agent", lambda: _owners(url).get(agent.agent_id) == ("a", True), timeout=30)
    url_a, token = a.api()
    r = httpx.delete(f"{url_a}/v1/agents/solo", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert r.status_code == 204, r.text

    def released() -> bool:
        return any(
            ag == agent.agent_id and p.get("reason") == "deleted"
            for _s, _t, ag, _tu, _o, p in events(url, ("lease.released",))
        )

    wait_for("a releases the deleted agent's lease", released, timeout=30)
    assert _owners(url).get(agent.agent_id) == ("a", False)  # expired at once, and never renewed again
    assert a.status()["cluster"]["owned"] == 0


def _times_answered(url: str, input_seq: int, agent_id: str) -> int:
    """How many turns that took input ``input_seq`` settled ``completed`` (exactly once: 1)."""
    turns = {
        tu for _s, _t, a, tu, _o, p in events(url, ("turn.started",)) if a == agent_id and input_seq in p["inputs"]
    }
    return sum(
        1 for _s, _t, _a, tu, _o, p in events(url, ("turn.settled",)) if tu in turns and p["outcome"] == "completed"
    )


def _sse_messages(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """Server-sent events as dicts of their fields, one per blank-line-ended message."""
    message: dict[str, str] = {}
    for line in lines:
        if not line:
            if message:
                yield message
            message = {}
        elif not line.startswith(":") and ":" in line:
            field, _, value = line.partition(":")
            message[field] = message.get(field, "") + value.removeprefix(" ")


def test_a_node_that_does_not_run_the_turn_streams_its_reply_pauses_and_aborts_it(
    cluster: tuple[str, Callable[..., Node], list[Node]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node b owns the agent; a client talks to node a only (RFC 0008 section 4, "The API on any
    node"). Its event stream follows b's turn from the shared ledger; its streamed chat completion
    ends with b's whole reply, ``stop`` and ``[DONE]`` (the token deltas are b's memory only, so a
    sends the reply once the turn settled); a pause through a keeps b from starting a turn; and an
    abort through a reaches b's running turn (``turn.abort_requested``), which settles aborted, and
    a answers ``aborted: true`` only then."""
    url, start, _nodes = cluster
    reply = ["streamed ", "from ", "b"]

    def step(body: dict[str, Any]) -> dict[str, Any]:
        if "abort me" in json.dumps([m for m in body.get("messages", []) if m.get("role") == "user"][-1:]):
            return {"content": "never recorded", "delay": 60}  # still running when the abort comes
        return {"content": reply}

    with FakeLLM(step) as fake:
        env = _env(url)
        home_a, home_b = _home(tmp_path, "a", env), _home(tmp_path, "b", env)
        with _store(home_a, url, monkeypatch) as store:
            by_node = _agents_for_both(store, fake, per_node=1)
            ids = {ag.name: ag.agent_id for ag in store.agents()}
        a = start("a", home_a)
        b = start("b", home_b)
        wait_for("both nodes up", lambda: _up(a) and _up(b), timeout=60)
        x = by_node["b"][0]
        wait_for("b owns its agent", lambda: _owners(url).get(ids[x]) == ("b", True), timeout=30)
        api_a, token = a.api()
        auth = {"Authorization": f"Bearer {token}"}
        head = max(s for s, *_rest in events(url))

        # a's event stream of b's agent, followed in a thread while a streamed completion runs.
        seen: list[dict[str, Any]] = []

        def follow_events() -> None:
            with httpx.stream(
                "GET", f"{api_a}/v1/agents/{x}/events", params={"after": head}, headers=auth, timeout=30
            ) as r:
                assert r.status_code == 200, r.read()
                for message in _sse_messages(r.iter_lines()):
                    if message.get("event") == "event":
                        seen.append(json.loads(message["data"]))
                        if seen[-1]["type"] == "turn.settled":
                            return

        follower = threading.Thread(target=follow_events, name="sse-follower", daemon=True)
        follower.start()
        body = {"model": x, "stream": True, "messages": [{"role": "user", "content": "stream it"}]}
        with httpx.stream("POST", f"{api_a}/v1/chat/completions", json=body, headers=auth, timeout=30) as r:
            assert r.status_code == 200, r.read()
            data = [m["data"] for m in _sse_messages(r.iter_lines()) if "data" in m]
        assert data[-1] == "[DONE]", data
        chunks = [json.loads(d) for d in data[:-1]]
        assert "error" not in chunks[-1], chunks[-1]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
        assert text == "".join(reply), chunks
        assert [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")][-1] == "stop", chunks
        follower.join(30)
        assert not follower.is_alive(), f"a's event stream never showed the turn settle: {seen}"
        types = [e["type"] for e in seen]
        assert types[0] == "message.received" and "turn.started" in types and types[-1] == "turn.settled", types
        assert [e["seq"] for e in seen] == sorted({e["seq"] for e in seen})  # in order, once each
        started = next(e for e in seen if e["type"] == "turn.started")
        assert started["payload"]["node"] == "b", started

        # Pause through a: b starts no turn for a new input until it is resumed through a.
        a.call("POST", f"/v1/agents/{x}/pause")
        held = a.post_input(x, "while paused")
        a.call("POST", f"/v1/agents/{x}/resume")
        wait_for("b answers once resumed", lambda: _times_answered(url, held["seq"], ids[x]) == 1, timeout=30)
        resumed = max(s for s, _t, ag, *_r in events(url, ("agent.configured",)) if ag == ids[x])
        took = [s for s, *_r, p in events(url, ("turn.started",)) if held["seq"] in p["inputs"]]
        assert took and min(took) > resumed, (took, resumed)  # no turn while paused

        # Abort through a of b's running turn.
        sent = a.post_input(x, "abort me")

        def running_turn() -> str | None:
            return next(
                (tu for _s, _t, ag, tu, _o, p in events(url, ("turn.started",)) if sent["seq"] in p["inputs"]), None
            )

        wait_for("b's turn waits on the model", lambda: running_turn() is not None, timeout=30)
        t0 = time.monotonic()
        assert a.call("POST", f"/v1/agents/{x}/abort") == {"aborted": True}
        print(f"\nabort through the other node answered in {time.monotonic() - t0:.2f} s")
        turn = running_turn()
        requested = [(ag, p["turn_id"], p["node"]) for _s, _t, ag, _tu, _o, p in events(url, ("turn.abort_requested",))]
        assert requested == [(ids[x], turn, "a")], requested
        [settled] = [p for _s, _t, _ag, tu, _o, p in events(url, ("turn.settled",)) if tu == turn]
        assert (settled["outcome"], settled["reason"]) == ("failed", "aborted by the operator"), settled
        assert a.call("POST", f"/v1/agents/{x}/abort") == {"aborted": False}  # nothing runs now
        after = a.post_input(x, "after the abort")
        wait_for("b answers the next input", lambda: _times_answered(url, after["seq"], ids[x]) == 1, timeout=30)
    assert no_turn_on_two_nodes(url) >= 3
    r = _holon(home_a, "ledger", "verify", env=env)
    assert r.returncode == 0, r


def _pids_running(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(") ", 1)[1][0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def _log_lines(home: Path, event: str) -> list[dict[str, Any]]:
    out = []
    for line in (home / "logs" / "holon.log").read_text().splitlines():
        if f'"{event}"' in line:
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
    return out


def test_a_node_cut_from_the_database_past_its_lease_stops_its_turn_and_tasks_and_answers_nothing_twice(
    cluster: tuple[str, Callable[..., Node], list[Node]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node b reaches PostgreSQL through a TCP proxy that the test cuts for longer than ``lease_s``
    (RFC 0008 step 12, "an outage longer than lease_s with another node taking over"), while b's
    agent has a background task running and a turn waiting on the model. Cut off, b stops acting
    for the agent at its own deadline, without the database: the turn cancelled and the background
    task's process killed (step 9: background tasks stopped when ``holds()`` turns false); a takes
    the agent over when the lease expires and answers the interrupted input and a new one; b's
    API refuses input meanwhile (503). The proxy restored, b reconnects, gets its agent back
    between turns, and answers. Every acknowledged input is answered exactly once, nothing of b's
    old turn is recorded after a took over, and no turn ran on two nodes."""
    from helpers.tcp_proxy import TcpProxy

    url, start, _nodes = cluster
    marker = f"sleep 600.{os.getpid()}"  # the background task's process, found in /proc by it
    slow: set[str] = set()

    def step(body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages", [])
        if messages and messages[-1].get("role") == "tool":
            return {"content": "the task runs"}
        last_user = json.dumps([m for m in messages if m.get("role") == "user"][-1:])
        if "start a task" in last_user:
            return {"tool_calls": [{"name": "run_command", "arguments": {"command": marker, "wait_s": 0.2}}]}
        if any(m in last_user for m in slow):
            return {"content": "late answer from b", "delay": 60}  # still waiting when b is cut off
        return {"content": "pong"}

    with TcpProxy("127.0.0.1", 5432) as proxy, FakeLLM(step) as fake:
        assert "127.0.0.1:5432" in url, url
        url_b = url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
        env = _env(url)
        home_a, home_b = _home(tmp_path, "a", env), _home(tmp_path, "b", env)
        with _store(home_a, url, monkeypatch) as store:
            by_node = _agents_for_both(store, fake, per_node=1)
            ids = {ag.name: ag.agent_id for ag in store.agents()}
        a = start("a", home_a)
        b = start("b", home_b, url_b)
        wait_for("both nodes up", lambda: _up(a) and _up(b), timeout=60)
        x = by_node["b"][0]
        wait_for("b owns its agent", lambda: _owners(url).get(ids[x]) == ("b", True), timeout=30)

        first = a.post_input(x, "start a task")
        wait_for("b answers", lambda: _times_answered(url, first["seq"], ids[x]) == 1, timeout=30)
        wait_for("b's background task runs", lambda: bool(_pids_running(marker)), timeout=30)
        task_pids = set(_pids_running(marker))  # the command (and its sandbox's process, if any)
        slow.add("slow one")
        busy = a.post_input(x, "slow one")
        wait_for(
            "b's turn waits on the model",
            lambda: any(busy["seq"] in p["inputs"] and p["node"] == "b" for *_r, p in events(url, ("turn.started",))),
            timeout=30,
        )
        slow.clear()  # a's retry of the interrupted turn is answered at once

        def b_gave_up() -> list[dict[str, Any]]:
            return [ln for ln in _log_lines(home_b, "node.lost") if ln.get("agent_id") == ids[x]]

        lost_before = len(b_gave_up())
        cut_at = time.monotonic()
        proxy.cut()
        try:
            wait_for("a takes b's agent over", lambda: _owners(url).get(ids[x]) == ("a", True), timeout=LEASE_S + 10)
            takeover_s = time.monotonic() - cut_at
            wait_for("a answers the interrupted input", lambda: _times_answered(url, busy["seq"], ids[x]) == 1)
            during = a.post_input(x, "while b is cut off")
            wait_for("a answers a new input", lambda: _times_answered(url, during["seq"], ids[x]) == 1, timeout=30)
            url_b_api, token_b = b.api()
            refused = httpx.post(
                f"{url_b_api}/v1/agents/{x}/inputs", json={"text": "to b while cut off"},
                headers={"Authorization": f"Bearer {token_b}"}, timeout=30,
            )  # fmt: skip
            assert refused.status_code == 503 and refused.headers.get("Retry-After"), refused.text
            # At its deadline, with no database: the turn stopped (cancelled, or already ended on the
            # lost connection: held back), the task killed. On a loaded machine a late heartbeat may
            # have made b give the agent up (and kill the task) once before the cut: the same path.
            wait_for("b noticed it lost the agent", lambda: len(b_gave_up()) > lost_before, timeout=30)
            killed = [ln for ln in b_gave_up() if ln["tasks_killed"]]
            assert killed and all("self-fencing" in ln["reason"] for ln in killed), b_gave_up()
            wait_for("the background task's process is gone", lambda: not task_pids & set(_pids_running(marker)))
            cut_s = time.monotonic() - cut_at
        finally:
            proxy.restore()
        print(f"\nb cut off {cut_s:.1f} s (lease_s {LEASE_S}); a owned its agent {takeover_s:.2f} s after the cut")
        assert cut_s > LEASE_S and takeover_s <= LEASE_S + 5, (cut_s, takeover_s)

        # b reconnects by itself; its agent comes back to it between turns (it is the preferred node).
        wait_for("b gets its agent back", lambda: _owners(url).get(ids[x]) == ("b", True), timeout=60)
        after = b.post_input(x, "after the outage")
        wait_for("b answers again", lambda: _times_answered(url, after["seq"], ids[x]) == 1, timeout=30)

    for sent in (first, busy, during, after):
        assert _times_answered(url, sent["seq"], ids[x]) == 1, sent
    old_seq, old_turn = next(
        (s, tu)
        for s, _t, _ag, tu, _o, p in events(url, ("turn.started",))
        if busy["seq"] in p["inputs"] and p["node"] == "b"
    )
    taken = min(
        s
        for s, _t, ag, _tu, _o, p in events(url, ("lease.acquired",))
        if ag == ids[x] and p["node"] == "a" and s > old_seq
    )
    late = [(t, o) for s, t, _ag, tu, o, _p in events(url) if tu == old_turn and s > taken]
    assert all(o in ("runtime:recovery", "runtime:projector") for _t, o in late), late
    assert not any(t == "model.responded" for t, _o in late), late
    assert no_turn_on_two_nodes(url) >= 4
    r = _holon(home_a, "ledger", "verify", env=env)
    assert r.returncode == 0, r
