"""An OpenAI-compatible face: ``POST /v1/chat/completions`` and ``GET /v1/models`` (RFC 0005, "For programs").

Any OpenAI client talks to a persistent agent: ``model`` is the agent's name (``GET /v1/models``
lists them), ``api_key`` is the daemon's token (sent as ``Authorization: Bearer``, checked by
``guard.BearerAuth`` like every route), ``base_url`` is ``http://127.0.0.1:7878/v1``.

The agent keeps its own memory and ledger, so the client's history is **not replayed**: only the
new input is delivered. The rule: the trailing run of ``user`` messages (everything after the last
message of another role), their text joined by blank lines, is one input; ``system`` messages and
earlier turns are ignored (the agent has its own prompt and remembers its own conversation). A
request whose last message is not from the user is a 400. An ``Idempotency-Key`` header (or, else,
``X-Client-Request-Id``) makes a retry deliver nothing new and answer with the same turn.

Not streaming, the answer is a ``chat.completion`` once the turn settles (at most ``MAX_WAIT_S``,
else 504 with the URL to poll). Streaming (``stream: true``) answers ``chat.completion.chunk``
server-sent events as the model generates text, then ``data: [DONE]``; the part of the reply the
stream missed is sent when the turn settles, so the chunks end with the whole reply (before it, any
text of rounds that went on to call tools). A failed turn is an error
(502 ``turn_failed``, or an ``error`` event in a stream) carrying its reason; such answers and the
504 carry ``x-should-retry: false`` so that the OpenAI SDK does not resend the input by itself.
Errors are OpenAI's shape: ``{"error": {"message", "type", "code", "param"}}``.

Bodies are parsed here rather than by FastAPI, so that every bad body gets OpenAI's error shape.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sse_starlette import EventSourceResponse

from holon.api.agents import api_input
from holon.api.errors import RETRY_AFTER_S
from holon.api.messages import MAX_WAIT_S
from holon.api.port import DaemonPort
from holon.api.replies import InputOutcome, RoundEnd, await_outcome, follow, input_outcome, overlap, subscription
from holon.errors import ConflictError, HolonError, NotFoundError, StorageUnavailable
from holon.ledger import Event
from holon.projections.state import AgentState
from holon.runtime.ingress import check_idempotency_key, check_text
from holon.runtime.status import is_internal

__all__ = ["ChatRequest", "new_input", "openai_router"]

MAX_MESSAGES = 10_000
MAX_INPUT_CHARS = 200_000
"""As ``POST /inputs``: the delivered text is one input."""


class _Loose(BaseModel):
    # OpenAI clients send many fields holon has no use for (temperature, tools, ...): ignored.
    model_config = ConfigDict(extra="allow")


class ContentPart(_Loose):
    type: str = Field(max_length=64)
    text: str | None = None


class ChatMessage(_Loose):
    role: str = Field(min_length=1, max_length=64)
    content: str | list[ContentPart] | None = None


class StreamOptions(_Loose):
    include_usage: bool = False


class ChatRequest(_Loose):
    model: str = Field(min_length=1, max_length=128, description="The agent's name (see GET /v1/models).")
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(None, ge=1, le=1, description="Only one choice: an agent gives one reply.")


_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["model", "messages"],
    "properties": {
        "model": {"type": "string", "description": "The agent's name (GET /v1/models lists them)."},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role"],
                "properties": {"role": {"type": "string"}, "content": {"type": ["string", "array", "null"]}},
            },
            "description": "Only the trailing user messages are delivered, as one new input.",
        },
        "stream": {"type": "boolean"},
    },
}


class ChatError(Exception):
    """An answer in OpenAI's error shape."""

    def __init__(
        self, status: int, message: str, *, type_: str = "invalid_request_error", code: str | None = None,
        param: str | None = None, retry: bool = True,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.param, self.retry = (
            status, message, type_, code, param, retry,
        )  # fmt: skip

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "code": self.code, "param": self.param}}

    def response(self) -> JSONResponse:
        headers = {} if self.retry else {"x-should-retry": "false"}
        if self.status == 503:
            headers["Retry-After"] = str(RETRY_AFTER_S)
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


