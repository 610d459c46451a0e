"""The API for programs (issue 15) against a real ``holon serve`` subprocess and a FakeLLM model:

* ``POST /v1/agents/{a}/messages?wait=N``: the settled turn and its reply in one request, 202 and a
  poll URL when it takes longer, a failed turn's reason, idempotency keys;
* ``POST /v1/chat/completions`` and ``GET /v1/models`` through the real ``openai`` client,
  streaming and not: only the new user message is delivered, errors are OpenAI's shape;
* bad chat-completion bodies (hypothesis) are 400s in OpenAI's shape, never 500;
* ``GET /v1/events``: two agents' events in one stream, resumed with ``Last-Event-ID``;
* ``/docs``: Swagger UI with no external URL, its files served by the daemon, state changes still
  need the token.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from helpers.daemon import payloads
from helpers.props import examples
from helpers.served import Served, echo_script, serve_home
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from holon.testing.fake_llm import FakeLLM

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REFUSED = "the model refuses this request"


def _script(body: dict[str, Any]) -> dict[str, Any]:
    """Echo, except: "slow" answers after 2 s, "use a tool" calls memory_search and then answers,
    "refuse" gets a 400 from the model (agent cy only: a failing agent backs off, which would slow
    the others' tests)."""
    messages = body.get("messages") or [{}]
    if messages[-1].get("role") == "tool":
        return {"content": "Nothing about the deploy in memory."}
    step = echo_script(body)
    if "use a tool" in step["content"]:
        return {"content": "Let me look.", "tool_calls": [{"name": "memory_search", "arguments": {"query": "deploy"}}]}
    if "slow" in step["content"]:
        step["delay"] = 2.0
    if "refuse" in step["content"]:
        return {"error": 400, "message": REFUSED}
    return step


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One daemon for the module's tests, on each engine in turn (RFC 0008 step 7): on PostgreSQL
    the home's config names a database of the module's own (``pg_module_db``)."""
    storage = request.getfixturevalue("pg_module_db").url if request.param == "postgresql" else ""
    mp = pytest.MonkeyPatch()
    mp.setenv("HOLON_LEDGER_SYNCHRONOUS", "NORMAL")
    root = tmp_path_factory.mktemp("programs")
    with FakeLLM(_script) as fake, serve_home(root, fake, "ada", "bob", "cy", storage=storage) as s:
        with s.client(timeout=320) as c:  # the first turn also starts the model child
            for agent in ("ada", "bob"):
                r = c.post(f"/v1/agents/{agent}/messages", params={"wait": 300}, json={"text": "warm up"})
                assert r.status_code == 200 and r.json()["status"] == "completed", r.text
        yield s
    mp.undo()


@pytest.fixture
def http(served: Served) -> Iterator[httpx.Client]:
    with served.client() as c:
        yield c


def _inputs(served: Served, text: str) -> list[dict[str, Any]]:
    return [p for _, _, _, p in payloads(served.home, "message.received") if p["text"] == text]


# --- /messages -------------------------------------------------------------------------------------


def test_a_message_gets_its_settled_turn_and_reply(served: Served, http: httpx.Client) -> None:
    r = http.post("/v1/agents/ada/messages", params={"wait": 30}, json={"text": "what is two plus two"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "completed" and body["reply"] == "echo: what is two plus two", body
    assert body["turn_id"].startswith("turn_") and body["reason"] is None and body["requeued"] is False
    assert body["usage"]["total_tokens"] > 0
    # The poll URL answers the same for a settled input.
    again = http.get(body["poll"])
    assert again.status_code == 200 and again.json()["turn_id"] == body["turn_id"]


def test_a_retry_with_the_same_key_gets_the_same_turn_and_no_second_input(served: Served, http: httpx.Client) -> None:
    key = {"Idempotency-Key": "msg-retry-1"}
    first = http.post("/v1/agents/ada/messages", json={"text": "only once please"}, headers=key)
    second = http.post("/v1/agents/ada/messages", json={"text": "only once please"}, headers=key)
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    assert first.json()["input_seq"] == second.json()["input_seq"]
    assert first.json()["turn_id"] == second.json()["turn_id"]
    assert len(_inputs(served, "only once please")) == 1
    conflict = http.post("/v1/agents/ada/messages", json={"text": "something else"}, headers=key)
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "conflict"


def test_a_slow_turn_answers_202_with_a_url_to_poll(http: httpx.Client) -> None:
    r = http.post("/v1/agents/bob/messages", params={"wait": 0.2}, json={"text": "a slow one"})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["status"] in ("queued", "running") and body["reply"] is None
    assert r.headers["location"] == body["poll"] == f"/v1/agents/{body['agent_id']}/messages/{body['input_seq']}"
    done = http.get(body["poll"], params={"wait": 60})
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "completed" and done.json()["reply"] == "echo: a slow one"


def test_a_failed_turn_answers_with_its_reason(http: httpx.Client) -> None:
    r = http.post("/v1/agents/cy/messages", params={"wait": 120}, json={"text": "please refuse"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "failed" and body["reply"] is None, body
    assert REFUSED in body["reason"], body


def test_bad_message_requests(served: Served, http: httpx.Client) -> None:
    assert http.post("/v1/agents/nobody/messages", json={"text": "x"}).status_code == 404
    assert http.post("/v1/agents/ada/messages", params={"wait": 301}, json={"text": "x"}).status_code == 422
    assert http.get("/v1/agents/ada/messages/999999999").status_code == 404
    assert http.get("/v1/agents/ada/messages/1").status_code == 404  # seq 1 is not an input of ada
    assert httpx.post(f"{served.url}/v1/agents/ada/messages", json={"text": "x"}).status_code == 401


# --- OpenAI compatibility ---------------------------------------------------------------------------


@pytest.fixture
def client(served: Served) -> Iterator[openai.OpenAI]:
    c = openai.OpenAI(base_url=f"{served.url}/v1", api_key=served.token, max_retries=0, timeout=120)
    try:
        yield c
    finally:
        c.close()


def test_the_openai_client_talks_to_an_agent(served: Served, client: openai.OpenAI) -> None:
    history = [
        {"role": "system", "content": "You are a client-side system prompt."},
        {"role": "user", "content": "an old question"},
        {"role": "assistant", "content": "an old answer"},
        {"role": "user", "content": "the new question"},
    ]
    completion = client.chat.completions.create(model="ada", messages=history)  # type: ignore[arg-type]
    assert completion.object == "chat.completion" and completion.model == "ada"
    assert completion.choices[0].message.content == "echo: the new question"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens > 0
    # Only the new message became an input: the client's history is not replayed.
    assert len(_inputs(served, "the new question")) == 1
    assert not _inputs(served, "an old question") and not _inputs(served, "an old answer")


def test_the_openai_client_streams_a_reply(served: Served, client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="bob",
        messages=[{"role": "user", "content": "stream this back"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: stream this back"
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 2, "the reply came in one piece"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    assert all(c.object == "chat.completion.chunk" and c.model == "bob" for c in chunks)


def test_a_streamed_turn_with_a_tool_call_ends_with_the_reply(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "please use a tool"}]
    stream = client.chat.completions.create(model="ada", messages=messages, stream=True)  # type: ignore[arg-type]
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    # What the agent said in each round, set apart; the reply last.
    assert text == "Let me look.\n\nNothing about the deploy in memory.", text
    plain = client.chat.completions.create(model="ada", messages=messages)  # type: ignore[arg-type]
    assert plain.choices[0].message.content == "Nothing about the deploy in memory."


def test_an_idempotency_key_makes_a_chat_retry_safe(served: Served, client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "say it once"}]
    key = {"Idempotency-Key": "chat-retry-1"}
    first = client.chat.completions.create(model="ada", messages=messages, extra_headers=key)  # type: ignore[arg-type]
    second = client.chat.completions.create(model="ada", messages=messages, extra_headers=key)  # type: ignore[arg-type]
    assert first.id == second.id and first.choices[0].message.content == "echo: say it once"
    assert len(_inputs(served, "say it once")) == 1


def test_models_and_openai_errors(served: Served, client: openai.OpenAI) -> None:
    names = {m.id for m in client.models.list()}
    assert {"ada", "bob"} <= names
    assert client.models.retrieve("ada").owned_by == "holon"
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nobody", messages=[{"role": "user", "content": "hi"}])
    assert missing.value.code == "model_not_found" and "nobody" in missing.value.message
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nobody")
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="ada", messages=[{"role": "assistant", "content": "hi"}])
    assert bad.value.type == "invalid_request_error" and "last message must be from the user" in bad.value.message
    with pytest.raises(openai.BadRequestError) as badkey:
        client.chat.completions.create(
            model="ada", messages=[{"role": "user", "content": "hi"}], extra_headers={"Idempotency-Key": "a b"}
        )
    assert "idempotency key" in badkey.value.message
    wrong = openai.OpenAI(base_url=f"{served.url}/v1", api_key="not-the-token", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    wrong.close()


def test_a_failed_turn_is_an_openai_error_that_is_not_retried(client: openai.OpenAI) -> None:
    retrying = client.with_options(max_retries=2)
    with pytest.raises(openai.APIStatusError) as failed:
        retrying.chat.completions.create(model="cy", messages=[{"role": "user", "content": "refuse me"}])
    assert failed.value.status_code == 502 and failed.value.code == "turn_failed"
    assert REFUSED in failed.value.message
    assert failed.value.response.headers["x-should-retry"] == "false"
    with pytest.raises(openai.APIError) as streamed:
        list(
            retrying.chat.completions.create(model="cy", messages=[{"role": "user", "content": "refuse"}], stream=True)
        )
    assert REFUSED in streamed.value.message


# --- bad bodies: OpenAI's error shape, never a 500 -----------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_not_a_string = _json.filter(lambda v: not isinstance(v, str))
_user = st.fixed_dictionaries({"role": st.just("user"), "content": st.text(min_size=1, max_size=30)})
_bad_last = st.fixed_dictionaries(
    {"role": st.text(max_size=12).filter(lambda r: r != "user"), "content": st.text(max_size=20)}
)
_bad_messages = st.one_of(
    _json.filter(lambda v: not isinstance(v, list)),
    st.just([]),
    st.lists(_user, max_size=2).flatmap(lambda head: _bad_last.map(lambda last: [*head, last])),
    st.lists(_json.filter(lambda v: not isinstance(v, dict)), min_size=1, max_size=3),
    st.just([{"role": "user", "content": "   "}]),
    _not_a_string.filter(lambda v: v is not None and not isinstance(v, list)).map(
        lambda c: [{"role": "user", "content": c}]
    ),
)
_bodies = st.one_of(
    _json.filter(lambda v: not isinstance(v, dict)).map(json.dumps),
    st.binary(max_size=40).filter(lambda b: not _is_object(b)).map(lambda b: b.decode("latin-1")),
    st.fixed_dictionaries({"model": _json, "messages": _bad_messages}).map(json.dumps),
    st.fixed_dictionaries({"model": _not_a_string, "messages": st.lists(_user, min_size=1, max_size=2)}).map(
        json.dumps
    ),
    st.fixed_dictionaries(
        {"model": st.just("ada"), "messages": st.lists(_user, min_size=1, max_size=1)},
        optional={"stream": st.lists(st.integers(), min_size=1), "n": st.integers().filter(lambda n: n != 1)},
    )
    .filter(lambda b: "stream" in b or "n" in b)
    .map(json.dumps),
    st.dictionaries(st.sampled_from(["model", "messages", "stream"]), _json, max_size=2)
    .filter(lambda b: "model" not in b or "messages" not in b)
    .map(json.dumps),
)


def _is_object(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw), dict)
    except ValueError:
        return False


def test_bad_chat_bodies_are_400s_in_openais_shape(served: Served, http: httpx.Client) -> None:
    @given(body=_bodies)
    @settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(body: str) -> None:
        r = http.post(
            "/v1/chat/completions", content=body.encode("utf-8", "surrogatepass"),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        assert r.status_code == 400, (body, r.status_code, r.text)
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error" and error["message"], error
        assert set(error) == {"message", "type", "code", "param"}

    check()


# --- /v1/events ------------------------------------------------------------------------------------------


def _sse(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """SSE messages (``event``, ``id``, ``data``) from a line iterator."""
    message: dict[str, str] = {}
    for line in lines:
        if not line:
            if message:
                yield message
            message = {}
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            message[field] = value[1:] if value.startswith(" ") else value
    if message:
        yield message


def _read_until(served: Served, headers: dict[str, str], params: dict[str, Any], done: Any) -> list[dict[str, str]]:
    seen: list[dict[str, str]] = []
    with served.client(timeout=httpx.Timeout(60, read=60)) as c, c.stream("GET", "/v1/events", headers=headers,
                                                                          params=params) as r:  # fmt: skip
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for message in _sse(r.iter_lines()):
            seen.append(message)
            if done(seen):
                break
    return seen


def _events(seen: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [json.loads(m["data"]) | {"_id": m["id"]} for m in seen if m.get("event") == "event"]


def test_one_stream_carries_every_agents_events_and_resumes(served: Served, http: httpx.Client) -> None:
    ids = {a["name"]: a["agent_id"] for a in http.get("/v1/agents").json() if a["name"] in ("ada", "bob")}
    head = http.get("/v1/ledger/tail", params={"n": 1}).json()[-1]["seq"]
    texts = {"ada": "hello from the events test", "bob": "and hello to bob"}

    def send() -> None:
        # One after the other: two turns at once would start a second model child (slow, not tested here).
        with served.client() as c:
            for name, text in texts.items():
                c.post(f"/v1/agents/{name}/messages", params={"wait": 30}, json={"text": text})

    def both_settled(seen: list[dict[str, str]]) -> bool:
        settled = {e["agent_id"] for e in _events(seen) if e["type"] == "turn.settled"}
        return settled >= set(ids.values())

    sender = threading.Timer(0.2, send)
    sender.start()
    try:
        seen = _read_until(served, {}, {"after": head}, both_settled)
    finally:
        sender.join()
    events = _events(seen)
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)) and seqs[0] > head and all(e["_id"] == str(e["seq"]) for e in events)
    received = {e["agent_id"]: e["payload"]["text"] for e in events if e["type"] == "message.received"}
    assert received == {ids["ada"]: texts["ada"], ids["bob"]: texts["bob"]}
    assert {e["agent_id"] for e in events if e["type"] == "turn.started"} == set(ids.values())
    statuses = [json.loads(m["data"]) for m in seen if m.get("event") == "status"]
    assert {s["agent_id"] for s in statuses} >= set(ids.values())
    assert "running" in {s["state"] for s in statuses}, statuses
    deltas = [json.loads(m["data"]) for m in seen if m.get("event") == "delta"]
    assert deltas and all("id" not in m for m in seen if m.get("event") == "delta")
    assert {d["agent_id"] for d in deltas} <= set(ids.values())

    # Resume from the middle: exactly the events after it, none twice.
    middle = events[len(events) // 2]["seq"]
    rest = _read_until(
        served, {"Last-Event-ID": str(middle)}, {"after": 0}, lambda s: len(_events(s)) >= len(events) - len(
            [e for e in events if e["seq"] <= middle])
    )  # fmt: skip
    assert [e["seq"] for e in _events(rest)][: len(seqs)] == [s for s in seqs if s > middle]


def test_the_events_stream_needs_the_token(served: Served) -> None:
    assert httpx.get(f"{served.url}/v1/events", timeout=10).status_code == 401
    bad = httpx.get(f"{served.url}/v1/events", headers=served.headers | {"Last-Event-ID": "x"}, timeout=10)
    assert bad.status_code == 400


# --- /docs -----------------------------------------------------------------------------------------------


def test_docs_are_served_offline_and_public_while_changes_need_the_token(served: Served) -> None:
    page = httpx.get(f"{served.url}/docs", timeout=10)  # a browser sends no token
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    urls = re.findall(r"""https?://[^\s"'<>]+""", page.text)
    assert not urls, f"the docs page names external URLs: {urls}"
    assets = re.findall(r"""(?:src|href)="([^"]+)\"""", page.text)
    assert {a.rsplit("/", 1)[-1] for a in assets} >= {"swagger-ui-bundle.js", "swagger-ui.css"}
    for asset in assets:
        assert asset.startswith("/docs/static/"), asset
        r = httpx.get(f"{served.url}{asset}", timeout=10)
        assert r.status_code == 200 and len(r.content) > 100, asset
    assert 'validatorUrl": null' in page.text
    schema = httpx.get(f"{served.url}/v1/openapi.json", timeout=10)
    assert schema.status_code == 200
    doc = schema.json()
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert doc["security"] == [{"bearer": []}] and doc["paths"]["/v1/health"]["get"]["security"] == []
    assert {"/v1/chat/completions", "/v1/models", "/v1/events", "/v1/agents/{agent}/messages"} <= set(doc["paths"])
    # Public pages are GET only; everything else still needs the token.
    assert httpx.post(f"{served.url}/v1/openapi.json", json={}, timeout=10).status_code == 401
    assert httpx.post(f"{served.url}/v1/agents", json={"name": "eve"}, timeout=10).status_code == 401
    assert httpx.get(f"{served.url}/v1/agents", timeout=10).status_code == 401
    assert httpx.get(f"{served.url}/docs/../v1/agents", timeout=10).status_code == 401
    # A web page cannot load them by DNS rebinding either.
    assert httpx.get(f"{served.url}/docs", headers={"Host": "evil.example:80"}, timeout=10).status_code == 403


def test_models_leave_out_holons_internal_agents(served: Served, client: openai.OpenAI) -> None:
    """``GET /v1/models`` lists what ``agent list`` lists: holon's own diagnostic agent is left
    out, yet answers when a client names it."""
    from helpers.turn_cli import open_store

    from holon.runtime.agents import create_agent

    with open_store(served.home) as store:
        create_agent(store, "diagnose", settings={"diagnostic": True}, internal=True)
    names = {m.id for m in client.models.list()}
    assert {"ada", "bob"} <= names and "diagnose" not in names, names
    assert client.models.retrieve("diagnose").id == "diagnose"
