"""``holon bench cluster``: several ``holon serve --node`` processes on one PostgreSQL database
(RFC 0008 step 14).

Everything is real but the model: a throwaway database per measurement (created and dropped on
the server of ``HOLON_BENCH_PG``, default ``postgresql://root@127.0.0.1:5432/postgres``), node
processes with homes of their own sharing it, the HTTP API on 127.0.0.1, and the loopback fake
model of ``holon.testing.fake_llm`` answering every call after a fixed latency.

* **Append** (``append_ratio_pg_vs_raw``): holon's ``Ledger.append`` on ``PgEngine`` (one event
  per transaction: the ledger lock and head, the chained row, COMMIT) against raw psycopg inserts
  of prebuilt rows into the same ``events`` table (``BEGIN``, ``INSERT``, ``COMMIT`` in one
  pipeline), alternating rounds on one database; medians. At ``synchronous_commit = on`` (the
  headline) and ``off`` beside (round trips and Python, no WAL flush to hide them).
* **Throughput** (``turns_per_s`` at each ``--nodes`` count, ``scaling_3_over_1``): a fresh
  database and that many nodes; each node owns ``per_node`` agents (created until the rendezvous
  policy gives every node that many) and each agent is kept busy by a client posting ``POST
  …/messages?wait=`` to its owner again as soon as the last one is answered. A daemon has no
  concurrent-turn setting: it runs one turn per agent at a time, so ``per_node`` busy agents is
  the per-node concurrency cap, the same at every node count. The nodes first **settle** (their
  processes below ``SETTLE_CORE_PER_NODE`` of a core: the model library's background import and
  the model children's start are over; before this, start-up CPU was counted as turns' CPU), then
  the window of ``seconds`` opens once every client had two answers. Beside the rate: the
  commits (``pg_stat_database.xact_commit``, reads included), WAL flushes (``pg_stat_wal.wal_sync``)
  and writing transactions per turn; **CPU per turn** split into the node processes, their model
  children and *this database's* PostgreSQL backends (``pg_stat_activity``; their sum is
  ``cluster``), with every ``postgres`` process (other users' too) and this bench process (the
  clients and the fake model, never counted as the cluster's) beside; ``cluster_cores``, the
  cores the cluster used; and the **regime**: ``bound_turns_per_s`` = nodes x ``per_node`` /
  (latency x model calls per turn), the rate a latency-bound cluster approaches, ``of_bound`` the
  share reached and ``latency_bound`` whether it is at least ``LATENCY_BOUND_SHARE``. A point
  that is not latency-bound measured the machine (its cores, other load), not the cluster's
  scaling. The default latency is ``LATENCY_MS`` (1 s, like a real provider's); 200 ms makes
  three nodes need ~3 cores and is CPU-bound on a 2-core machine.
  ``profile`` (``--profile DIR``): every node process and model child writes per-thread CPU
  profiles of the window (``holon.testing.cpuprofile``; ``rfcs/0008/profile_cluster.py`` sums them).
* **Failover** (``failover_s_p95``): on a cluster of three nodes with ``lease_s`` (default 15 s,
  the shipped one), a node owning agents is SIGKILLed right after an input for one of its agents
  was acknowledged; the sample is the time from the kill until every one of its agents is held
  live by another node and that input is answered. The node is restarted and its share handed
  back before the next sample.
* **Accounting** (``lost_inputs``, ``duplicate_turns``): over every acknowledged input of every
  phase, read from the ledger: an input never taken by a ``completed`` turn is lost, one taken by
  more than one completed turn is a duplicate, as is a turn id started twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from holon.bench.progress import step
from holon.clock import SystemClock
from holon.config import HomePaths, load_settings
from holon.daemon.cluster import preferred
from holon.ids import new_id
from holon.ledger import Ledger, NewEvent
from holon.ledger import events as ev
from holon.ledger.codec import chain_hash_of, encode_payload
from holon.ledger.envelope import header_values
from holon.ledger.pg.append import EVENT_INSERT
from holon.ledger.pg.connect import connect
from holon.ledger.pg.engine import PgEngine
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.testing.fake_llm import FakeLLM

__all__ = [
    "Cluster",
    "Node",
    "account",
    "answers",
    "format_report",
    "post",
    "run_cluster_bench",
    "throwaway_db",
    "wait_until",
]

ADMIN_URL = os.environ.get("HOLON_BENCH_PG") or "postgresql://root@127.0.0.1:5432/postgres"
#: The fake model's default latency per call: real providers answer in 0.5-30 s, and at 1 s three
#: nodes of 2 busy agents need ~0.6 core of this project's 2-core machine, so the points stay
#: latency-bound there; 200 ms (``--latency-ms 200``) needs ~3 cores at three nodes and measures the
#: machine's CPU instead (RFC 0008 step 14).
LATENCY_MS = 1000.0
TARGETS = {"append_ratio_pg_vs_raw": 0.5, "scaling_3_over_1": 2.4, "lost_inputs": 0, "duplicate_turns": 0}
METHOD = (
    "append: holon Ledger.append on PgEngine vs raw psycopg BEGIN/INSERT/COMMIT pipelines into the same events "
    "table, 1 event/tx, {rounds} alternating rounds of {append_s:g} s, medians, synchronous_commit on (off beside); "
    "throughput: a fresh database and N `holon serve --node` processes, {per_node} agents per node kept busy "
    "(one turn per agent at a time is the daemon's only concurrency cap) through POST /messages?wait to the owner, "
    "fake model {latency_ms:g} ms per call, nodes settled (idle after start-up) first, {seconds:g} s counted once every "
    "client had two answers; writing transactions = transaction ids assigned in the window; CPU per turn from /proc: "
    "node processes + model children + this database's backends = cluster (the bench's clients and fake model "
    "beside); latency_bound = turns/s >= 0.8 x nodes x per_node / (latency x calls per turn); failover: SIGKILL of a node owning "
    "agents on 3 nodes at lease_s {lease_s:g}, time until another node holds all its agents and answers an input "
    "acknowledged just before the kill, {samples} samples; lost/duplicate from the ledger over every acknowledged input"
)


# --- databases ------------------------------------------------------------------------------------


def _url(name: str) -> str:
    return ADMIN_URL.rsplit("/", 1)[0] + "/" + name


@contextlib.contextmanager
def throwaway_db(*, synchronous_commit: str = "on") -> Iterator[str]:
    """A new empty database (its URL), dropped afterwards whatever happens."""
    name = f"holon_bench_cluster_{secrets.token_hex(4)}"
    with connect(ADMIN_URL) as conn:
        conn.execute(f"CREATE DATABASE {name}")
        conn.execute(f"ALTER DATABASE {name} SET synchronous_commit = {synchronous_commit}")
    try:
        yield _url(name)
    finally:
        with connect(ADMIN_URL) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# --- append: holon vs raw -------------------------------------------------------------------------


def _event(i: int) -> NewEvent:
    return NewEvent(agent_id="agt_bench", payload=ev.DecisionRecorded(text=f"decision {i} " + "x" * 200))


def _holon_rate(url: str, seconds: float) -> float:
    ledger = Ledger(PgEngine(url), clock=SystemClock(), hooks=[])
    try:
        n, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < seconds:
            ledger.append(_event(n))
            n += 1
        return n / elapsed
    finally:
        ledger.close()


def _raw_rate(url: str, seconds: float, expect: int) -> float:
    """Raw inserts of rows built beforehand (``expect`` of them, chained on the current head)."""
    clock = SystemClock()
    with connect(url) as conn:
        head = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
        seq, prev = (int(head[0]), str(head[1])) if head else (0, "0" * 64)
        rows = []
        for i in range(expect):
            ne = _event(i)
            enc = encode_payload(ne.payload, blob_threshold=16_384, preview_chars=400)
            seq += 1
            header = header_values(ne, seq=seq, event_id=new_id("evt"), ts_us=clock.now_us())
            prev = chain_hash_of(prev, header, enc.data)
            rows.append((*header, enc.text, prev))
        cur = conn.cursor()
        n, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < seconds and n < len(rows):
            with conn.pipeline():
                cur.execute("BEGIN")
                cur.execute(EVENT_INSERT, rows[n])
                cur.execute("COMMIT")
            n += 1
        # what was built and not inserted stays out: the chain continues from the last inserted row
        return n / elapsed


def measure_append(*, seconds: float, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for sync in ("on", "off"):
        holon, raw = [], []
        with throwaway_db(synchronous_commit=sync) as url:
            PgEngine(url).open(create=True, now_us=SystemClock().now_us)
            for r in range(rounds):
                step(f"append, synchronous_commit={sync}", r, rounds)
                h = _holon_rate(url, seconds)
                raw.append(_raw_rate(url, seconds, expect=int(h * seconds * 4) + 2000))
                holon.append(h)
        key = "" if sync == "on" else "_sync_off"
        out[f"append_holon_events_per_s{key}"] = round(statistics.median(holon))
        out[f"append_raw_events_per_s{key}"] = round(statistics.median(raw))
        out[f"append_ratio_pg_vs_raw{key}"] = round(statistics.median(holon) / statistics.median(raw), 2)
    return out


# --- a cluster of node processes ------------------------------------------------------------------


def _holon(*args: str) -> list[str]:
    return [sys.executable, "-c", "from holon.cli.main import run; run()", *args]


@dataclass
class Node:
    name: str
    home: Path
    proc: subprocess.Popen[bytes]

    def api(self) -> tuple[str, dict[str, str]]:
        info = json.loads((self.home / "run" / "daemon.json").read_text())
        token = (self.home / "api.token").read_text().strip()
        return str(info["api"]), {"Authorization": f"Bearer {token}"}

    def up(self) -> bool:
        if self.proc.poll() is not None:
            tail = (self.home / f"serve-{self.name}.out").read_text()[-2000:]
            raise RuntimeError(f"node {self.name} exited with {self.proc.returncode}: {tail}")
        try:
            info = json.loads((self.home / "run" / "daemon.json").read_text())
        except (OSError, ValueError):
            return False
        api = str(info.get("api") or "")
        return (
            info.get("state") == "running"
            and bool(api)
            and not api.endswith(":0")
            and info.get("pid") == (self.proc.pid)
        )


def wait_until(what: str, check: Callable[[], bool], timeout: float, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


@dataclass
class Cluster:
    """Node processes on one database, each with a home of its own under ``root``; ``close``
    (or the context manager) stops every process it started, SIGKILL after a grace."""

    url: str
    root: Path
    lease_s: float
    extra_env: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HOLON_")}
        env["HOLON_STORAGE_URL"] = self.url
        env["HOLON_NODE_LEASE_S"] = str(self.lease_s)
        return {**env, **self.extra_env}

    def home(self, name: str) -> Path:
        home = self.root / name
        if not home.exists():
            r = subprocess.run(_holon("--home", str(home), "init"), env=self.env(), capture_output=True, check=False)
            if r.returncode != 0:
                raise RuntimeError(f"holon init {home}: {r.stderr.decode()[-1000:]}")
        return home

    @contextlib.contextmanager
    def store(self) -> Iterator[Store]:
        paths = HomePaths(self.home("admin"))
        saved = os.environ.get("HOLON_STORAGE_URL")
        os.environ["HOLON_STORAGE_URL"] = self.url
        try:
            with Store.open(paths, load_settings(paths), clock=SystemClock()) as store:
                yield store
        finally:
            if saved is None:
                os.environ.pop("HOLON_STORAGE_URL", None)
            else:
                os.environ["HOLON_STORAGE_URL"] = saved

    def spread_agents(
        self, names: list[str], per_node: int, model_url: str, prefix: str = "ag"
    ) -> dict[str, list[str]]:
        """Create agents until the rendezvous policy gives each node ``per_node``; node -> agent ids."""
        made: dict[str, list[str]] = {n: [] for n in names}
        with self.store() as store:
            i = 0
            while min(len(v) for v in made.values()) < per_node:
                agent = create_agent(
                    store,
                    f"{prefix}{i}",
                    settings={"model": "openai/fake", "api_base": model_url},
                    origin="operator:bench",
                )
                i += 1
                node = preferred(agent.agent_id, names)
                assert node is not None
                made[node].append(agent.agent_id)
        return made

    def start(self, name: str) -> Node:
        home = self.home(name)
        with (home / f"serve-{name}.out").open("ab") as out:
            proc = subprocess.Popen(
                _holon("--home", str(home), "serve", "--node", name, "--port", "0"),
                stdout=out, stderr=subprocess.STDOUT, env=self.env(),
            )  # fmt: skip
        self.procs.append(proc)
        node = Node(name, home, proc)
        self.nodes[name] = node
        return node

    def start_all(self, names: list[str], timeout: float = 180) -> None:
        started = [self.start(n) for n in names]
        wait_until("nodes up", lambda: all(n.up() for n in started), timeout, every=0.2)

    def kill(self, name: str) -> None:
        node = self.nodes[name]
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.proc.pid, signal.SIGKILL)
        node.proc.wait(30)

    def owners(self) -> dict[str, tuple[str, bool]]:
        with connect(self.url) as conn:
            rows = conn.execute("SELECT agent_id, node, expires_at > clock_timestamp() FROM leases").fetchall()
        return {str(a): (str(n), bool(live)) for a, n, live in rows}

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def post(node: Node, agent_id: str, text: str, *, wait_s: float = 0, timeout: float = 60) -> dict[str, Any]:
    """An input through ``node``'s API (``/messages?wait=`` when ``wait_s``); the 2xx answer's body.

    A 503 (storage unavailable for a moment: nothing was acknowledged) is retried after its
    ``Retry-After``, as a client should, until ``timeout``."""
    api, headers = node.api()
    deadline = time.monotonic() + timeout
    while True:
        if wait_s:
            r = httpx.post(f"{api}/v1/agents/{agent_id}/messages", params={"wait": wait_s}, json={"text": text},
                           headers=headers, timeout=timeout)  # fmt: skip
        else:
            r = httpx.post(f"{api}/v1/agents/{agent_id}/inputs", json={"text": text}, headers=headers, timeout=timeout)
        if r.status_code != 503 or time.monotonic() >= deadline:
            break
        after = r.headers.get("retry-after", "1")
        time.sleep(min(float(after), 2.0) if after.replace(".", "", 1).isdigit() else 1.0)
    r.raise_for_status()
    return dict(r.json())


# --- accounting -----------------------------------------------------------------------------------


def _turn_rows(url: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    with connect(url) as conn:
        rows = conn.execute(
            "SELECT type, agent_id, turn_id, payload FROM events WHERE type IN ('turn.started', 'turn.settled') "
            "ORDER BY seq"
        ).fetchall()
    return [(str(t), str(a), str(tu), json.loads(p)) for t, a, tu, p in rows]


def answers(url: str) -> tuple[Counter[int], int]:
    """(input seq -> completed turns that took it, turn ids started more than once)."""
    started: dict[str, list[int]] = {}
    twice = 0
    taken: Counter[int] = Counter()
    for type_, _agent, turn, payload in _turn_rows(url):
        if type_ == "turn.started":
            twice += turn in started
            started[turn] = [int(s) for s in payload.get("inputs", [])]
        elif payload.get("outcome") == "completed":
            taken.update(started.get(turn, []))
    return taken, twice


def account(url: str, acked: list[int]) -> dict[str, int]:
    taken, twice = answers(url)
    return {
        "acknowledged": len(acked),
        "lost_inputs": sum(1 for s in acked if taken[s] == 0),
        "duplicate_turns": sum(1 for s in acked if taken[s] > 1) + twice,
    }


def drained(url: str, acked: list[int]) -> bool:
    taken, _ = answers(url)
    return all(taken[s] for s in acked)


# --- throughput -----------------------------------------------------------------------------------


def _db_counters(url: str) -> tuple[int, int, int]:
    """(commits, WAL flushes, transaction ids assigned) so far: deltas give the commits (reads
    included), the flushes and the writing transactions of a window (one id is this read's own)."""
    with connect(url) as conn:
        commits = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").fetchone()
        syncs = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
        xid = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    return int(commits[0] if commits else 0), int(syncs[0] if syncs else 0), int(xid[0] if xid else 0)


def _cpu_table() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command name, CPU seconds so far, user + system) of every process."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, str, float]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            raw = (d / "stat").read_text()
            comm = raw[raw.index("(") + 1 : raw.rindex(")")]
            rest = raw[raw.rindex(")") + 2 :].split()
            stats[int(d.name)] = (int(rest[1]), comm, (int(rest[11]) + int(rest[12])) / tick)
    return stats


