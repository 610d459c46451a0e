"""The litellm-backed provider: the only module in holon that imports litellm.

litellm costs ~3 s and ~170 MiB to import, so it is imported lazily on the first ``complete()``
(or ``classify()``), after the environment is set up to keep it offline: the bundled model cost
map, the bundled Anthropic beta headers, and tiktoken's BPE files from inside litellm's package.
litellm's own stderr handlers are removed so its records reach the root logger (and holon's log
configuration) like any other library's.

Every failure leaves ``complete()`` as a ``holon.errors.ModelError`` built by ``classify``; the
provider never retries (``max_retries=0``): retrying is ``holon.runtime.providers.retry``'s job.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import logging
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from email.utils import parsedate_to_datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from holon.errors import HolonError, ModelError, ModelErrorKind, ModelKeyMissing
from holon.ledger.events import ToolCallSpec, Usage
from holon.runtime.providers.base import ModelReply, ModelRequest, ModelSettings, ModelWindow, TextSink

__all__ = ["known_context_window", "LiteLLMProvider", "api_key_for", "classify", "deadline_error"]

#: Sent as the API key to servers that need none (local OpenAI-compatible servers).
PLACEHOLDER_API_KEY = "not-needed"
_LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
_MAX_DETAIL = 300


@functools.cache
def _litellm() -> ModuleType:
    """Import litellm once, offline and quiet."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        tokenizers = _litellm_tokenizers_dir()
        if tokenizers is not None:
            os.environ["TIKTOKEN_CACHE_DIR"] = str(tokenizers)
    import litellm

    litellm.suppress_debug_info = True
    for name in _LITELLM_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.propagate = True
    return litellm


def _litellm_tokenizers_dir() -> Path | None:
    """litellm ships tiktoken's BPE files; ``find_spec`` locates them without importing litellm."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
    return path if path.is_dir() else None


class LiteLLMProvider:
    """``Provider`` over ``litellm.acompletion``: any model litellm knows, or a local server.

    ``env`` is where ``ModelSettings.api_key_env`` is looked up (``os.environ`` by default).
    """

    def __init__(self, *, env: Mapping[str, str] | None = None) -> None:
        self._env = env

    async def context_window(self, model: str) -> ModelWindow:
        """``known_context_window`` in a thread (its first call imports litellm: seconds)."""
        return ModelWindow(await asyncio.to_thread(known_context_window, model))

    async def complete(self, request: ModelRequest, *, on_text: TextSink | None = None) -> ModelReply:
        return await self.complete_with_key(request, api_key_for(request.settings, self._env), on_text=on_text)

    async def complete_with_key(
        self, request: ModelRequest, api_key: str | None, *, on_text: TextSink | None = None
    ) -> ModelReply:
        """``complete`` with the API key already looked up (the model process gets it this way).

        The whole call, streaming included, ends by ``settings.deadline_s`` (wall clock): litellm's
        ``timeout`` only bounds each silence, so a server that sends keep-alive pings, or a byte now
        and then, would otherwise hold the call, and the agent's turn, forever."""
        settings = request.settings
        _litellm()  # the first import takes seconds: not the call's time
        deadline = asyncio.timeout(settings.deadline_s)
        try:
            async with deadline:
                return await self._complete(request, api_key, on_text)
        except TimeoutError as e:
            if not deadline.expired():
                raise
            raise deadline_error(settings) from e

    async def _complete(self, request: ModelRequest, api_key: str | None, on_text: TextSink | None) -> ModelReply:
        settings = request.settings
        litellm = _litellm()
        kwargs = _call_kwargs(request, api_key)
        secrets = (api_key,) if api_key and api_key != PLACEHOLDER_API_KEY else ()
        started = time.perf_counter()
        try:
            if on_text is None:
                response = await litellm.acompletion(**kwargs)
            else:
                stream = await litellm.acompletion(**kwargs, stream=True, stream_options={"include_usage": True})
        except Exception as e:
            raise classify(e, model=settings.model, api_base=settings.api_base, secrets=secrets) from e
        if on_text is not None:
            # Outside the try above: an error raised by on_text is the caller's and propagates as is.
            chunks = [chunk async for chunk in _guarded(stream, on_text, settings, secrets)]
            try:
                response = litellm.stream_chunk_builder(chunks, messages=request.messages)
            except Exception as e:
                raise classify(e, model=settings.model, api_base=settings.api_base, secrets=secrets) from e
            if response is None:
                raise ModelError(f"{settings.model}: server error: the stream ended with no data", kind="server")
        latency_ms = (time.perf_counter() - started) * 1000.0
        return _to_reply(response, settings, latency_ms, _cost(litellm, response, settings.model))