def _from_holon(e: HolonError) -> ChatError:
    if isinstance(e, NotFoundError):
        return ChatError(404, e.message, code="model_not_found", param="model")
    if isinstance(e, ConflictError):
        return ChatError(409, e.message, code="conflict", retry=False)
    if isinstance(e, StorageUnavailable):  # lost mid-run: nothing committed; retry with the same key
        return ChatError(503, e.message, type_="server_error", code="storage_unavailable")
    return ChatError(400, e.message, code="bad_request")


def _text(message: ChatMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(part.text or "" for part in message.content or () if part.type in ("text", "input_text"))


def new_input(messages: list[ChatMessage]) -> str:
    """The input a request delivers: its trailing user messages' text, joined by blank lines."""
    trailing: list[ChatMessage] = []
    for message in reversed(messages):
        if message.role != "user":
            break
        trailing.append(message)
    if not trailing:
        raise ChatError(400, "the last message must be from the user: it is the new input", param="messages")
    text = "\n\n".join(t for m in reversed(trailing) if (t := _text(m).strip()))
    if not text:
        raise ChatError(400, "the last user message has no text", param="messages")
    if len(text) > MAX_INPUT_CHARS:
        raise ChatError(400, f"the new input is over {MAX_INPUT_CHARS} characters", param="messages")
    return check_text(text, "the message")


async def _parse(request: Request) -> ChatRequest:
    raw = await request.body()
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise ChatError(400, f"the request body is not valid JSON: {str(e)[:120]}") from e
    if not isinstance(data, dict):
        raise ChatError(400, "the request body must be a JSON object")
    try:
        return ChatRequest.model_validate(data)
    except (ValueError, RecursionError) as e:
        if isinstance(e, ValidationError) and e.errors():
            first = e.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise ChatError(400, f"{where}: {first.get('msg', 'invalid')}", param=where or None) from e
        raise ChatError(400, "invalid request body") from e


def _key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key") or request.headers.get("x-client-request-id")
    return None if key is None else check_idempotency_key(key)


def _usage(outcome: InputOutcome) -> dict[str, int]:
    u = outcome.usage
    return {k: int(u.get(k, 0)) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}


def _holon(agent: AgentState, event: Event, outcome: InputOutcome) -> dict[str, Any]:
    """holon's own fields, beside OpenAI's (clients keep unknown fields)."""
    return {
        "agent_id": agent.agent_id, "input_seq": event.seq, "turn_id": outcome.turn_id, "status": outcome.status,
        "reason": outcome.reason, "poll": f"/v1/agents/{agent.agent_id}/messages/{event.seq}",
    }  # fmt: skip


def _failure(agent: AgentState, event: Event, outcome: InputOutcome) -> ChatError:
    poll = f"/v1/agents/{agent.agent_id}/messages/{event.seq}"
    if not outcome.settled:
        return ChatError(
            504, f"the turn did not settle within {MAX_WAIT_S:g} s; the input is queued (seq {event.seq}): GET {poll}",
            type_="timeout", code="turn_timeout", retry=False,
        )  # fmt: skip
    again = "; the input is queued again and will be retried" if outcome.requeued else ""
    return ChatError(
        502, f"turn {outcome.status}: {outcome.reason or 'no reason given'}{again}", type_="server_error",
        code=f"turn_{outcome.status}", retry=False,
    )  # fmt: skip


def _completion(agent: AgentState, event: Event, outcome: InputOutcome) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{outcome.turn_id or event.id}",
        "object": "chat.completion",
        "created": event.ts_us // 1_000_000,
        "model": agent.name,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": outcome.reply or ""},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": _usage(outcome),
        "holon": _holon(agent, event, outcome),
    }


def _chunk(agent: AgentState, event: Event, delta: dict[str, Any], finish: str | None = None) -> dict[str, str]:
    body = {
        "id": f"chatcmpl-{event.id}",
        "object": "chat.completion.chunk",
        "created": event.ts_us // 1_000_000,
        "model": agent.name,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }
    return {"data": json.dumps(body, ensure_ascii=False)}