def _descendants(stats: dict[int, tuple[int, str, float]], roots: list[int]) -> set[int]:
    mine, frontier = set(roots), list(roots)
    while frontier:
        parent = frontier.pop()
        kids = [pid for pid, (ppid, _c, _t) in stats.items() if ppid == parent and pid not in mine]
        mine.update(kids)
        frontier.extend(kids)
    return mine


def _backends(url: str) -> set[int]:
    """The server processes of the database at ``url`` (this bench's connection left out)."""
    with connect(url) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return {int(r[0]) for r in rows}


@dataclass(frozen=True, slots=True)
class CpuSample:
    """CPU seconds so far, split by whose: the node processes themselves, their model children,
    this database's PostgreSQL backends, every ``postgres`` process (other databases' too, and the
    server's own writers), and this bench process (its clients and the fake model: never counted
    as the cluster's)."""

    nodes: float
    models: float
    backends: dict[int, float]
    postgres: dict[int, float]
    bench: float


def _cpu(roots: list[int], url: str) -> CpuSample:
    backends = _backends(url)
    stats = _cpu_table()
    below = _descendants(stats, roots) - set(roots) - {os.getpid()}
    return CpuSample(
        nodes=sum(stats[p][2] for p in roots if p in stats),
        models=sum(stats[p][2] for p in below if p in stats),
        backends={p: stats[p][2] for p in backends if p in stats},
        postgres={pid: t for pid, (_pp, comm, t) in stats.items() if comm == "postgres"},
        bench=time.process_time(),
    )