def deadline_error(settings: ModelSettings) -> ModelError:
    """The error of a call cut at its wall-clock deadline: a timeout, retried like one."""
    where = f" ({_USERINFO.sub('//', settings.api_base)})" if settings.api_base else ""
    return ModelError(
        f"{settings.model}: timed out{where}: no complete reply within the call deadline of "
        f"{settings.deadline_s:g} s ([model] call_deadline_s)",
        kind="timeout",
    )


def api_key_for(settings: ModelSettings, env: Mapping[str, str] | None = None) -> str | None:
    """The key for ``settings`` from the variable it names (``env``, else ``os.environ``), looked
    up now, at call time. ``env`` is usually a ``KeyLookup``: the environment, then the home's
    secrets file; its message for a missing key says whose environment and how to fix it."""
    if settings.api_key_env:
        name = settings.api_key_env
        source = os.environ if env is None else env
        try:
            value = source.get(name)
        except HolonError as e:  # a damaged secrets file: the turn waits for the operator's fix
            raise ModelKeyMissing(f"{settings.model}: the API key {name} cannot be read: {e}") from None
        if not value:
            missing = getattr(source, "missing", None)
            why = missing(name) if callable(missing) else f"the API key variable {name} is not set in the environment"
            raise ModelKeyMissing(f"{settings.model}: {why}")
        return value
    return PLACEHOLDER_API_KEY if settings.api_base else None


def _call_kwargs(request: ModelRequest, api_key: str | None) -> dict[str, Any]:
    """Keyword arguments for ``litellm.acompletion`` (JSON-ish values, hence Any)."""
    s = request.settings
    kwargs: dict[str, Any] = {
        "model": s.model,
        "messages": request.messages,
        "timeout": s.timeout_s,
        "max_retries": 0,  # the openai SDK would retry twice on its own; retry.py owns the policy
    }
    if request.tools:
        kwargs["tools"] = request.tools
    if s.api_base:
        kwargs["api_base"] = s.api_base
    if api_key is not None:
        kwargs["api_key"] = api_key
    if s.temperature is not None:
        kwargs["temperature"] = s.temperature
    if s.max_output_tokens is not None:
        kwargs["max_tokens"] = s.max_output_tokens
    return kwargs


async def _guarded(
    stream: Any, on_text: TextSink, settings: ModelSettings, secrets: tuple[str, ...]
) -> AsyncIterator[Any]:
    """Yield stream chunks, feeding text deltas to ``on_text``.

    Errors from the stream are classified here; an error raised by ``on_text`` is the caller's
    bug and propagates untouched. ``stream`` is litellm's ``CustomStreamWrapper``.
    """
    iterator = stream.__aiter__()
    try:
        while True:
            try:
                chunk = await iterator.__anext__()
            except StopAsyncIteration:
                return
            except Exception as e:
                raise classify(e, model=settings.model, api_base=settings.api_base, secrets=secrets) from e
            yield chunk
            choices = getattr(chunk, "choices", None) or []
            text = getattr(getattr(choices[0], "delta", None), "content", None) if choices else None
            if text:
                on_text(text)
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            # Closing a broken stream must not mask the error that broke it.
            with contextlib.suppress(Exception):
                await aclose()


def _to_reply(response: Any, settings: ModelSettings, latency_ms: float, cost: float | None) -> ModelReply:
    """Translate litellm's ``ModelResponse`` (an untyped pydantic object, hence Any)."""
    choices = getattr(response, "choices", None) or []
    if not choices:
        raise ModelError(f"{settings.model}: server error: the reply has no choices", kind="server")
    choice = choices[0]
    message = getattr(choice, "message", None)
    content = getattr(message, "content", None)
    calls = []
    for tc in getattr(message, "tool_calls", None) or []:
        fn = getattr(tc, "function", None)
        calls.append(
            ToolCallSpec(
                call_id=getattr(tc, "id", None) or f"call_{uuid.uuid4().hex[:16]}",
                tool=getattr(fn, "name", None) or "",
                arguments=getattr(fn, "arguments", None) or "",
            )
        )
    return ModelReply(
        content=content if isinstance(content, str) else None,
        tool_calls=calls,
        finish_reason=getattr(choice, "finish_reason", None),
        usage=_usage(getattr(response, "usage", None)),
        model=settings.model,
        cost_usd=cost,
        latency_ms=latency_ms,
    )


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()

    def count(obj: Any, name: str) -> int:
        value = getattr(obj, name, None)
        return max(0, int(value)) if isinstance(value, int | float) else 0

    prompt, completion = count(usage, "prompt_tokens"), count(usage, "completion_tokens")
    total = count(usage, "total_tokens") or prompt + completion
    details = getattr(usage, "prompt_tokens_details", None)
    cached = count(details, "cached_tokens") if details is not None else 0
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total, cached_tokens=cached)


