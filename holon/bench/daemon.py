"""``holon bench daemon``: how the daemon carries many agents, idles, and restarts.

Everything runs as real processes on 127.0.0.1: the daemon is ``holon serve`` in a subprocess,
the model is ``holon.testing.fake_llm`` in another (so its CPU is not the daemon's), and this
process drives the agents through the HTTP API like operators would.

* **Throughput.** ``agents`` agents take ``turns`` turns each. Every agent runs its own sequence:
  post an input (``POST /v1/agents/{a}/inputs``), read the agent's event stream (SSE) until that
  turn settles, post the next. The model answers every call after ``latency_ms`` (one call per
  turn). So the model alone allows ``agents / latency`` turns per second (the latency bound);
  ``turns_per_s_vs_latency_bound`` is the turns per second reached over that bound (1.0: holon
  added no time at all). Beside it, the CPU each turn cost, from ``/proc/<pid>/stat`` over the
  run: ``cpu_ms_per_turn`` for the daemon and every process below it (its model processes
  included, so moving work to a child never hides it), ``cpu_ms_per_turn_daemon`` for the daemon's
  own process. Lower is better; a figure that rose when holon burned more CPU (the old
  ``efficiency``, max(latency bound, CPU bound) / wall) is no longer reported.
* **Idle RSS and CPU.** A home with ``idle_agents`` registered agents, the daemon started and
  left alone until quiet: its resident set (``VmRSS``), then the CPU it uses over the next
  ``idle_window_s`` seconds, in percent of one core (the daemon and every process below it, read
  from ``/proc``). Nothing happens in that window, so this is what the daemon spends on its own
  wake-ups: the watcher's polls, maintenance ticks, the HTTP server's timer, the status file.
* **Restart.** Homes whose ledgers hold about 10,000 and 1,000,000 events (realistic turns of 100
  agents, from ``holon.bench.workload``), brought to a steady state by one daemon run (recovery of
  the stream's unfinished turns and tasks, agents answered by a model that replies at once): time
  from spawning ``holon serve`` to the first healthy ``GET /v1/health``, so process start and
  imports are included; median of three after a warm-up start. ``restart_growth`` is the ratio.
* **Inputs** (``holon.bench.daemon_inputs``). 1, 8 and 32 concurrent clients post inputs to paused
  agents (no turn runs), on a daemon with group commit and on one without: acknowledged inputs per
  second and per CPU second of the daemon, inputs per commit, the ratios, and ``lost_inputs``
  (acknowledged, not in the ledger).

``sections`` (``--sections``) picks which of the four run; the keys of the others are absent.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any

import httpx

from holon.api.server import free_port
from holon.api.token import read_token
from holon.bench import workload
from holon.bench.progress import step
from holon.clock import SystemClock
from holon.config import HomePaths, load_settings
from holon.projections import Store
from holon.runtime.agents import create_agent

__all__ = ["TARGETS", "format_report", "run_daemon_bench"]

TARGETS = {
    "idle_rss_mb_1000_agents": 300.0,
    "idle_cpu_pct_1000_agents": 1.0,
    "restart_s_1m": 1.0,  # issue 18 (2.0 before)
    "restart_growth": 1.5,
}
_CLK_TCK = os.sysconf("SC_CLK_TCK")
METHOD = (
    "Real processes on 127.0.0.1: holon serve, the scripted model (holon.testing.fake_llm, its own "
    "process, not counted) and this driver. Throughput: {agents} agents x {turns} turns over HTTP, each "
    "agent posting an input and following its SSE stream until the turn settles; one model call per turn "
    "answered after {latency_ms:g} ms, so latency_bound_turns_per_s = agents / latency. "
    "turns_per_s_vs_latency_bound = turns_per_s / that bound. cpu_ms_per_turn = CPU (utime+stime from "
    "/proc) of the daemon and every process below it (its model processes) over the run / turns; "
    "cpu_ms_per_turn_daemon the daemon's own process only; cpu_bound_turns_per_s = cores / CPU per turn. "
    "Idle: {idle_agents} registered agents, the daemon left alone until quiet, VmRSS, then CPU over "
    "{idle_window_s:g} s. Restart: spawn to first healthy GET /v1/health, median of {runs} after a warm-up, on "
    "ledgers of ~{small:,} and ~{large:,} events of {restart_agents} agents; restart_cpu_s_* = the daemon's own "
    "CPU (utime+stime, all its threads) at that moment, median. synchronous=NORMAL."
)


def _holon(*args: str) -> list[str]:
    return [sys.executable, "-c", "from holon.cli.main import run; run()", *args]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLON_")}
    # Benchmarks measure holon, not the disk: one fsync per commit is the shipped default, but the
    # restart and throughput figures are about CPU and design. Say so in the report.
    env["HOLON_LEDGER_SYNCHRONOUS"] = "NORMAL"
    env["HOLON_LOGGING_FILE"] = "false"
    return env


def _cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and every process below it (the model process included): their
    utime + stime, plus what their exited, reaped children used (cutime + cstime)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # it exited meanwhile
        return 0.0
    own = sum(int(f) for f in fields[11:15]) / _CLK_TCK
    return own + sum(_cpu_s(child) for child in _children(pid))


def _own_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` itself (all its threads): utime + stime, no children."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:13]) / _CLK_TCK


def _settled(pid: int, timeout_s: float = 30.0) -> None:
    """Wait until ``pid`` is quiet: under 10% of a core over half a second (at most ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    before = _cpu_s(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _cpu_s(pid)
        if now - before < 0.05:
            return
        before = now


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


@contextlib.contextmanager
def _process(
    argv: list[str], *, env: dict[str, str], first_line: bool = False
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline().strip() if first_line and proc.stdout else ""
        yield proc, line
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _wait_healthy(url: str, proc: subprocess.Popen[str], timeout_s: float = 120.0) -> float:
    """Seconds until ``GET /v1/health`` answers 200 (polled every 5 ms)."""
    t0 = time.perf_counter()
    with httpx.Client(timeout=1.0) as client:
        while time.perf_counter() - t0 < timeout_s:
            if proc.poll() is not None:
                raise RuntimeError(f"the daemon exited with {proc.returncode} before it was healthy")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(f"{url}/v1/health").status_code == 200:
                    return time.perf_counter() - t0
            time.sleep(0.005)
    raise TimeoutError("the daemon did not become healthy")


def _serve(paths: HomePaths, port: int) -> list[str]:
    return _holon("--home", str(paths.root), "serve", "--port", str(port))


# --- throughput --------------------------------------------------------------------------------


async def _events(client: httpx.AsyncClient, name: str, after: int) -> AsyncGenerator[dict[str, Any], None]:
    """The agent's ledger events after ``after``, reconnecting from the last one seen if dropped."""
    cursor, failures = after, 0
    while True:
        try:
            async with client.stream("GET", f"/v1/agents/{name}/events", params={"after": cursor}) as stream:
                failures = 0
                event = None
                async for line in stream.aiter_lines():
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:") and event == "event":
                        data = json.loads(line[5:])
                        cursor = data["seq"]
                        yield data
        except httpx.TransportError:
            failures += 1
            if failures > 5:
                raise
            await asyncio.sleep(0.2 * failures)


async def _agent_run(client: httpx.AsyncClient, name: str, turns: int, done: list[int]) -> None:
    page = await client.get(f"/v1/agents/{name}/events", params={"stream": "false", "limit": 1, "after": 2**62})
    events = _events(client, name, page.json()["head"])  # the stream shows what comes after the head
    try:
        for i in range(turns):
            r = await client.post(f"/v1/agents/{name}/inputs", json={"text": f"step {i}: carry on"})
            r.raise_for_status()
            async for data in events:
                if data["type"] == "turn.settled":
                    if data["payload"]["outcome"] != "completed":
                        raise RuntimeError(f"{name}: turn {i} settled {data['payload']['outcome']}")
                    done[0] += 1
                    step("turns through the daemon", done[0], done[1])
                    break
            else:
                raise RuntimeError(f"{name}: the event stream ended before turn {i} settled")
    finally:
        await events.aclose()


def _auth(paths: HomePaths) -> dict[str, str]:
    """The header that lets the bench in: the token the daemon made in the home (RFC 0005)."""
    token = read_token(paths.root)
    return {"Authorization": f"Bearer {token}"} if token else {}


async def _drive(url: str, names: list[str], turns: int, headers: dict[str, str]) -> None:
    # Idle connections are dropped after 1 s, before uvicorn's 5 s keep-alive timeout: a request
    # sent on a connection the server is closing at that moment fails with a ReadError.
    limits = httpx.Limits(
        max_connections=2 * len(names) + 10, max_keepalive_connections=2 * len(names) + 10, keepalive_expiry=1.0
    )
    timeout = httpx.Timeout(60.0, read=None)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits, headers=headers) as client:
        done = [0, len(names) * turns]  # settled, of all: the progress line
        await asyncio.gather(*(_agent_run(client, n, turns, done) for n in names))


def _throughput(root: Path, agents: int, turns: int, latency_ms: float) -> dict[str, Any]:
    paths = HomePaths(root / "throughput")
    script = root / "script.json"
    steps = [{"content": "Noted, carrying on.", "delay": latency_ms / 1000}] * (agents * turns + 50)
    script.write_text(json.dumps(steps))
    env = _env()
    fake_argv = [sys.executable, "-m", "holon.testing.fake_llm", "--script", str(script)]
    with _process(fake_argv, env=env, first_line=True) as (_fake, fake_url):
        with Store.open(paths, load_settings(paths), clock=SystemClock()) as store:
            names = [f"a{i:03d}" for i in range(agents)]
            for name in names:
                create_agent(
                    store, name, settings={"model": "openai/fake", "api_base": fake_url}, origin="operator:bench"
                )
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with _process(_serve(paths, port), env=env) as (daemon, _):
            _wait_healthy(url, daemon)
            _settled(daemon.pid)  # start-up work (litellm's import, catch-ups) is not the run's
            cores = len(os.sched_getaffinity(daemon.pid))
            cpu0, own0, t0 = _cpu_s(daemon.pid), _own_cpu_s(daemon.pid), time.perf_counter()
            asyncio.run(_drive(url, names, turns, _auth(paths)))
            wall = time.perf_counter() - t0
            cpu, own = _cpu_s(daemon.pid) - cpu0, _own_cpu_s(daemon.pid) - own0
            rss_after = _rss_mb(daemon.pid) + sum(_rss_mb(c) for c in _children(daemon.pid))
    n = agents * turns
    bound = agents / (latency_ms / 1000) if latency_ms > 0 else None
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "cpu_s_daemon": round(own, 3),
        "cores": cores,
        "turns_per_s": round(n / wall, 1),
        "latency_bound_turns_per_s": round(bound, 1) if bound else None,
        "turns_per_s_vs_latency_bound": round(n / wall / bound, 3) if bound else None,
        "cpu_ms_per_turn": round(cpu * 1000 / n, 2),
        "cpu_ms_per_turn_daemon": round(own * 1000 / n, 2),
        "cpu_bound_turns_per_s": round(cores * n / cpu, 1) if cpu > 0 else None,
        "rss_mb_after_run": round(rss_after, 1),
    }


# --- idle --------------------------------------------------------------------------------------


def _idle(root: Path, n: int, window_s: float) -> tuple[float, float]:
    """VmRSS (MB) of a daemon hosting ``n`` idle agents, read once it is quiet: its start-up work
    (litellm's import in the background, catch-ups) is done and counted, as an idle daemon holds it;
    then its CPU over ``window_s`` seconds left alone, in percent of one core."""
    paths = HomePaths(root / "idle")
    with Store.open(paths, load_settings(paths), clock=SystemClock()) as store:
        for i in range(n):
            create_agent(store, f"idle{i:04d}", origin="operator:bench")
    port = free_port()
    with _process(_serve(paths, port), env=_env()) as (daemon, _):
        _wait_healthy(f"http://127.0.0.1:{port}", daemon)
        _settled(daemon.pid)
        rss = _rss_mb(daemon.pid)
        cpu0, t0 = _cpu_s(daemon.pid), time.monotonic()
        time.sleep(window_s)
        cpu_pct = 100 * (_cpu_s(daemon.pid) - cpu0) / (time.monotonic() - t0)
        return rss, cpu_pct


# --- restart -----------------------------------------------------------------------------------


def _fill(paths: HomePaths, events: int, agents: int) -> int:
    """A ledger of about ``events`` realistic events over ``agents`` agents (with homes on disk)."""
    with Store.open(paths, load_settings(paths), clock=SystemClock()) as store:
        ids = workload.agent_ids(agents)
        store.append(*workload.creation_events(agents))
        for agent_id in ids:  # agents have homes: the daemon reads their AGENTS.md and memory
            Path(store.agent(agent_id).home).mkdir(parents=True, exist_ok=True)
        stream = workload.stream(agents)
        rng = random.Random(11)
        while store.ledger.head() < events:
            batch = list(itertools.islice(stream, 500))
            for j in range(0, len(batch), 250):
                store.append(*batch[j : j + 250])
        del rng
        return store.ledger.head()


def _settle(paths: HomePaths, url_of_model: str) -> None:
    """Bring a filled home to the state a daemon leaves behind: the generated stream ends mid-turn
    with tasks running, so one daemon run recovers them and lets the agents answer (on a model that
    replies at once), then stops. The measured restarts start from that steady state."""
    from holon.runtime.agents import configure_agent

    with Store.open(paths, load_settings(paths), clock=SystemClock()) as store:
        for agent in store.agents():
            configure_agent(store, agent.agent_id, {"model": "openai/fake", "api_base": url_of_model}, unset=[])
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with _process(_serve(paths, port), env=_env()) as (daemon, _):
        _wait_healthy(url, daemon)  # recovery keeps the loop busy: status may answer slowly
        with httpx.Client(base_url=url, timeout=60, headers=_auth(paths)) as client:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                agents = client.get("/v1/status").json()["agents"]
                if all(a["state"] in ("idle", "asleep", "waiting") and "queued" not in a["detail"] for a in agents):
                    break
                time.sleep(0.5)


def _restart(root: Path, events: int, name: str, model_url: str, agents: int, runs: int) -> tuple[float, float, int]:
    """Median seconds from spawning the daemon to healthy, and median CPU seconds the daemon had
    used by then (on a shared machine the steadier figure), over ``runs`` starts (the first warms
    caches)."""
    paths = HomePaths(root / name)
    size = _fill(paths, events, agents)
    _settle(paths, model_url)
    times, cpus = [], []
    for _ in range(runs + 1):
        port = free_port()
        with _process(_serve(paths, port), env=_env()) as (daemon, _):
            times.append(_wait_healthy(f"http://127.0.0.1:{port}", daemon))
            cpus.append(_own_cpu_s(daemon.pid))
    return _median(times[1:]), _median(cpus[1:]), size


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


SECTIONS = ("throughput", "idle", "restart", "inputs")


def run_daemon_bench(
    *,
    agents: int = 100,
    turns: int = 20,
    latency_ms: float = 100.0,
    idle_agents: int = 1_000,
    idle_window_s: float = 10.0,
    events_small: int = 10_000,
    events_large: int = 1_000_000,
    restart_agents: int = 100,
    restart_runs: int = 3,
    input_clients: tuple[int, ...] = (1, 8, 32),
    inputs: int = 960,
    input_agents: int = 10,
    input_rounds: int = 3,
    sections: tuple[str, ...] = SECTIONS,
) -> dict[str, Any]:
    """Measure ``sections`` (all by default; see the module docstring and ``holon.bench.daemon_inputs``)."""
    from holon.bench import daemon_inputs  # it builds on this module's process helpers

    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown sections {sorted(unknown)}: choose from {', '.join(SECTIONS)}")
    out: dict[str, Any] = {"sections": [s for s in SECTIONS if s in sections]}
    methods: list[str] = []
    total, done = len(out["sections"]) + ("restart" in sections), 0
    with tempfile.TemporaryDirectory(prefix="holon-bench-daemon-") as tmp:
        root = Path(tmp)
        if "throughput" in sections:
            out.update(agents=agents, turns=turns, latency_ms=latency_ms)
            step(f"{agents} agents x {turns} turns through the daemon", done, total)
            done += 1
            out.update(_throughput(root, agents, turns, latency_ms))
        if "idle" in sections:
            step(f"idle daemon with {idle_agents} agents", done, total)
            done += 1
            out["idle_agents"] = idle_agents
            rss, cpu_pct = _idle(root, idle_agents, idle_window_s)
            out["idle_rss_mb_1000_agents"] = round(rss, 1)
            out["idle_cpu_pct_1000_agents"] = round(cpu_pct, 2)
            out["idle_window_s"] = idle_window_s
        if "restart" in sections:
            script = root / "instant.json"
            script.write_text("[]")  # an exhausted script answers every call at once
            fake_argv = [sys.executable, "-m", "holon.testing.fake_llm", "--script", str(script)]
            with _process(fake_argv, env=_env(), first_line=True) as (_fake, model_url):
                step(f"restart on {events_small:,} events", done, total)
                small, small_cpu, small_n = _restart(
                    root, events_small, "small", model_url, restart_agents, restart_runs
                )
                step(f"restart on {events_large:,} events", done + 1, total)
                large, large_cpu, large_n = _restart(
                    root, events_large, "large", model_url, restart_agents, restart_runs
                )
                done += 2
            out.update(
                restart_s_10k=round(small, 3),
                restart_s_1m=round(large, 3),
                restart_growth=round(large / small, 3),
                restart_cpu_s_10k=round(small_cpu, 3),
                restart_cpu_s_1m=round(large_cpu, 3),
                restart_events_small=small_n,
                restart_events_large=large_n,
                restart_agents=restart_agents,
                restart_runs=restart_runs,
            )
        if set(sections) - {"inputs"}:
            out["synchronous"] = "NORMAL"
            methods.append(METHOD.format(agents=agents, turns=turns, latency_ms=latency_ms, idle_agents=idle_agents,
                                         idle_window_s=idle_window_s, small=events_small, large=events_large,
                                         runs=restart_runs, restart_agents=restart_agents))  # fmt: skip
        if "inputs" in sections:
            found = daemon_inputs.run_inputs(
                root, clients=input_clients, inputs=inputs, agents=input_agents, rounds=input_rounds
            )
            methods.append(found.pop("method"))
            out.update(found)
    out.update(targets=TARGETS, method=" ".join(methods))
    return out


def format_report(r: dict[str, Any]) -> str:
    lines = []
    if "turns_per_s" in r:
        lines += [
            f"daemon benchmark ({r['agents']} agents x {r['turns']} turns, model latency {r['latency_ms']:.0f} ms)",
            f"  {r['turns_per_s']:.1f} turns/s against a latency bound of {r['latency_bound_turns_per_s']} turns/s "
            f"(ratio {r['turns_per_s_vs_latency_bound']}); wall {r['wall_s']:.2f} s",
            f"  CPU per turn {r['cpu_ms_per_turn']:.1f} ms (daemon and its model processes; the daemon alone "
            f"{r['cpu_ms_per_turn_daemon']:.1f} ms) on {r['cores']} cores: the CPU allows "
            f"{r['cpu_bound_turns_per_s']} turns/s; RSS after the run {r['rss_mb_after_run']:.0f} MB",
        ]
    else:
        lines.append(f"daemon benchmark ({', '.join(r['sections'])})")
    if "idle_rss_mb_1000_agents" in r:
        lines.append(
            f"  idle RSS with {r['idle_agents']:,} agents: {r['idle_rss_mb_1000_agents']:.1f} MB "
            f"(target <= {TARGETS['idle_rss_mb_1000_agents']:.0f}); idle CPU {r['idle_cpu_pct_1000_agents']:.2f}% "
            f"of a core over {r['idle_window_s']:.0f} s (target <= {TARGETS['idle_cpu_pct_1000_agents']})"
        )
    if "restart_s_1m" in r:
        lines.append(
            f"  restart to healthy: {r['restart_s_10k']:.3f} s at {r['restart_events_small']:,} events, "
            f"{r['restart_s_1m']:.3f} s at {r['restart_events_large']:,} (target <= {TARGETS['restart_s_1m']} s), "
            f"growth {r['restart_growth']:.2f}x (target <= {TARGETS['restart_growth']}); the daemon's CPU by then "
            f"{r['restart_cpu_s_10k']:.3f} s / {r['restart_cpu_s_1m']:.3f} s"
        )
    if "lost_inputs" in r:
        from holon.bench.daemon_inputs import format_lines

        lines += format_lines(r)
    return "\n".join(lines)