def _cpu_delta(a: CpuSample, b: CpuSample) -> dict[str, float]:
    """Seconds in the window; a server process that started inside it counts whole, one that
    ended in it is lost (the nodes keep pooled connections: rare; other users' come and go)."""
    return {
        "nodes": b.nodes - a.nodes,
        "models": b.models - a.models,
        "postgres_db": sum(t - a.backends.get(p, 0.0) for p, t in b.backends.items()),
        "postgres_all": sum(t - a.postgres.get(p, 0.0) for p, t in b.postgres.items()),
        "bench": b.bench - a.bench,
    }


#: A started node is settled once its processes (with their model children) use less than this
#: share of a core, measured over ``SETTLE_WINDOW_S``: an idle node needs ~0.013 here, a node still
#: importing the model library in the background (seconds of CPU, tens of seconds on a loaded
#: machine) far more. Opening a throughput window before that counted the start-up as turns' CPU.
SETTLE_CORE_PER_NODE = 0.05
SETTLE_WINDOW_S = 2.0


def settle(roots: list[int], url: str, *, what: str, timeout: float = 180.0) -> float:
    """Wait until the node processes ``roots`` are idle (``SETTLE_CORE_PER_NODE``); seconds waited."""
    step(what, 0, None)
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        a = _cpu(roots, url)
        time.sleep(SETTLE_WINDOW_S)
        b = _cpu(roots, url)
        if (b.nodes + b.models - a.nodes - a.models) / SETTLE_WINDOW_S < SETTLE_CORE_PER_NODE * len(roots):
            break
    return round(time.monotonic() - began, 1)