def _cost(litellm: ModuleType, response: Any, model: str) -> float | None:
    """USD cost from litellm's bundled price map; None for models it does not price."""
    try:
        cost = litellm.completion_cost(completion_response=response, model=model)
    except Exception:  # unmapped models raise; an unknown cost is not an error
        return None
    return float(cost) if isinstance(cost, int | float) and cost >= 0 else None


# -- classification -------------------------------------------------------------------------------

_CONNECTION_TEXT = re.compile(
    r"connection (error|refused|reset|aborted)|connect call failed|cannot connect|failed to connect"
    r"|server disconnected|name or service not known|network is unreachable",
    re.IGNORECASE,
)
_AUTH_TEXT = re.compile(
    r"missing credentials|api[_ ]key client option must be set|(?:invalid|incorrect) api key|no api key", re.IGNORECASE
)
_OVERFLOW_TEXT = re.compile(r"maximum context length|context[_ ]length[_ ]exceeded|context window", re.IGNORECASE)
_PREFIX = re.compile(r"^\s*(?:litellm\.)?\w*(?:Error|Exception|Timeout)\s*(?::|-)\s*")
_SECRET_TEXT = re.compile(
    r"\b(?:sk|pk|rk|key)-[A-Za-z0-9_\-]{6,}|\bBearer\s+\S+|\bapi[_-]?key\s*[=:]\s*\S+", re.IGNORECASE
)

_USERINFO = re.compile(r"//[^/@]*@")

_LABELS: dict[ModelErrorKind, str] = {
    "rate_limit": "rate limited",
    "timeout": "timed out",
    "server": "server error",
    "connection": "connection failed",
    "context_overflow": "context window exceeded",
    "auth": "authentication failed",
    "bad_request": "request rejected",
    "unknown": "failed",
}


def classify(
    exc: BaseException, *, model: str | None = None, api_base: str | None = None, secrets: Iterable[str] = ()
) -> ModelError:
    """Map a litellm/openai/transport exception to a ``ModelError`` with a ``kind``.

    Branches on ``status_code`` as well as the class: litellm reports a refused connection as an
    ``InternalServerError`` (500) and some 401s as ``BadRequestError``. The message is one line,
    names the model (and ``api_base`` when the server could not be reached or was too slow), and
    has ``secrets`` and anything that looks like a key redacted.
    """
    if isinstance(exc, ModelError):
        return exc
    kind = _kind(exc)
    # litellm invents statuses (500, 408) for failures that never got an HTTP answer; drop them.
    status = None if kind in {"timeout", "connection"} else _status(exc)
    if kind == "auth" and status not in {401, 403}:
        status = None
    retry_after = _retry_after(exc) if kind == "rate_limit" else None
    label = _LABELS[kind] + (f" (HTTP {status})" if status is not None else "")
    if api_base and kind in {"timeout", "connection"}:
        label += f" ({_USERINFO.sub('//', api_base)})"
    message = f"{model}: {label}" if model else label
    detail = _detail(exc, secrets)
    if detail:
        message += f": {detail}"
    if retry_after is not None:
        message += f" (retry after {retry_after:g} s)"
    return ModelError(message, kind=kind, status=status, retry_after_s=retry_after)


