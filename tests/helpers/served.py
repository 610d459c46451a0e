"""A real ``holon serve`` subprocess on 127.0.0.1 whose agents talk to a ``FakeLLM``.

``serve_home(root, fake, "ada", "bob")`` makes a home with those agents on the fake model, starts
``holon serve --port N`` (the console script, with this worktree's code), waits until its state
file says it runs, and yields a ``Served`` with the URL and the home's token (``api.token``, made
by the daemon). The daemon gets SIGTERM at the end (SIGKILL if it does not stop), test failed or not.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from helpers.daemon import fake_home, state
from helpers.turn_cli import spawn_holon, wait_for
from holon.api.server import free_port
from holon.api.token import read_token
from holon.repl.client import tls_for
from holon.testing.fake_llm import FakeLLM

__all__ = ["Served", "echo_script", "serve_home"]


def echo_script(body: dict[str, Any]) -> dict[str, Any]:
    """A FakeLLM step answering ``echo: <last user text>``, streamed in a few fragments."""
    last = next((m for m in reversed(body.get("messages", [])) if m.get("role") == "user"), {})
    content = last.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return {"content": f"echo: {str(content or '')[-200:]}"}


@dataclass
class Served:
    home: Path
    url: str
    token: str
    proc: subprocess.Popen[str]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, **kwargs: Any) -> httpx.Client:
        kwargs.setdefault("timeout", 60)
        kwargs.setdefault("verify", tls_for(self.url))  # plain HTTP: no CA bundle loaded per client
        return httpx.Client(base_url=self.url, headers=self.headers, **kwargs)


@contextlib.contextmanager
def serve_home(root: Path, fake: FakeLLM, *agents: str, storage: str = "") -> Iterator[Served]:
    home = fake_home(root, fake, *agents, storage=storage)
    port = free_port()
    proc = spawn_holon(home, "serve", "--port", str(port))
    try:
        wait_for("the daemon to serve", lambda: state(home).get("state") == "running", proc=proc)
        token = read_token(home)
        assert token, "the daemon made no api.token"
        yield Served(home, f"http://127.0.0.1:{port}", token, proc)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        with contextlib.suppress(Exception):
            proc.communicate(timeout=5)