async def _stream(
    port: DaemonPort, agent: AgentState, text: str, key: str | None, include_usage: bool
) -> AsyncIterator[dict[str, str]]:
    """The chunks of one streamed completion; the input is submitted once the subscription runs,
    so that no text of its turn is missed."""
    async with subscription(port, agent.agent_id) as queue:
        try:
            event = await port.submit_input(agent.agent_id, api_input(text, key))
        except HolonError as e:
            yield {"data": json.dumps(_from_holon(e).body(), ensure_ascii=False)}
            return
        yield _chunk(agent, event, {"role": "assistant", "content": ""})
        streamed = ""
        apart = False  # a round ended: set the next round's text apart from the previous one's
        outcome = input_outcome(port.store, agent.agent_id, event.seq)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(MAX_WAIT_S):
                async for item in follow(port, agent.agent_id, event.seq, queue):
                    if isinstance(item, InputOutcome):
                        outcome = item
                        break
                    if isinstance(item, RoundEnd):
                        apart = bool(streamed.strip())
                        continue
                    text = "\n\n" + item if apart else item
                    apart = False
                    streamed += text
                    yield _chunk(agent, event, {"content": text})
        if not outcome.settled or outcome.status in ("failed", "interrupted"):
            yield {"data": json.dumps(_failure(agent, event, outcome).body(), ensure_ascii=False)}
            return
        reply = outcome.reply or ""
        shown = overlap(streamed, reply)
        rest = reply[shown:]
        if rest and streamed and not shown:
            rest = "\n\n" + rest  # the reply is not what was streamed (text of an earlier round): set it apart
        if rest:
            yield _chunk(agent, event, {"content": rest})
        yield _chunk(agent, event, {}, "stop")
        if include_usage:
            usage = json.loads(_chunk(agent, event, {})["data"]) | {"choices": [], "usage": _usage(outcome)}
            yield {"data": json.dumps(usage)}
        yield {"data": "[DONE]"}


def _model(agent: AgentState) -> dict[str, Any]:
    return {"id": agent.name, "object": "model", "created": agent.created_us // 1_000_000, "owned_by": "holon"}


def openai_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(prefix="/v1", tags=["openai"])
    store = port.store

    @r.post(
        "/chat/completions",
        openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": _REQUEST_SCHEMA}}}},
        responses={200: {"content": {"text/event-stream": {}}, "description": "chat.completion, or chunks (stream)"}},
    )
    async def chat_completions(request: Request) -> Any:
        """OpenAI's Chat Completions against a persistent agent (``model`` = its name): only the
        trailing user messages are delivered, as one new input; the agent's memory does the rest."""
        try:
            body = await _parse(request)
            if body.n not in (None, 1):
                raise ChatError(400, "n must be 1: an agent gives one reply", param="n")
            text = new_input(body.messages)
            agent = store.agent(body.model)
            key = _key(request)
            if body.stream:
                include = bool(body.stream_options and body.stream_options.include_usage)
                return EventSourceResponse(_stream(port, agent, text, key, include), ping=15)
            event = await port.submit_input(agent.agent_id, api_input(text, key))
            outcome = await await_outcome(port, agent.agent_id, event.seq, MAX_WAIT_S, gone=request.is_disconnected)
            if not outcome.settled or outcome.status in ("failed", "interrupted"):
                raise _failure(agent, event, outcome)
            return JSONResponse(_completion(agent, event, outcome))
        except ChatError as e:
            return e.response()
        except HolonError as e:
            return _from_holon(e).response()

    @r.get("/models")
    async def models() -> dict[str, Any]:
        """The agents, as OpenAI models: pass a name as ``model`` (holon's internal agents are left
        out, as in ``agent list``; they still answer when named)."""
        return {"object": "list", "data": [_model(a) for a in store.agents() if not is_internal(a)]}

    @r.get("/models/{model}")
    async def model(model: str) -> Any:
        try:
            return _model(store.agent(model))
        except NotFoundError as e:
            return _from_holon(e).response()

    return r