def _profile_signal(roots: list[int], where: Path | None, *, close: bool = False) -> None:
    """SIGUSR2 to every armed process of the cluster (``holon.testing.cpuprofile``), which opens
    its window, or closes it and writes its profiles (then waited for); nothing without ``where``."""
    if where is None:
        return
    mine = _descendants(_cpu_table(), roots)
    armed = [p for p in mine if (where / f"armed-{p}").exists()]
    for p in armed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGUSR2)
    if close:
        wait_until("the profiles written", lambda: len(list(where.glob("*.json"))) >= len(armed), 60, every=0.2)


#: A point is latency-bound when its turns/s reach this share of concurrency / latency: the rest
#: of a turn (its CPU, commits, HTTP) is then a small part of its wall time, as in production.
LATENCY_BOUND_SHARE = 0.8


def latency_bound(turns_per_s: float, *, nodes: int, per_node: int, latency_ms: float, calls: float) -> dict[str, Any]:
    """The ceiling a latency-bound cluster approaches (every busy agent waiting on the model all
    the time: nodes x per_node / (latency x model calls per turn)) and how close the point came."""
    bound = nodes * per_node / max(latency_ms / 1000 * max(calls, 1.0), 1e-9)
    share = turns_per_s / bound
    return {
        "bound_turns_per_s": round(bound, 2),
        "of_bound": round(share, 2),
        "latency_bound": share >= LATENCY_BOUND_SHARE,
    }


