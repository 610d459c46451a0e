"""``holon bench chaos``: SIGKILL the daemon at random moments under mixed-size HTTP load, then
account for every acknowledged input from the ledger.

Everything is a real process on 127.0.0.1: ``holon serve`` on a fresh home with ``agents`` agents
on the scripted fake model (``holon.testing.fake_llm``, in its own process so that it survives the
kills), driven by ``clients`` concurrent posting tasks in this process.

* **Load.** Each client posts inputs to random agents: mostly small, some 4 KB, now and then
  64 KiB, and now and then a burst of ten 4 KB inputs to one agent. Every post carries a unique ``Idempotency-Key`` (and ``Authorization: Bearer`` when the
  home holds an ``api.token``); on a connection error, a 5xx, a 409 (not taking input while
  starting or stopping), a 429 or a 401 (token replaced at a restart) it is sent again with the
  same key, with a growing pause, until a 2xx acknowledgement or its retry budget runs out (then it
  counts as ``gave_up``, which promises nothing). Other 4xx count as ``refused``.
* **Kills.** At ``kills`` moments drawn with ``seed`` over the load's duration (each at least
  ``MIN_UP_S`` after the daemon became healthy), the daemon's whole process group and every process
  below it (its model processes run in their own sessions) get SIGKILL; the daemon is restarted at
  once on the same port.
* **Drain.** When the load stops, the daemon runs until no agent runs a turn or has runnable queued
  inputs (read from ``GET /v1/status``, twice in a row), or ``drain_s`` passes; then SIGTERM.
* **Accounting** (``holon.bench.chaos_ledger``) reads the ledger: for each acknowledged key,
  ``answered_once``, ``answered_twice``, ``rejected``, ``unanswered`` or ``lost``.
  ``ok`` is true when something was acknowledged and ``answered_twice``, ``unanswered`` and
  ``lost`` are all 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

import httpx

from holon.api.server import free_port
from holon.bench.chaos_ledger import UNKNOWN_SEQ, account, marked
from holon.bench.progress import step
from holon.clock import SystemClock
from holon.config import HomePaths, load_settings
from holon.projections import Store
from holon.runtime.agents import create_agent

__all__ = ["format_report", "run_chaos_bench"]

MIN_UP_S = 0.5
"""A kill comes at least this long after the daemon answered its health check."""
RETRY_STATUSES = frozenset({401, 409, 425, 429})
"""4xx answers worth a retry with the same key (5xx always are)."""
TOKEN_FILE = "api.token"
_SIZES = ((0.80, 150), (0.17, 4096), (0.03, 65_536))
BURST, BURST_P = 10, 0.03
"""A burst: this many 4 KB inputs to one agent back to back, started with this probability per post."""
_WORDS = "alpha beta gamma delta report deploy budget garden meeting review status backup invoice".split()  # noqa: SIM905


def _holon(*args: str) -> list[str]:
    return [sys.executable, "-c", "from holon.cli.main import run; run()", *args]


def _env() -> dict[str, str]:
    # The shipped defaults (fsync per commit included): the bench is about what survives a kill.
    return {k: v for k, v in os.environ.items() if not k.startswith("HOLON_")}


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children of all its threads, recursively)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError, ValueError):
            for child in (task / "children").read_text().split():
                out += [int(child), *_descendants(int(child))]
    return out


class DaemonProcess:
    """``holon serve`` in its own session; SIGKILLed with everything below it, or stopped."""

    def __init__(self, paths: HomePaths, port: int, log: IO[bytes]) -> None:
        self.paths, self.port, self.log = paths, port, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{port}"

    def start(self) -> None:
        argv = _holon("--home", str(self.paths.root), "serve", "--port", str(self.port))
        self.proc = subprocess.Popen(
            argv, env=_env(), stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, start_new_session=True
        )

    def token(self) -> str | None:
        with contextlib.suppress(OSError):
            return (self.paths.root / TOKEN_FILE).read_text(encoding="utf-8").strip() or None
        return None

    async def healthy(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self.proc is None or self.proc.poll() is not None:
                    code = None if self.proc is None else self.proc.returncode
                    raise RuntimeError(f"the daemon exited with {code} before it was healthy")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{self.url}/v1/health")).status_code == 200:
                        return
                await asyncio.sleep(0.05)
        raise TimeoutError(f"the daemon was not healthy within {timeout_s} s")

    def kill(self) -> None:
        """SIGKILL the daemon's process group and every process below it, as a power cut would."""
        if self.proc is None or self.proc.poll() is not None:
            return
        below = _descendants(self.proc.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in below:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM and wait; SIGKILL (everything) if it does not exit in time. Its exit code.

        A model process still importing its libraries when the daemon exits outlives it for a few
        seconds (it exits when it next reads its closed stdin): whatever was below the daemon and
        is still there once it exited is killed, so that the bench leaves nothing behind."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        below = set(_descendants(self.proc.pid))
        self.proc.terminate()
        deadline = time.monotonic() + timeout_s
        while self.proc.poll() is None and time.monotonic() < deadline:
            below.update(_descendants(self.proc.pid))
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(0.2)
        if self.proc.poll() is None:
            self.kill()
            return None
        for pid in below:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return self.proc.returncode


@dataclass
class Load:
    """The posting clients' shared state: acknowledgements by key, and what went wrong."""

    daemon: DaemonProcess
    agents: list[str]
    seed: int
    max_attempts: int = 200
    post_deadline_s: float = 90.0
    acks: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    retries: int = 0
    bursts: int = 0
    gave_up: int = 0
    refused: int = 0
    refusals: dict[int, int] = field(default_factory=dict)
    running: bool = True
    token: str | None = None

    def headers(self, key: str) -> dict[str, str]:
        out = {"Idempotency-Key": key}
        if self.token:
            out["Authorization"] = f"Bearer {self.token}"
        return out

    async def post(self, client: httpx.AsyncClient, agent: str, key: str, text: str) -> None:
        """Post until a 2xx (recorded in ``acks``), a non-retryable 4xx, or the retry budget ends."""
        deadline = time.monotonic() + self.post_deadline_s
        for attempt in range(self.max_attempts):
            if attempt:
                self.retries += 1
                await asyncio.sleep(min(0.05 * 2 ** min(attempt, 5), 1.0))
            try:
                r = await client.post(
                    f"{self.daemon.url}/v1/agents/{agent}/inputs", json={"text": text}, headers=self.headers(key)
                )
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    break
                continue
            if 200 <= r.status_code < 300:
                try:
                    self.acks[key] = int(r.json()["seq"])
                except (ValueError, KeyError, TypeError):  # acknowledged all the same: found by its key
                    self.acks[key] = UNKNOWN_SEQ
                self.sizes[key] = len(text)
                return
            if r.status_code == 401:
                self.token = self.daemon.token()
            if r.status_code < 500 and r.status_code not in RETRY_STATUSES:
                self.refused += 1
                self.refusals[r.status_code] = self.refusals.get(r.status_code, 0) + 1
                return
            if time.monotonic() > deadline:
                break
        self.gave_up += 1

    async def client(self, n: int) -> None:
        """Post until told to stop: one input of a random size to a random agent, a short pause; now
        and then (``BURST_P``) a burst of ``BURST`` 4 KB inputs to one agent with no pause, which
        queue up behind its running turn and arrive in the next one together."""
        rng = random.Random(f"{self.seed}:{n}")
        limits = httpx.Limits(max_connections=4, max_keepalive_connections=4, keepalive_expiry=1.0)
        async with httpx.AsyncClient(timeout=httpx.Timeout(15.0), limits=limits) as client:
            i = 0
            while self.running:
                agent = rng.choice(self.agents)
                burst = rng.random() < BURST_P
                sizes = [4096] * BURST if burst else rng.choices([s for _, s in _SIZES], weights=[w for w, _ in _SIZES])
                for size in sizes:
                    key = f"s{self.seed}-c{n}-{i}"
                    body = " ".join(rng.choice(_WORDS) for _ in range(size // 6 + 1))[:size]
                    await self.post(client, agent, key, marked(key, body))
                    i += 1
                self.bursts += burst
                await asyncio.sleep(rng.uniform(0.02, 0.12))


async def _kills(daemon: DaemonProcess, load: Load, moments: list[float], t0: float) -> list[float]:
    """SIGKILL and restart the daemon at each moment (seconds after ``t0``); seconds from each kill
    to the restarted daemon's first healthy answer."""
    restarts = []
    for n, moment in enumerate(moments):
        step("load with SIGKILLs", n, len(moments))
        up_since = time.monotonic()
        await asyncio.sleep(max(0.0, t0 + moment - time.monotonic(), up_since + MIN_UP_S - time.monotonic()))
        killed_at = time.monotonic()
        await asyncio.to_thread(daemon.kill)
        daemon.start()
        await daemon.healthy()
        restarts.append(round(time.monotonic() - killed_at, 3))
        load.token = daemon.token()
    return restarts


async def _drain(daemon: DaemonProcess, load: Load, timeout_s: float) -> bool:
    """Wait until no agent runs a turn or has runnable queued inputs, twice in a row 0.5 s apart."""
    deadline = time.monotonic() + timeout_s
    quiet = 0
    async with httpx.AsyncClient(timeout=10.0) as client:
        while time.monotonic() < deadline:
            if daemon.proc is None or daemon.proc.poll() is not None:
                return False  # it died on its own: the report's final_stop_exit says how
            headers = {"Authorization": f"Bearer {load.token}"} if load.token else {}
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                agents = (await client.get(f"{daemon.url}/v1/status", headers=headers)).json()["agents"]
                busy = [
                    a for a in agents if a["state"] == "running" or (a["state"] == "idle" and "queued" in a["detail"])
                ]
                quiet = quiet + 1 if not busy else 0
                if quiet >= 2:
                    return True
            await asyncio.sleep(0.5)
    return False


async def _run(
    daemon: DaemonProcess, load: Load, *, clients: int, duration_s: float, kills: int, drain_s: float
) -> dict[str, Any]:
    t_start = time.monotonic()
    daemon.start()
    await daemon.healthy()
    load.token = daemon.token()
    start_s = time.monotonic() - t_start
    rng = random.Random(load.seed)
    moments = sorted(rng.uniform(0.05 * duration_s, 0.95 * duration_s) for _ in range(kills))
    t0 = time.monotonic()
    posting = [asyncio.create_task(load.client(n)) for n in range(clients)]
    try:
        restarts = await _kills(daemon, load, moments, t0)
        await asyncio.sleep(max(0.0, t0 + duration_s - time.monotonic()))
    finally:
        load.running = False
        ended = await asyncio.gather(*posting, return_exceptions=True)
    crashed = [repr(e) for e in ended if isinstance(e, BaseException)]
    if crashed:  # a client that died took its share of the load with it: the run measured less than it says
        raise RuntimeError(f"{len(crashed)} posting clients failed: {crashed[0]}")
    load_s = time.monotonic() - t0
    step("draining", len(moments), len(moments))
    drained = await _drain(daemon, load, drain_s)
    return {"kills": len(restarts), "restart_s": restarts, "start_s": round(start_s, 3), "load_s": round(load_s, 3),
            "drained": drained, "drain_s": round(time.monotonic() - t0 - load_s, 3)}  # fmt: skip


def _make_home(root: Path, agents: int, model_url: str) -> tuple[HomePaths, list[str]]:
    paths = HomePaths(root / "home")
    names = [f"c{i:02d}" for i in range(agents)]
    with Store.open(paths, load_settings(paths), clock=SystemClock()) as store:
        for name in names:
            create_agent(store, name, settings={"model": "openai/fake", "api_base": model_url}, origin="operator:bench")
    return paths, names


def _fake_model(root: Path, latency_ms: float) -> list[str]:
    script = root / "script.json"
    # A list is consumed one step per call; once exhausted the fake answers at once, which only
    # shortens the tail of a very long run.
    step = '{"content": "Done: noted.", "delay": %s}' % (latency_ms / 1000)
    script.write_text("[" + ",".join([step] * 20_000) + "]")
    code = "import sys; from holon.testing.fake_llm import main; sys.exit(main())"
    return [sys.executable, "-c", code, "--script", str(script)]


@contextlib.contextmanager
def _term_exits() -> Iterator[None]:
    """While the bench runs, SIGTERM raises ``SystemExit`` (143), so its ``finally`` blocks stop the
    daemon and the model instead of leaving them behind (a test timing the bench out sends SIGTERM)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _exit(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_chaos_bench(
    *,
    agents: int = 4,
    clients: int = 3,
    duration_s: float = 30.0,
    kills: int = 5,
    seed: int = 1,
    latency_ms: float = 50.0,
    drain_s: float = 60.0,
    directory: Path | None = None,
) -> dict[str, Any]:
    """Run the bench in a temporary home (or in ``directory``, kept for inspection); the report
    (``ok`` says whether every promise held)."""
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_term_exits())
        if directory is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="holon-bench-chaos-")))
        else:
            root = directory
            root.mkdir(parents=True, exist_ok=True)
        fake = subprocess.Popen(_fake_model(root, latency_ms), env=_env(), stdout=subprocess.PIPE, text=True)
        try:
            model_url = fake.stdout.readline().strip() if fake.stdout else ""
            paths, names = _make_home(root, agents, model_url)
            with (root / "daemon.out").open("ab") as log:
                daemon = DaemonProcess(paths, free_port(), log)
                load = Load(daemon, names, seed)
                try:
                    run = asyncio.run(
                        _run(daemon, load, clients=clients, duration_s=duration_s, kills=kills, drain_s=drain_s)
                    )
                finally:
                    stopping = time.monotonic()
                    exit_code = daemon.stop()
                    daemon.kill()
                    stop_s = time.monotonic() - stopping
        finally:
            fake.kill()
            fake.wait(10)
        step("accounting for every acknowledged input")
        with Store.open(paths, load_settings(paths), clock=SystemClock()) as store:
            counts = account(store, load.acks)
    out: dict[str, Any] = counts.as_dict()
    out.update(
        run,
        retries=load.retries,
        bursts=load.bursts,
        gave_up=load.gave_up,
        refused=load.refused,
        refusals={str(k): v for k, v in sorted(load.refusals.items())},
        bytes_acknowledged=sum(load.sizes.values()),
        large_acknowledged=sum(1 for s in load.sizes.values() if s >= 65_536),
        final_stop_exit=exit_code,
        stop_s=round(stop_s, 3),
        agents=agents,
        clients=clients,
        seed=seed,
        wall_s=round(time.perf_counter() - started, 3),
    )
    out["ok"] = bool(counts.acknowledged) and not (counts.answered_twice or counts.unanswered or counts.lost)
    return out


def format_report(r: dict[str, Any]) -> str:
    verdict = "OK" if r["ok"] else "NOT OK"
    lines = [
        f"chaos benchmark: {r['kills']} SIGKILLs under load from {r['clients']} clients on {r['agents']} agents "
        f"(seed {r['seed']}, {r['wall_s']:.1f} s): {verdict}",
        f"  acknowledged {r['acknowledged']} ({r['large_acknowledged']} of 64 KiB), {r['retries']} retries, "
        f"{r['gave_up']} gave up, {r['refused']} refused {r['refusals']}",
        f"  answered once {r['answered_once']}, twice {r['answered_twice']}, rejected {r['rejected']}, "
        f"unanswered {r['unanswered']} ({r['unanswered_queued']} still queued), lost {r['lost']}",
        f"  stored twice for one key {r['duplicate_inputs']}, stored without an acknowledgement "
        f"{r['unacknowledged_stored']}; drained: {r['drained']}",
    ]
    lines += [f"  e.g. {outcome}: {', '.join(keys)}" for outcome, keys in r["examples"].items()]
    return "\n".join(lines)
