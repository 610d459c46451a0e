"""The scripted OpenAI-compatible server, spoken to with the stdlib HTTP client (no litellm)."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from holon.testing import FakeLLM
from holon.testing.fake_llm import CONTEXT_OVERFLOW_MESSAGE, EXHAUSTED_TEXT


def _conn(fake: FakeLLM, timeout: float = 5) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", fake.port, timeout=timeout)


def post(fake: FakeLLM, body: dict[str, Any], timeout: float = 5) -> tuple[int, dict[str, str], bytes]:
    conn = _conn(fake, timeout)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": "fake", "messages": [{"role": "user", "content": "hi"}], **extra}


def sse_events(raw: bytes) -> list[str]:
    return [line.removeprefix("data: ") for line in raw.decode().split("\n\n") if line.startswith("data: ")]


def test_models_endpoint_and_url(fake: FakeLLM) -> None:
    assert fake.url == f"http://127.0.0.1:{fake.port}/v1"
    conn = _conn(fake)
    conn.request("GET", "/v1/models")
    response = conn.getresponse()
    assert response.status == 200
    assert json.loads(response.read())["data"][0]["id"] == "fake"
    conn.close()


def test_plain_reply_is_an_openai_completion(fake: FakeLLM) -> None:
    fake.add({"content": "hello there"})
    status, headers, raw = post(fake, chat())
    assert status == 200
    assert int(headers["content-length"]) == len(raw)
    body = json.loads(raw)
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hello there"}
    assert body["choices"][0]["finish_reason"] == "stop"
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
    assert fake.requests == [chat()]


def test_tool_call_reply_with_raw_and_dict_arguments(fake: FakeLLM) -> None:
    fake.add({"tool_calls": [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": '{"bad', "id": "c9"}]})
    body = json.loads(post(fake, chat())[2])
    message = body["choices"][0]["message"]
    assert message["content"] is None
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == [
        ("call_1_0", "a", '{"x": 1}'),
        ("c9", "b", '{"bad'),
    ]
    assert body["choices"][0]["finish_reason"] == "tool_calls"


def test_streaming_is_chunked_sse_with_split_arguments_and_usage(fake: FakeLLM) -> None:
    arguments = '{"path": "notes/a b.txt", "lines": [1, 2, 3]}'
    fake.add({"content": "let me look", "tool_calls": [{"name": "read", "arguments": arguments}], "usage": {"x": 1}})
    status, headers, raw = post(fake, chat(stream=True, stream_options={"include_usage": True}))
    assert status == 200
    assert headers["transfer-encoding"] == "chunked"
    assert headers["content-type"] == "text/event-stream"
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == "let me look"
    pieces = [tc["function"]["arguments"] for d in deltas for tc in d.get("tool_calls", [])]
    assert len([p for p in pieces if p]) >= 2, "arguments must be split across chunks"
    assert "".join(pieces) == arguments
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["x"] == 1
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"


def test_streaming_without_include_usage_has_no_usage_chunk(fake: FakeLLM) -> None:
    fake.add({"content": "a b"})
    events = sse_events(post(fake, chat(stream=True))[2])
    assert all("usage" not in json.loads(e) for e in events[:-1])


def test_error_step_with_retry_after(fake: FakeLLM) -> None:
    fake.add({"error": 429, "retry_after": 3}, {"error": 500, "message": "boom"})
    status, headers, raw = post(fake, chat())
    assert (status, headers["retry-after"]) == (429, "3")
    assert json.loads(raw)["error"]["code"] == "rate_limit_exceeded"
    status, headers, raw = post(fake, chat())
    assert status == 500 and "retry-after" not in headers
    assert json.loads(raw)["error"]["message"] == "boom"


def test_context_overflow_step(fake: FakeLLM) -> None:
    fake.add({"context_overflow": True})
    status, _, raw = post(fake, chat())
    assert status == 400
    error = json.loads(raw)["error"]
    assert error["message"] == CONTEXT_OVERFLOW_MESSAGE and error["code"] == "context_length_exceeded"


def test_drop_closes_without_answer(fake: FakeLLM) -> None:
    fake.add({"drop": True})
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        post(fake, chat())


def test_delay_sleeps_before_answering(fake: FakeLLM) -> None:
    fake.add({"content": "late", "delay": 0.3})
    started = time.monotonic()
    assert json.loads(post(fake, chat())[2])["choices"][0]["message"]["content"] == "late"
    assert time.monotonic() - started >= 0.3


def test_exhausted_script_default_and_strict() -> None:
    with FakeLLM([]) as fake:
        body = json.loads(post(fake, chat())[2])
        assert body["choices"][0]["message"]["content"] == EXHAUSTED_TEXT
    with FakeLLM([], strict=True) as fake:
        assert post(fake, chat())[0] == 500


def test_callable_script_sees_the_request() -> None:
    with FakeLLM(lambda body: {"content": f"echo {body['messages'][-1]['content']}"}) as fake:
        assert json.loads(post(fake, chat())[2])["choices"][0]["message"]["content"] == "echo hi"


def test_concurrent_requests_each_take_one_step() -> None:
    n = 24
    with FakeLLM([{"content": f"s{i}"} for i in range(n)]) as fake:
        answers: list[str] = []
        lock = threading.Lock()

        def worker() -> None:
            text = json.loads(post(fake, chat())[2])["choices"][0]["message"]["content"]
            with lock:
                answers.append(text)

        threads = [threading.Thread(target=worker) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(answers) == sorted(f"s{i}" for i in range(n))
        assert len(fake.requests) == n and fake.remaining == 0


def test_keep_alive_connection_serves_several_requests(fake: FakeLLM) -> None:
    fake.add({"content": "one"}, {"content": "two words"}, {"content": "three"})
    conn = _conn(fake)
    got = []
    for stream in (False, True, False):
        conn.request("POST", "/v1/chat/completions", json.dumps(chat(stream=stream)))
        response = conn.getresponse()
        got.append((response.status, response.read()[:0]))
    conn.close()
    assert got == [(200, b"")] * 3
    assert len(fake.requests) == 3


def test_stop_does_not_wait_for_a_hanging_step() -> None:
    fake = FakeLLM([{"content": "never", "delay": 60}]).start()
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            post(fake, chat(), timeout=30)
        except (http.client.HTTPException, OSError) as e:
            outcome.append(e)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    while not fake.requests:
        time.sleep(0.01)
    fake.stop()
    t.join(timeout=20)  # the client's own timeout is 30 s: only stop() can end the call before this
    assert not t.is_alive(), "stop() left a hung call hanging"
    assert outcome, "the hung call ends with a dropped connection, not an answer"


def test_bad_json_and_unknown_route(fake: FakeLLM) -> None:
    conn = _conn(fake)
    conn.request("POST", "/v1/chat/completions", b"{nope")
    assert conn.getresponse().status == 400
    conn.close()
    conn = _conn(fake)
    conn.request("POST", "/v1/audio/speech", b"{}")
    assert conn.getresponse().status == 404
    conn.close()


@pytest.mark.slow
def test_command_line_server(tmp_path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "from a file"}]))
    log = tmp_path / "requests.jsonl"
    cmd = [sys.executable, "-m", "holon.testing.fake_llm", "--script", str(script), "--requests-log", str(log)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        host_port = url.removeprefix("http://").removesuffix("/v1")
        conn = http.client.HTTPConnection(host_port, timeout=5)
        conn.request("POST", "/v1/chat/completions", json.dumps(chat()))
        assert json.loads(conn.getresponse().read())["choices"][0]["message"]["content"] == "from a file"
        conn.close()
        assert json.loads(log.read_text().splitlines()[0]) == chat()
    finally:
        proc.terminate()
        assert proc.wait(timeout=5) == 0


@pytest.mark.slow
def test_testing_package_imports_nothing_else_from_holon() -> None:
    code = (
        "import sys, holon.testing.fake_llm; "
        "print(sorted(m for m in sys.modules if m.startswith('holon') and not m.startswith('holon.testing')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['holon']"