def _model_calls(url: str, since_seq: int) -> tuple[int, int]:
    """(model calls, completed turns) after ``since_seq``, from the ledger."""
    with connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE type = 'model.responded'), "
            "count(*) FILTER (WHERE type = 'turn.settled') FROM events WHERE seq > %s",
            (since_seq,),
        ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def _calls_per_turn(url: str, seq0: int, seq1: int) -> float:
    """Model calls per settled turn among the events in ``(seq0, seq1]``."""
    calls, settled = _model_calls(url, seq0)
    calls_late, settled_late = _model_calls(url, seq1)
    return (calls - calls_late) / max(settled - settled_late, 1)


def _cpu_report(cpu: dict[str, float], *, turns: int, wall: float) -> dict[str, Any]:
    """CPU ms per turn by whose, and the cores the cluster (nodes, model children, this
    database's backends) used; the bench's own beside, never in the cluster's."""
    cluster_s = cpu["nodes"] + cpu["models"] + cpu["postgres_db"]
    return {
        "cpu_ms_per_turn": {
            "cluster": round(cluster_s * 1000 / turns, 1),
            "nodes": round(cpu["nodes"] * 1000 / turns, 1),
            "models": round(cpu["models"] * 1000 / turns, 1),
            "postgres": round(cpu["postgres_db"] * 1000 / turns, 1),
            "postgres_all": round(cpu["postgres_all"] * 1000 / turns, 1),
            "bench": round(cpu["bench"] * 1000 / turns, 1),
        },
        "cluster_cores": round(cluster_s / wall, 2),
        "cpu_cores_busy": round((cluster_s + cpu["bench"]) / wall, 2),
    }


