"""``holon bench daemon``'s input section: the HTTP input path, with group commit and without.

A real daemon (``holon serve`` in a subprocess) takes ``POST /v1/agents/{a}/inputs`` over real
HTTP on 127.0.0.1 from ``C`` concurrent clients (``C`` in ``clients``, e.g. 1, 8 and 32). Each
client holds one keep-alive connection and posts its share of the ``inputs`` one after another,
sending the next as soon as the previous one is acknowledged (202 with the input's ledger
``seq``), round-robin over ``agents`` agents of its own level. The agents are paused, so no turn
runs: what is measured is the input path alone (the request, the commit, the wake), not turns.

The same workload runs twice per round, each on a fresh home and a fresh daemon: with group commit
(``[daemon] group_commit = true``, the default: inputs arriving together commit in one
transaction in a worker thread, ``holon.daemon.group_commit``) and without it (``false``: each
input commits alone on the event loop, as before group commit), the in-run baseline. The two
alternate in order from round to round and the medians over rounds are reported.

Per level: acknowledged inputs per second of wall time, and per CPU second of the daemon's own
process (utime + stime of all its threads from ``/proc``, over the posting window only); the mean
inputs per commit, from the daemon's own counters (``GET /v1/status``, ``inputs``); and the ratios
with group commit over without. ``synchronous`` is the shipped default, FULL (one fsync per
commit: what group commit shares). After the daemon stopped, every acknowledged input is looked
up in the ledger at its ``seq`` (a ``message.received`` with the text that was posted):
``lost_inputs`` counts those that are not there.

The client is a minimal HTTP/1.1 client on asyncio streams, not httpx: the driver shares the
machine's cores with the daemon, and its CPU (``input_driver_cpu_s``) stays a small part of the
daemon's that way.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from holon.api.server import free_port
from holon.bench.daemon import _auth, _env, _own_cpu_s, _process, _serve, _settled, _wait_healthy
from holon.bench.progress import step
from holon.clock import SystemClock
from holon.config import HomePaths, load_settings
from holon.ledger import EventQuery
from holon.projections import Store
from holon.runtime.agents import create_agent

__all__ = ["CLIENTS", "METHOD", "format_lines", "run_inputs"]

CLIENTS = (1, 8, 32)
METHOD = (
    "Inputs: a real daemon (holon serve) takes POST /v1/agents/{{a}}/inputs over HTTP on 127.0.0.1 from C "
    "concurrent clients (C in {clients}), each on one keep-alive connection posting its share of {inputs} "
    "inputs one after another (the next once the previous is acknowledged), round-robin over {agents} paused "
    "agents per level (no turn runs: the input path alone). Per round the workload runs on a fresh home and "
    "daemon with [daemon] group_commit = true and again with group_commit = false (each input alone on the event loop, as "
    "before group commit: the in-run baseline), in alternating order; medians over {rounds} rounds. "
    "inputs_per_s_cC = acknowledged inputs / wall; inputs_per_cpu_s_cC = inputs / CPU of the daemon's own "
    "process (utime+stime from /proc) over the posting window; inputs_per_commit_cC from the daemon's "
    "counters (GET /v1/status, inputs); *_no_group the same without group commit; group_commit_ratio_cC and "
    "group_commit_cpu_ratio_cC = with / without. synchronous={sync}. lost_inputs = acknowledged inputs not "
    "found at their seq in the ledger (with their text) after the daemon stopped. input_load_1m = the "
    "machine's 1-minute load average around the section."
)


# --- a minimal keep-alive HTTP/1.1 client --------------------------------------------------------


async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """The status code and body of one response (the daemon answers with a Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    if length is None:
        raise RuntimeError(f"a response without Content-Length: {lines[0]}")
    return status, await reader.readexactly(length)


async def _client(port: int, token: str | None, jobs: list[tuple[str, str]], acks: list[tuple[int, str]]) -> None:
    """Post ``jobs`` (agent, text) one after another on one connection; record (seq, text) of each ack."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    try:
        for agent, text in jobs:
            body = json.dumps({"text": text}).encode()
            request = (
                f"POST /v1/agents/{agent}/inputs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            writer.write(request.encode() + body)
            status, answer = await _response(reader)
            if status != 202:
                raise RuntimeError(f"input to {agent} answered {status}: {answer[:300]!r}")
            acks.append((int(json.loads(answer)["seq"]), text))
    finally:
        writer.close()
        await writer.wait_closed()


async def _post_level(port: int, token: str | None, jobs: list[list[tuple[str, str]]]) -> list[tuple[int, str]]:
    acks: list[tuple[int, str]] = []
    await asyncio.gather(*(_client(port, token, share, acks) for share in jobs))
    return acks


def _jobs(mode: str, level: int, inputs: int, agents: list[str]) -> list[list[tuple[str, str]]]:
    """Each of ``level`` clients' (agent, text) list: ``inputs`` in all, round-robin over ``agents``."""
    shares: list[list[tuple[str, str]]] = [[] for _ in range(level)]
    for i in range(inputs):
        shares[i % level].append((agents[i % len(agents)], f"bench input {mode} c{level} #{i}"))
    return shares


# --- one daemon, every level ---------------------------------------------------------------------


def _counters(url: str, headers: dict[str, str]) -> dict[str, Any]:
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        r = client.get("/v1/status")
        r.raise_for_status()
        counters: dict[str, Any] = r.json()["inputs"]
        return counters


def _names(level: int, agents: int) -> list[str]:
    return [f"c{level}a{i:02d}" for i in range(agents)]


def _one_daemon(
    root: Path, *, group: bool, clients: tuple[int, ...], inputs: int, agents: int, synchronous: str,
    progress: tuple[int, int],
) -> tuple[dict[int, dict[str, float]], list[tuple[int, str]], float]:  # fmt: skip
    """Measure every level on one fresh home and daemon; returns per level (inputs, wall, cpu,
    commits), every acknowledgement and the driver's CPU seconds."""
    mode = "group" if group else "alone"
    paths = HomePaths(root)
    with Store.open(paths, load_settings(paths), clock=SystemClock()) as store:
        for level in clients:
            for name in _names(level, agents):
                create_agent(store, name, settings={"paused": True}, origin="operator:bench")
    env = _env()
    env.update(
        HOLON_LEDGER_SYNCHRONOUS=synchronous, HOLON_DAEMON_GROUP_COMMIT="true" if group else "false",
        HOLON_DAEMON_WARM_MODEL="false",  # no model is ever called: no model process to start
    )  # fmt: skip
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    levels: dict[int, dict[str, float]] = {}
    acks: list[tuple[int, str]] = []
    driver = 0.0
    done, total = progress
    with _process(_serve(paths, port), env=env) as (daemon, _):
        _wait_healthy(url, daemon)
        headers = _auth(paths)
        token = headers.get("Authorization", "").removeprefix("Bearer ") or None
        for level in clients:
            step(
                f"inputs: {level} client{'s' if level > 1 else ''}, group commit {'on' if group else 'off'}",
                done,
                total,
            )
            done += 1
            _settled(daemon.pid)  # start-up work and the previous level's catch-ups are not this level's
            before = _counters(url, headers)
            jobs = _jobs(mode, level, inputs, _names(level, agents))
            cpu0, d0, t0 = _own_cpu_s(daemon.pid), time.process_time(), time.perf_counter()
            got = asyncio.run(_post_level(port, token, jobs))
            wall = time.perf_counter() - t0
            cpu, driver = _own_cpu_s(daemon.pid) - cpu0, driver + time.process_time() - d0
            after = _counters(url, headers)
            if after["group_commit"] is not group:
                raise RuntimeError(f"the daemon reports group_commit={after['group_commit']}, expected {group}")
            levels[level] = {
                "inputs": len(got), "wall": wall, "cpu": cpu,
                "commits": after["commits"] - before["commits"], "counted": after["inputs"] - before["inputs"],
            }  # fmt: skip
            acks += got
    return levels, acks, driver


def _lost(root: Path, acks: list[tuple[int, str]]) -> int:
    """Acknowledged inputs not in the ledger at their seq as a ``message.received`` with their text."""
    paths = HomePaths(root)
    with Store.open(paths, load_settings(paths), clock=SystemClock()) as store:
        found = store.ledger.find(EventQuery(types=["message.received"], seqs=[seq for seq, _ in acks]))
    stored = {e.seq: getattr(e.payload, "text", None) for e in found}
    return sum(1 for seq, text in acks if stored.get(seq) != text)


def _rate(n: float, seconds: float) -> float | None:
    """``n`` per second; ``None`` when no time was measured (a CPU delta under one clock tick)."""
    return round(n / seconds, 1) if seconds > 0 else None


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def run_inputs(
    root: Path, *, clients: tuple[int, ...] = CLIENTS, inputs: int = 960, agents: int = 10, rounds: int = 1,
    synchronous: str = "FULL",
) -> dict[str, Any]:  # fmt: skip
    """The input section's keys (see the module docstring)."""
    load0 = os.getloadavg()[0]
    per: dict[tuple[bool, int], list[dict[str, float]]] = {}
    lost = acknowledged = 0
    driver = 0.0
    total = 2 * rounds * len(clients)
    for r in range(rounds):
        for i, group in enumerate((True, False) if r % 2 == 0 else (False, True)):
            home = root / f"inputs-{r}-{'group' if group else 'alone'}"
            progress = ((2 * r + i) * len(clients), total)
            levels, acks, cpu = _one_daemon(
                home, group=group, clients=clients, inputs=inputs, agents=agents, synchronous=synchronous,
                progress=progress,
            )  # fmt: skip
            driver += cpu
            for level, m in levels.items():
                per.setdefault((group, level), []).append(m)
            acknowledged += len(acks)
            lost += _lost(home, acks)
    out: dict[str, Any] = {}
    for level in clients:
        for group, suffix in ((True, ""), (False, "_no_group")):
            runs = per[(group, level)]
            out[f"inputs_per_s_c{level}{suffix}"] = _median(_rate(m["inputs"], m["wall"]) for m in runs)
            out[f"inputs_per_cpu_s_c{level}{suffix}"] = _median(_rate(m["inputs"], m["cpu"]) for m in runs)
            out[f"inputs_per_commit_c{level}{suffix}"] = _median(
                round(m["counted"] / m["commits"], 2) if m["commits"] else None for m in runs
            )
        for key, rate in (("group_commit_ratio", "inputs_per_s"), ("group_commit_cpu_ratio", "inputs_per_cpu_s")):
            on, off = out[f"{rate}_c{level}"], out[f"{rate}_c{level}_no_group"]
            out[f"{key}_c{level}"] = round(on / off, 2) if on and off else None
    out.update(
        lost_inputs=lost,
        inputs_acknowledged=acknowledged,
        input_clients=list(clients),
        inputs=inputs,
        input_agents=agents,
        input_rounds=rounds,
        input_synchronous=synchronous,
        input_driver_cpu_s=round(driver, 3),
        input_load_1m=round((load0 + os.getloadavg()[0]) / 2, 2),
        method=METHOD.format(clients=", ".join(map(str, clients)), inputs=inputs, agents=agents,
                                   rounds=rounds, sync=synchronous),
    )  # fmt: skip
    return out


def _n(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def format_lines(r: dict[str, Any]) -> list[str]:
    """The report's lines for this section."""
    lines = [
        f"  inputs over HTTP ({r['inputs']} per client count, {r['input_agents']} paused agents each, synchronous="
        f"{r['input_synchronous']}, median of {r['input_rounds']}; load {r['input_load_1m']}): "
        f"lost {r['lost_inputs']} of {r['inputs_acknowledged']} acknowledged"
    ]
    for c in r["input_clients"]:
        lines.append(
            f"    {c:>3} client{'s' if c > 1 else ' '}: {_n(r[f'inputs_per_s_c{c}'])}/s, {_n(r[f'inputs_per_cpu_s_c{c}'])} per daemon "
            f"CPU s, {r[f'inputs_per_commit_c{c}']} per commit; without group commit "
            f"{_n(r[f'inputs_per_s_c{c}_no_group'])}/s, {_n(r[f'inputs_per_cpu_s_c{c}_no_group'])} per CPU s "
            f"(ratio {r[f'group_commit_ratio_c{c}']}, CPU {r[f'group_commit_cpu_ratio_c{c}']})"
        )
    return lines
