"""``holon bench cli``: what the command line costs a person, against physical baselines.

* **``holon --help``**: median wall time of ``holon --help`` as a fresh subprocess over ``runs``
  runs, beside ``python -c pass`` (the interpreter's own start, the floor no CLI goes below),
  and their ratio. The issue's target is ``help_s_median`` <= 0.2 s on a quiet machine.
* **``holon run`` through the daemon**: a real daemon (``holon serve`` in a subprocess) whose agent
  talks to the loopback fake model (``holon.testing.fake_llm``, answering at once); the p50 of
  ``holon run AGENT TEXT --json`` as a subprocess (process start, imports, finding the daemon,
  the input, following the turn on the event stream, the report). Baselines from this process,
  on the same daemon: a bare ``POST /v1/agents/{a}/inputs`` round trip, and a whole turn over the
  API (post, then read the event stream until it settles), both p50. What ``holon run`` adds over
  the API turn is process start and imports.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from holon.api.server import free_port
from holon.api.token import read_token
from holon.clock import SystemClock
from holon.config import HomePaths, load_settings
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.home import init_home
from holon.testing.fake_llm import FakeLLM

__all__ = ["format_report", "run_cli_bench"]

TARGETS = {"help_s_median": 0.2}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOLON_")}
    env["HOLON_LEDGER_SYNCHRONOUS"] = "NORMAL"
    return env


def _holon(*args: str) -> list[str]:
    return [sys.executable, "-c", "from holon.cli.main import run; run()", *args]


def _wall_s(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-3:])} exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return took


def _p50(values: list[float]) -> float:
    return statistics.median(values)


def _help(runs: int, env: dict[str, str]) -> dict[str, Any]:
    _wall_s(_holon("--help"), env)  # warm the file cache: the first start reads every module from disk
    python = [_wall_s([sys.executable, "-c", "pass"], env) for _ in range(runs)]
    help_ = [_wall_s(_holon("--help"), env) for _ in range(runs)]
    return {
        "help_s_median": round(_p50(help_), 4),
        "python_s_median": round(_p50(python), 4),
        "help_ratio": round(_p50(help_) / _p50(python), 2),
    }


@contextlib.contextmanager
def _daemon(paths: HomePaths, env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = _holon("--home", str(paths.root), "serve", "--port", str(port))
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        with httpx.Client(timeout=1.0) as client:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"the daemon exited with {proc.returncode} before it was healthy")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{url}/v1/health").status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise TimeoutError("the daemon did not become healthy")
                time.sleep(0.02)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _api_turn_ms(client: httpx.Client, agent: str) -> tuple[float, float]:
    """(ms of the bare input POST, ms of the whole turn: post, then the stream until it settles)."""
    head = client.get(f"/v1/agents/{agent}/events", params={"stream": "false", "limit": 1, "after": 2**62}).json()
    t0 = time.perf_counter()
    r = client.post(f"/v1/agents/{agent}/inputs", json={"text": "ping"})
    r.raise_for_status()
    posted = time.perf_counter() - t0
    seq = r.json()["seq"]
    turn_id = None
    with client.stream("GET", f"/v1/agents/{agent}/events", params={"after": head["head"]}) as stream:
        event = None
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "event":
                data = json.loads(line[5:])
                if data["type"] == "turn.started" and seq in data["payload"]["inputs"]:
                    turn_id = data["payload"]["turn_id"]
                elif data["type"] == "turn.settled" and data["payload"]["turn_id"] == turn_id:
                    break
    return posted * 1000, (time.perf_counter() - t0) * 1000


def _run_via_daemon(runs: int, env: dict[str, str]) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="holon-bench-cli-") as tmp,
        FakeLLM(lambda body: {"content": "pong"}) as fake,
    ):
        paths = HomePaths(Path(tmp) / "home")
        init_home(paths)
        with Store.open(paths, load_settings(paths), clock=SystemClock()) as store:
            create_agent(
                store, "bench", settings={"model": "openai/fake", "api_base": fake.url}, origin="operator:bench"
            )
        with _daemon(paths, env) as url:
            run = _holon("--home", str(paths.root), "run", "bench", "ping", "--json")
            _wall_s(run, env)  # warm-up: the daemon's model child starts on the first turn
            cli_ms = [_wall_s(run, env) * 1000 for _ in range(runs)]
            token = read_token(paths.root)
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            with httpx.Client(base_url=url, headers=headers, timeout=httpx.Timeout(60.0, read=None)) as client:
                api = [_api_turn_ms(client, "bench") for _ in range(runs)]
    post_p50 = _p50([p for p, _ in api])
    turn_p50 = _p50([t for _, t in api])
    return {
        "run_via_daemon_ms_p50": round(_p50(cli_ms), 1),
        "api_post_ms_p50": round(post_p50, 2),
        "api_turn_ms_p50": round(turn_p50, 1),
        "run_over_api_turn_ratio": round(_p50(cli_ms) / turn_p50, 2),
    }


def run_cli_bench(*, runs: int = 10, daemon_runs: int = 10) -> dict[str, Any]:
    env = _env()
    return {**_help(runs, env), **_run_via_daemon(daemon_runs, env), "runs": runs, "daemon_runs": daemon_runs,
            "targets": TARGETS}  # fmt: skip


def format_report(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"holon --help:         {r['help_s_median'] * 1000:.0f} ms median (target <= "
            f"{TARGETS['help_s_median'] * 1000:.0f} ms); python -c pass {r['python_s_median'] * 1000:.0f} ms; "
            f"ratio {r['help_ratio']}",
            f"holon run (daemon):   {r['run_via_daemon_ms_p50']:.0f} ms p50; the same turn over the API "
            f"{r['api_turn_ms_p50']:.0f} ms (ratio {r['run_over_api_turn_ratio']}); a bare input POST "
            f"{r['api_post_ms_p50']:.1f} ms",
            f"({r['runs']} --help runs, {r['daemon_runs']} holon run runs)",
        ]
    )