def _head(url: str) -> int:
    with connect(url) as conn:
        row = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
    return int(row[0]) if row else 0


def measure_turns(
    nodes: int, *, per_node: int, latency_ms: float, seconds: float, profile: Path | None = None
) -> dict[str, Any]:
    """Turns per second at ``nodes`` nodes (module docstring); the window opens once every client
    had two answers (the nodes' model processes warm). ``profile``: a directory where every node
    process and model child writes per-thread CPU profiles of the window (``holon.testing.cpuprofile``)."""
    names = [f"n{i}" for i in range(nodes)]
    extra = {"HOLON_CPU_PROFILE": str(profile / f"nodes{nodes}")} if profile is not None else {}
    with (
        throwaway_db() as url,
        tempfile.TemporaryDirectory(prefix="holon-bench-cluster-") as tmp,
        FakeLLM(lambda body: {"content": "pong", "delay": latency_ms / 1000}) as fake,
        Cluster(url, Path(tmp), lease_s=15.0, extra_env=extra) as cluster,
    ):
        step(f"throughput at {nodes} node(s): starting", 0, None)
        by_node = cluster.spread_agents(names, per_node, fake.url)
        cluster.start_all(names)
        wait_until(
            "agents spread",
            lambda: all(cluster.owners().get(a) == (n, True) for n in names for a in by_node[n][:per_node]),
            60,
            every=0.2,
        )
        acked: list[int] = []
        done: dict[str, list[float]] = {a: [] for n in names for a in by_node[n][:per_node]}
        lock = threading.Lock()
        stop = threading.Event()
        errors: list[str] = []

        def client(node: Node, agent: str) -> None:  # posts again at each answer until ``stop``
            while not stop.is_set():
                try:
                    r = post(node, agent, "ping", wait_s=60, timeout=90)
                except httpx.HTTPError as e:
                    errors.append(repr(e))
                    return
                with lock:
                    acked.append(int(r["input_seq"]))
                    if r["status"] == "completed":
                        done[agent].append(time.monotonic())

        threads = [
            threading.Thread(target=client, args=(cluster.nodes[n], a), daemon=True)
            for n in names
            for a in by_node[n][:per_node]
        ]
        roots = [n.proc.pid for n in cluster.nodes.values()]
        where = Path(extra["HOLON_CPU_PROFILE"]) if extra else None
        settled_s = settle(roots, url, what=f"throughput at {nodes} node(s): settling")
        try:
            for t in threads:
                t.start()
            step(f"throughput at {nodes} node(s): warming up", 0, None)
            wait_until(
                "every client answered twice", lambda: bool(errors) or all(len(d) >= 2 for d in done.values()), 180
            )
            _profile_signal(roots, where)
            seq0, c0, t0, p0 = _head(url), _db_counters(url), time.monotonic(), _cpu(roots, url)
            step(f"throughput at {nodes} node(s): counting", 0, None)
            wait_until("the window", lambda: time.monotonic() >= t0 + seconds, seconds + 5)
            c1, t1, p1, seq1 = _db_counters(url), time.monotonic(), _cpu(roots, url), _head(url)
            _profile_signal(roots, where, close=True)
        finally:
            stop.set()
            for t in threads:
                t.join(120)
        if errors:
            raise RuntimeError(f"a client failed: {errors[0]}")
        turns = sum(1 for d in done.values() for x in d if t0 <= x <= t1)
        calls_per_turn = _calls_per_turn(url, seq0, seq1)
        wait_until("every acknowledged input answered", lambda: drained(url, acked), 60, every=0.2)
        counted = account(url, acked)
    per = max(turns, 1)
    wall = t1 - t0
    rate = turns / wall
    return {
        "turns_per_s": round(rate, 2),
        "model_calls_per_turn": round(calls_per_turn, 2),
        **latency_bound(rate, nodes=nodes, per_node=per_node, latency_ms=latency_ms, calls=calls_per_turn),
        "write_tx_per_turn": round((c1[2] - c0[2] - 1) / per, 2),
        "wal_syncs_per_turn": round((c1[1] - c0[1]) / per, 2),
        "commits_per_turn": round((c1[0] - c0[0]) / per, 1),
        "write_tx_per_s": round((c1[2] - c0[2] - 1) / wall, 1),
        **_cpu_report(_cpu_delta(p0, p1), turns=per, wall=wall),
        "load_1m": round(os.getloadavg()[0], 2),
        "settle_s": settled_s,
        **counted,
    }