def _kind(exc: BaseException) -> ModelErrorKind:
    litellm = _litellm()
    import openai

    status = _status(exc)
    text = str(exc)
    if isinstance(exc, litellm.ContextWindowExceededError) or (
        status in {400, 413, 422, None} and _OVERFLOW_TEXT.search(text)
    ):
        return "context_overflow"
    if isinstance(exc, openai.RateLimitError) or status == 429:
        return "rate_limit"
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError) or status in {401, 403}:
        return "auth"
    causes = list(_causes(exc))
    if status == 408 or any(isinstance(c, openai.APITimeoutError | TimeoutError) for c in causes):
        return "timeout"
    if any(isinstance(c, openai.APIConnectionError | ConnectionError) for c in causes) or _CONNECTION_TEXT.search(text):
        return "connection"
    if _AUTH_TEXT.search(text):  # e.g. no key at all: the SDK refuses before any request is sent
        return "auth"
    if isinstance(exc, openai.InternalServerError) or (status is not None and status >= 500):
        return "server"
    if isinstance(exc, openai.BadRequestError | openai.NotFoundError | openai.UnprocessableEntityError) or (
        status is not None and 400 <= status < 500
    ):
        return "bad_request"
    return "unknown"


def _causes(exc: BaseException) -> Iterable[BaseException]:
    """The exception, then what caused it (``__cause__``/``__context__``/litellm's ``original_exception``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 20:
        seen.add(id(current))
        yield current
        original = getattr(current, "original_exception", None)
        current = (
            current.__cause__ or current.__context__ or (original if isinstance(original, BaseException) else None)
        )


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, str) and status.isdigit():
        status = int(status)
    return status if isinstance(status, int) and 100 <= status <= 599 else None


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date), if sent."""
    for source in (getattr(exc, "litellm_response_headers", None), getattr(exc, "headers", None)):
        headers = _lower_headers(source)
        if headers:
            break
    else:
        headers = _lower_headers(getattr(getattr(exc, "response", None), "headers", None))
    try:
        if "retry-after-ms" in headers:
            return max(0.0, float(headers["retry-after-ms"]) / 1000.0)
        if "retry-after" in headers:
            value = headers["retry-after"].strip()
            try:
                return max(0.0, float(value))
            except ValueError:
                return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None
    return None


def _lower_headers(headers: Any) -> dict[str, str]:
    """Header names lower-cased; accepts httpx.Headers, dicts or None (hence Any)."""
    try:
        return {str(k).lower(): str(v) for k, v in dict(headers or {}).items()}
    except (TypeError, ValueError):
        return {}


def _detail(exc: BaseException, secrets: Iterable[str]) -> str:
    """The provider's own words, without litellm's class-name prefixes, on one line, redacted."""
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    text = " ".join(str(text).split())
    while (stripped := _PREFIX.sub("", text, count=1)) != text:
        text = stripped
    text = text.replace("OpenAIException - ", "")
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    text = _SECRET_TEXT.sub("[redacted]", text)
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 3] + "..."


def known_context_window(model: str) -> int | None:
    """The input window litellm's bundled model map gives for ``model``, or ``None`` if unknown."""
    try:
        info = _litellm().get_model_info(model)
    except Exception:  # unknown and custom names raise assorted errors; all mean "unknown"
        return None
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return int(window) if isinstance(window, int) and window > 0 else None


class LiteLLMEmbedder:
    """Any embedding model litellm reaches (``[memory] embeddings``), for MemorySearch."""

    def __init__(self, model: str, *, api_base: str | None = None, api_key_env: str | None = None) -> None:
        self.name = model
        self._api_base = api_base
        self._api_key_env = api_key_env

    def embed(self, texts: Iterable[str]) -> list[list[float]]:
        # The key as LiteLLMProvider finds it: a named variable that is unset is an error (litellm
        # would fall back to OPENAI_API_KEY and send it to api_base); a server given by api_base
        # without a key variable gets a placeholder.
        label = f"embedding model {self.name}"
        api_key = PLACEHOLDER_API_KEY if self._api_base else None
        if self._api_key_env:
            api_key = os.environ.get(self._api_key_env)
            if not api_key:
                raise ModelError(
                    f"{label}: the API key variable {self._api_key_env} is not set in the environment", kind="auth"
                )
        litellm = _litellm()
        kwargs: dict[str, Any] = {"model": self.name, "input": list(texts)}
        if self._api_base:
            kwargs["api_base"] = self._api_base
        if api_key is not None:
            kwargs["api_key"] = api_key
        try:
            response = litellm.embedding(**kwargs)
        except Exception as e:  # litellm raises many types; classify names the kind, redacted
            secrets = (api_key,) if api_key and api_key != PLACEHOLDER_API_KEY else ()
            raise classify(e, model=label, api_base=self._api_base, secrets=secrets) from e
        return [list(item["embedding"]) for item in response.data]
