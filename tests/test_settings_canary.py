"""Canaries: a secret never reaches a file of the home or a response, even on error paths (issue 14).

A real ``holon serve`` (HTTP on 127.0.0.1, logging to ``<home>/logs``) with a FakeLLM on loopback,
driven over HTTP and by the CLI in subprocesses.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers.daemon import state
from helpers.turn_cli import cli_env, holon, quick_home, spawn_holon, wait_for

from holon.api.server import free_port
from holon.api.token import read_token
from holon.runtime.settings import OPERATOR_KEYS
from holon.testing.fake_llm import FakeLLM

pytestmark = pytest.mark.slow

KEY_VAR = "CANARY_KEY_VAR"


@contextlib.contextmanager
def _daemon(home: Path, env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    proc = spawn_holon(home, "serve", "--port", str(port), env=env)
    try:
        wait_for("the daemon to run", lambda: state(home).get("state") == "running", proc=proc, timeout=90)
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except Exception:
                proc.kill()
                proc.wait(timeout=10)
        proc.communicate()


def _refused_settings(refused: str, refused_name: str) -> list[dict[str, Any]]:
    """``refused`` in every setting position, each shaped so that the check must refuse it."""
    shaped = {
        "model": f"{refused} x",  # a space: not a model name
        "api_base": f"https://user:{refused}@127.0.0.1/v1",  # credentials in the URL
        "api_key_env": refused,  # '-': not a variable name
    }
    out: list[dict[str, Any]] = [{key: shaped.get(key, refused)} for key in sorted(OPERATOR_KEYS)]
    out += [
        {"api_key_env": refused_name},  # a valid name, but not an allowed one
        {"api_key_env": "OPENAI_API_KEY", "api_base": f"https://{refused}.example/v1"},  # a key to a foreign host
        {"model": f"huggingface/https://{refused}.example/x"},
        {"api_key": refused},
        {"token": refused},
        {"secret": refused, "max_rounds": 3},
        {refused: 1},
        {"diagnostic": True, "note": refused},
        {"max_rounds": [refused]},
        {"paused": {"why": refused}},
    ]
    return out


def _files(home: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


def test_canaries_appear_only_where_they_are_data(tmp_path: Path) -> None:
    """Four canaries, each with its own rule, checked against every file under the home (database,
    WAL, logs, agent homes, run state) and every HTTP response and CLI output:

    - ``KEY``: the value of an allowed key variable, actually sent to the model (the fake server
      received it as the bearer token: positive control). It is a secret: it must appear in no file
      and no response or output.
    - ``REFUSED`` (and ``REFUSED_NAME``, a well-formed variable name the operator did not allow):
      put in every settings position of create and configure, over HTTP and the CLI, each shaped so
      that it must be refused (wrong type, bad URL, unknown key, secret-looking key, a name not
      allowed, a key pointed at a foreign host, ``unset`` of it). A refused settings value may be a
      secret pasted in the wrong place: it must appear nowhere at all, not even in the 400 that
      refused it.
    - ``ECHO``: in non-setting fields in refused positions (agent name, template, schedule,
      workspace). These are the operator's own words, and the refusal may quote them back in the
      response to that very request; they must appear in no file and no other response.
    - ``DATA``: in valid positions (a background agent's prompt, an input's text, a valid model
      name). It is data the operator asked holon to keep: it must be in the ledger (positive
      control: the grep does see the database and its WAL), and is allowed in responses that show
      that data back.
    """
    tag = uuid.uuid4().hex
    key = f"sk-canary-key-{tag}"
    refused = f"sk-canary-refused-{tag}"
    refused_name = f"SK_CANARY_NAME_{tag}"
    echo = f"canary-echo-{tag[:12]}"
    data = f"canary-data-{tag}"
    env = cli_env(HOLON_MODEL_ALLOWED_KEY_ENVS=json.dumps([KEY_VAR, "OPENAI_API_KEY"]), **{KEY_VAR: key})
    responses: list[tuple[str, str]] = []  # (what was sent, the body that came back)
    outputs: list[str] = []

    with FakeLLM(lambda body: {"content": "noted"}) as fake:
        home = quick_home(tmp_path, "base", model="openai/fake", api_base=fake.url)
        with (
            _daemon(home, env) as url,
            httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {read_token(home)}"}) as client,
        ):

            def send(method: str, path: str, body: Any) -> httpx.Response:
                raw = json.dumps(body)
                r = client.request(method, path, content=raw.encode(), headers={"content-type": "application/json"})
                assert r.status_code < 500, r.text
                responses.append((raw, r.text))
                return r

            # The key is used: an agent names the allowed variable, on loopback.
            r = send("POST", "/v1/agents", {"name": "keyed", "settings": {"model": "openai/fake", "api_base": fake.url,
                                                                          "api_key_env": KEY_VAR}})  # fmt: skip
            assert r.status_code == 201, r.text
            assert send("POST", "/v1/agents/keyed/inputs", {"text": f"remember {data}"}).status_code == 202
            wait_for("the model call", lambda: fake.request_headers, timeout=60)
            assert fake.request_headers[0]["authorization"] == f"Bearer {key}"

            # Refused settings values, in every position, on create and on configure.
            for n, settings in enumerate(_refused_settings(refused, refused_name)):
                r = send("POST", "/v1/agents", {"name": f"r{n}", "settings": settings})
                assert r.status_code in (400, 422), (settings, r.text)
                r = send("PATCH", "/v1/agents/base", {"settings": settings})
                assert r.status_code in (400, 422), (settings, r.text)
            r = send("PATCH", "/v1/agents/base", {"unset": [refused]})
            assert r.status_code == 400, r.text

            # Non-setting fields, refused: each response may quote its own request's value.
            for body in ({"name": f"X-{echo}"}, {"name": "e1", "template": echo},
                         {"name": "e2", "schedule": echo, "prompt": "p"}, {"name": "e3", "workspace": f"/nope/{echo}"}):  # fmt: skip
                r = send("POST", "/v1/agents", body)
                assert r.status_code in (400, 422), r.text

            # Data, in valid positions.
            r = send("POST", "/v1/agents", {"name": "nightly", "schedule": "0 9 * * *", "prompt": f"check {data}",
                                            "settings": {"model": f"openai/{data}"}})  # fmt: skip
            assert r.status_code == 201, r.text

            # The CLI, against the same home while the daemon runs.
            cli_bad = [["--api-key-env", refused], ["--api-key-env", refused_name], ["--model", f"{refused} x"],
                       ["--api-base", f"https://u:{refused}@127.0.0.1/v1"], ["--unset", refused],
                       ["--api-key-env", "OPENAI_API_KEY", "--api-base", f"https://{refused}.example/v1"]]  # fmt: skip
            for args in cli_bad:
                for command in (["agent", "configure", "base"], ["agent", "create", "clibad"]):
                    if command[1] == "create" and args[0] == "--unset":
                        continue
                    c = holon(home, *command, *args, env=env)
                    assert c.code == 2 and "Traceback" not in c.err, (args, c)
                    outputs += [c.out, c.err]
            for args in (["agent", "show", "keyed"], ["agent", "list"], ["ledger", "tail", "--json"]):
                c = holon(home, *args, env=env)
                assert c.code == 0, c
                outputs.append(c.out + c.err)
            for path in ("/v1/agents", "/v1/status", "/v1/ledger/tail?limit=1000", "/v1/agents/keyed/status"):
                r = client.get(path)
                responses.append(("", r.text))
            wait_for("the turn to settle", lambda: client.get("/v1/agents/keyed").json()["agent"]["turns"] >= 1)

    files = _files(home)
    assert any(p.name.endswith(".log") for p in files), "the daemon logged to the home"
    assert any(data.encode() in body for body in files.values()), "positive control: the ledger holds the data"
    for path, body in files.items():
        for secret in (key, refused, refused_name, echo):
            assert secret.encode() not in body, (secret, path)
    for sent, body in responses:
        for secret in (key, refused, refused_name):
            assert secret not in body, (secret, sent, body)
        if echo not in sent:
            assert echo not in body, (sent, body)
    for out in outputs:
        for secret in (key, refused, refused_name):
            assert secret not in out, (secret, out)
