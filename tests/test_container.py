"""The container's start command, run without Docker (issue 15, "Runs where daemons run").

A Docker build needs the base image from the internet, which tests may not use. What matters
about the image is what it runs: the final stage's ``ENV``, ``ENTRYPOINT`` and ``CMD``. This test
reads them from the ``Dockerfile`` and runs that exact command line in a subprocess with that
environment (the image's ``PATH`` aside: here ``holon`` is this checkout's), on an empty directory
standing for the ``/data`` volume and a free port standing for 7878. It checks that the container
refuses to start without its token, and with it creates the home, listens off loopback (0.0.0.0),
answers ``/v1/health``, refuses API calls without the token (401) and serves them with it (200).
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers.turn_cli import REPO, cli_env, holon_argv, wait_for

from holon.api.server import free_port

pytestmark = pytest.mark.timeout(180)

DOCKERFILE = REPO / "Dockerfile"
TOKEN = "container-test-token-0123456789abcdef"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: comments dropped, continuation lines joined."""
    logical, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        logical.append(current)
        current = ""
    return [(ins.upper(), rest.strip()) for ins, _, rest in (line.partition(" ") for line in logical)]


def _final_stage() -> list[tuple[str, str]]:
    instructions = _instructions(DOCKERFILE.read_text(encoding="utf-8"))
    last_from = max(i for i, (ins, _) in enumerate(instructions) if ins == "FROM")
    return instructions[last_from:]


def _env(stage: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for ins, args in stage:
        if ins == "ENV":
            for word in shlex.split(args):
                key, _, value = word.partition("=")
                env[key] = value
    return env


def _exec_form(stage: list[tuple[str, str]], name: str) -> list[str]:
    (args,) = [a for ins, a in stage if ins == name][-1:]
    value = json.loads(args)  # the exec form: signals reach holon itself, not a shell
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


@pytest.fixture(scope="module")
def image() -> tuple[dict[str, str], list[str]]:
    """The final stage's environment and its command line (ENTRYPOINT + CMD)."""
    stage = _final_stage()
    return _env(stage), _exec_form(stage, "ENTRYPOINT") + _exec_form(stage, "CMD")


def _start(image: tuple[dict[str, str], list[str]], data: Path, port: int, **extra: str) -> subprocess.Popen[str]:
    env_image, command = image
    assert command[0] == "holon", command
    env = cli_env(**{k: v for k, v in env_image.items() if k != "PATH"})
    env.update(HOLON_HOME=str(data), HOLON_API_PORT=str(port), **extra)
    for own in ("HOLON_LEDGER_SYNCHRONOUS", "HOLON_LOGGING_CONSOLE"):  # the image's own settings only
        env.pop(own)
    return subprocess.Popen(
        holon_argv(*command[1:]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO
    )


@pytest.fixture
def reaped() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=30)


def test_the_image_keeps_its_home_on_a_volume_and_listens_off_loopback(image: tuple[dict[str, str], list[str]]) -> None:
    env, command = image
    stage = _final_stage()
    assert env["HOLON_HOME"] == "/data" and ("VOLUME", "/data") in stage
    assert env["HOLON_API_HOST"] == "0.0.0.0" and env["HOLON_API_TOKEN_ENV"] == "HOLON_TOKEN"
    assert ("EXPOSE", env["HOLON_API_PORT"]) in stage
    assert command[:2] == ["holon", "serve"] and "--init" in command
    assert any(ins == "USER" and args not in ("root", "0") for ins, args in stage), "the daemon runs as root"


def test_dockerignore_lets_in_everything_the_build_copies() -> None:
    allowed = {
        line[1:].rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines() if line.startswith("!")
    }
    copied = [
        src
        for ins, args in _instructions(DOCKERFILE.read_text(encoding="utf-8"))
        if ins == "COPY" and not args.startswith("--from")
        for src in args.split()[:-1]
    ]
    assert copied and set(copied) <= allowed, (copied, allowed)
    for src in copied:
        assert (REPO / src).exists(), src


@pytest.mark.slow
def test_without_the_token_the_container_refuses_to_start(
    image: tuple[dict[str, str], list[str]], tmp_path: Path, reaped: list[subprocess.Popen[str]]
) -> None:
    proc = _start(image, tmp_path / "data", free_port())
    reaped.append(proc)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    cause = [line for line in err.splitlines() if line.startswith("holon: error: ")]
    assert len(cause) == 1 and "HOLON_TOKEN" in cause[0] and "unset or empty" in cause[0], err
    assert "Traceback" not in err


@pytest.mark.slow
def test_the_container_command_initialises_the_home_and_serves_with_the_token(
    image: tuple[dict[str, str], list[str]], tmp_path: Path, reaped: list[subprocess.Popen[str]]
) -> None:
    data = tmp_path / "data"
    data.mkdir()  # the empty volume
    port = free_port()
    proc = _start(image, data, port, HOLON_TOKEN=TOKEN)
    reaped.append(proc)
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{base}/v1/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for("the container's daemon to answer /v1/health", healthy, timeout=90, proc=proc)
    assert (data / "holon.db").is_file() and (data / "holon.toml").is_file()
    assert not (data / "api.token").exists(), "the token comes from HOLON_TOKEN, not a file"
    assert _listens_on_any_address(port), "the API listens on loopback only"
    assert httpx.get(f"{base}/v1/agents", timeout=10).status_code == 401
    assert httpx.get(f"{base}/v1/agents", headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
    ok = httpx.get(f"{base}/v1/agents", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert ok.status_code == 200, ok.text
    proc.send_signal(signal.SIGTERM)  # what `docker stop` sends
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert TOKEN not in err and TOKEN not in (data / "logs" / "holon.log").read_text(encoding="utf-8")


def _listens_on_any_address(port: int) -> bool:
    """Whether a TCP socket listens on 0.0.0.0:``port`` (from /proc/net/tcp: local address, state 0A)."""
    pattern = re.compile(rf"^\s*\d+:\s+00000000:{port:04X}\s+00000000:0000\s+0A\b", re.M)
    return bool(pattern.search(Path("/proc/net/tcp").read_text()))