# --- failover -------------------------------------------------------------------------------------


def measure_failover(*, samples: int, lease_s: float, per_node: int) -> dict[str, Any]:
    names = ["n0", "n1", "n2"]
    times: list[float] = []
    with (
        throwaway_db() as url,
        tempfile.TemporaryDirectory(prefix="holon-bench-failover-") as tmp,
        FakeLLM(lambda body: {"content": "pong"}) as fake,
        Cluster(url, Path(tmp), lease_s=lease_s) as cluster,
    ):
        step("failover: starting 3 nodes", 0, samples)
        by_node = cluster.spread_agents(names, per_node, fake.url)

        def spread() -> bool:
            owners = cluster.owners()
            return all(owners.get(a) == (n, True) for n in names for a in by_node[n])

        cluster.start_all(names)
        wait_until("agents spread", spread, 60, every=0.2)
        acked: list[int] = []
        for i in range(samples):
            step("failover", i, samples)
            victim = names[i % len(names)]
            survivor = cluster.nodes[names[(i + 1) % len(names)]]
            agent = by_node[victim][0]
            acked.append(int(post(cluster.nodes[victim], agent, f"before kill {i}")["seq"]))
            killed_at = time.monotonic()
            cluster.kill(victim)
            probe = int(post(survivor, agent, f"after kill {i}")["seq"])
            acked.append(probe)

            def moved(victim: str = victim, probe: int = probe) -> bool:
                owners = cluster.owners()
                held = all(owners.get(a, ("", False))[0] not in ("", victim) and owners[a][1] for a in by_node[victim])
                return held and answers(url)[0][probe] > 0

            wait_until("another node holds and answers", moved, lease_s + 60, every=0.05)
            times.append(time.monotonic() - killed_at)
            cluster.start(victim)
            wait_until("the node back", cluster.nodes[victim].up, 180, every=0.2)
            wait_until("its share handed back", spread, lease_s + 60, every=0.2)
        wait_until("every acknowledged input answered", lambda: drained(url, acked), 60, every=0.2)
        counted = account(url, acked)
    times.sort()
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    return {"failover_s": [round(t, 2) for t in times], "failover_s_p95": round(p95, 2), **counted}


# --- the bench ------------------------------------------------------------------------------------


