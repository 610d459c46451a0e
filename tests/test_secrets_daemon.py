"""A key stored with ``holon secrets set`` reaches a running daemon's model calls, and nowhere else
(issue 15 item 6).

A real ``holon daemon`` started from an environment without the key variable: the turn fails with
a message naming the variable, the daemon's process and the fix; ``holon secrets set`` (stdin)
while the daemon runs is enough, with no restart, for the queued input to be answered on the next
retry, with the key sent as the bearer token. After that real turn, the value appears in no
database file, log or daemon output of the home: only in ``secrets.json``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers.daemon import completed_inputs, payloads, submit
from helpers.turn_cli import REPO, cli_env, holon, holon_argv, quick_home, wait_for

from holon.testing.fake_llm import FakeLLM

pytestmark = [pytest.mark.timeout(150), pytest.mark.slow]

VAR = "GROQ_API_KEY"  # in the default [model] allowed_key_envs
SECRET = "gsk-secret-4b1d9e77c02a43f8a1"


def test_a_stored_secret_is_read_at_call_time_and_never_written_elsewhere(tmp_path: Path) -> None:
    env = {k: v for k, v in cli_env().items() if k != VAR}
    with FakeLLM(lambda body: {"content": "answered with the stored key"}) as fake:
        home = quick_home(tmp_path, "alice", model="openai/fake", api_base=fake.url, api_key_env=VAR)
        r = holon(home, "daemon", "start", "--no-http", "--json", env=env)
        assert r.code == 0, r
        try:
            pid = r.json().get("pid")
            (seq,) = submit(home, "alice", "hello")

            def error_brief() -> str | None:
                return next((p["text"] for *_, p in payloads(home, "brief.delivered") if p["kind"] == "error"), None)

            text = wait_for("the error brief", error_brief, timeout=60)
            assert f"{VAR} is not set in the daemon's environment (pid " in text, text
            assert f"nor in holon secrets: run `holon secrets set {VAR}`" in text, text
            if pid:
                assert f"(pid {pid})" in text, text

            def alice() -> dict[str, Any]:  # daemon.json follows the ledger within a writer tick
                status = holon(home, "daemon", "status", "--json", env=env).json()
                return next(a for a in status["status"]["agents"] if a["name"] == "alice")

            wait_for("alice's status to say failed", lambda: alice()["state"] == "failed", timeout=60)
            row = alice()
            assert row["state"] == "failed" and f"holon secrets set {VAR}" in row["detail"], row

            stored = subprocess.run(
                holon_argv("--home", home, "secrets", "set", VAR),
                input=SECRET + "\n", capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=False,
            )  # fmt: skip
            assert stored.returncode == 0, stored
            wait_for("the queued input answered", lambda: seq in completed_inputs(home), timeout=90)
        finally:
            stopped = holon(home, "daemon", "stop", "--json", env=env)
        assert stopped.code == 0, stopped
        headers = fake.request_headers
    assert headers and headers[-1].get("authorization") == f"Bearer {SECRET}", headers

    needle = SECRET.encode()
    leaks = [
        str(p.relative_to(home))
        for p in home.rglob("*")
        if p.is_file() and p.name != "secrets.json" and needle in p.read_bytes()
    ]
    assert leaks == [], leaks
    assert needle in (home / "secrets.json").read_bytes()
    assert list(home.glob("holon.db*")) and list((home / "logs").iterdir())  # the files were there to search