def run_cluster_bench(
    *, nodes: tuple[int, ...] = (1, 2, 3), per_node: int = 2, latency_ms: float = LATENCY_MS, seconds: float = 15.0,
    append_s: float = 2.0, rounds: int = 3, samples: int = 3, lease_s: float = 15.0, profile: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    result: dict[str, Any] = {
        "method": METHOD.format(
            rounds=rounds,
            append_s=append_s,
            per_node=per_node,
            latency_ms=latency_ms,
            seconds=seconds,
            lease_s=lease_s,
            samples=samples,
        ),
        "load_1m": round(os.getloadavg()[0], 2),
        "cores": os.cpu_count(),
        "nodes": list(nodes),
        "per_node": per_node,
        "latency_ms": latency_ms,
        "lease_s": lease_s,
        "targets": {**TARGETS, "failover_s_p95": lease_s + 5},
    }
    result.update(measure_append(seconds=append_s, rounds=rounds))
    lost = dup = acked = 0
    points: dict[str, Any] = {}
    for n in nodes:
        point = measure_turns(n, per_node=per_node, latency_ms=latency_ms, seconds=seconds, profile=profile)
        lost, dup, acked = (
            lost + point.pop("lost_inputs"),
            dup + point.pop("duplicate_turns"),
            acked + point.pop("acknowledged"),
        )
        points[str(n)] = point
    result["turns_per_s"] = {k: v["turns_per_s"] for k, v in points.items()}
    result["commits_per_turn"] = {k: v["commits_per_turn"] for k, v in points.items()}
    result["wal_syncs_per_turn"] = {k: v["wal_syncs_per_turn"] for k, v in points.items()}
    result["write_tx_per_turn"] = {k: v["write_tx_per_turn"] for k, v in points.items()}
    result["write_tx_per_s"] = {k: v["write_tx_per_s"] for k, v in points.items()}
    result["cpu_ms_per_turn"] = {k: v["cpu_ms_per_turn"] for k, v in points.items()}
    result["cpu_cores_busy"] = {k: v["cpu_cores_busy"] for k, v in points.items()}
    result["cluster_cores"] = {k: v["cluster_cores"] for k, v in points.items()}
    result["model_calls_per_turn"] = {k: v["model_calls_per_turn"] for k, v in points.items()}
    result["bound_turns_per_s"] = {k: v["bound_turns_per_s"] for k, v in points.items()}
    result["of_bound"] = {k: v["of_bound"] for k, v in points.items()}
    result["latency_bound"] = {k: v["latency_bound"] for k, v in points.items()}
    result["load_1m_by_nodes"] = {k: v["load_1m"] for k, v in points.items()}
    rates = result["turns_per_s"]
    if rates.get("1"):
        for n in nodes:
            if n > 1:
                result[f"scaling_{n}_over_1"] = round(rates[str(n)] / rates["1"], 2)
    if samples:
        fo = measure_failover(samples=samples, lease_s=lease_s, per_node=per_node)
        lost, dup, acked = lost + fo.pop("lost_inputs"), dup + fo.pop("duplicate_turns"), acked + fo.pop("acknowledged")
        result.update(fo)
    result.update({"acknowledged": acked, "lost_inputs": lost, "duplicate_turns": dup})
    result["load_1m_after"] = round(os.getloadavg()[0], 2)
    return result


def format_report(r: dict[str, Any]) -> str:
    lines = [
        f"append on PostgreSQL: holon {r['append_holon_events_per_s']}/s vs raw {r['append_raw_events_per_s']}/s, "
        f"ratio {r['append_ratio_pg_vs_raw']} (target >= {TARGETS['append_ratio_pg_vs_raw']}); "
        f"synchronous_commit=off: {r['append_ratio_pg_vs_raw_sync_off']}",
        "turns/s by nodes: "
        + ", ".join(f"{k}: {v}" for k, v in r["turns_per_s"].items())
        + f" (fake model {r['latency_ms']:g} ms, {r['per_node']} busy agents per node)",
    ]
    if "scaling_3_over_1" in r:
        lines.append(f"scaling 3 over 1: {r['scaling_3_over_1']} (target >= {TARGETS['scaling_3_over_1']})")
    lines.append(
        "writing transactions per turn: "
        + ", ".join(f"{k}: {v}" for k, v in r["write_tx_per_turn"].items())
        + "; WAL flushes per turn: "
        + ", ".join(f"{k}: {v}" for k, v in r["wal_syncs_per_turn"].items())
    )
    lines.append(
        "latency-bound (turns/s of nodes x per_node / latency / calls per turn): "
        + ", ".join(
            f"{k}: {r['of_bound'][k]:.0%} of {r['bound_turns_per_s'][k]:g} ({'yes' if v else 'NO: CPU or commits'})"
            for k, v in r["latency_bound"].items()
        )
    )
    lines.append(
        "CPU ms per turn, cluster = nodes + model children + this database's postgres backends (bench beside): "
        + ", ".join(
            f"{k}: {v['cluster']:.0f} = {v['nodes']:.0f} + {v['models']:.0f} + {v['postgres']:.0f} ({v['bench']:.0f})"
            for k, v in r["cpu_ms_per_turn"].items()
        )
        + f"; cores used by the cluster (of {r['cores']}): "
        + ", ".join(f"{k}: {v}" for k, v in r["cluster_cores"].items())
    )
    if "failover_s_p95" in r:
        lines.append(f"failover p95: {r['failover_s_p95']} s (samples {r['failover_s']}; lease_s {r['lease_s']:g})")
    lines.append(f"acknowledged {r['acknowledged']}: lost {r['lost_inputs']}, duplicate turns {r['duplicate_turns']}")
    return "\n".join(lines)
