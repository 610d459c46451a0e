"""``ApiClient``: the small typed HTTP client the REPL uses to talk to the daemon (RFC 0005).

Errors, all ``holon.errors`` so the CLI prints one line::

    HolonError
    ├── DaemonUnreachable     nothing answers at the URL (connection refused, timeout)
    ├── UsageError            400 / 401 (with what to do about the token) / 422
    ├── NotFoundError         404 (no such agent, event, ref)
    ├── ConflictError         409
    ├── LedgerError           500 ``ledger``
    └── ModelError            502 ``model``

The class follows the error's ``code`` (``holon.api.errors``), so a CLI command sent through the
daemon exits with the same code as the same command run in-process.

The event stream is read as server-sent events: ``stream_events`` yields ``("event", EventOut)``,
``("delta", {...})`` and ``("model", {...})`` items from a cursor and reconnects with ``Last-Event-ID`` when the
connection drops, so no event is lost or seen twice.
"""

from __future__ import annotations

import functools
import json
import ssl
import time
import uuid
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import httpx

from holon.api.token import client_token, env_token
from holon.errors import ConflictError, HolonError, LedgerError, ModelError, NotFoundError, UsageError

if TYPE_CHECKING:  # imported where used: ``holon run`` through a daemon needs none of them
    from holon.api.models import EventOut, InputAccepted
    from holon.projections.state import AgentState

__all__ = ["ApiClient", "DaemonUnreachable", "StreamItem", "home_token", "tls_for", "token_from_env"]

StreamKind: TypeAlias = Literal["open", "event", "delta", "model"]
"""What ``stream_json`` yields: ``open``, then ``event``, ``delta`` and ``model`` items."""
StreamItem: TypeAlias = "tuple[Literal['event'], EventOut] | tuple[Literal['delta', 'open', 'model'], dict[str, Any]]"
"""``open`` comes first on each (re)connection: from then on, live deltas reach this stream.
``model``: ``{"what", "state"}`` while a model child starts (``starting``, then ``ready`` or ``failed``)."""


class DaemonUnreachable(HolonError):
    """Nothing answers at the daemon's URL."""


def token_from_env(token_env: str | None) -> str | None:
    """The API token: the value of the variable ``[api] token_env`` names, else none.

    (There is no ``HOLON_API_TOKEN``: ``HOLON_API_*`` variables are settings of the ``[api]``
    section, and the token itself is never a setting.)
    """
    return env_token(token_env)


def home_token(root: Path, token_env: str | None) -> str | None:
    """The token a client of the home at ``root`` sends: ``token_env``'s value, else ``<home>/api.token``
    (what the daemon made at its first start), else none."""
    return client_token(root, token_env)


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200] or response.reason_phrase


def _code(response: httpx.Response) -> str | None:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return None


#: The error class for each API error code (``holon.api.errors``): the same exit code as in-process.
_BY_CODE: dict[str, type[HolonError]] = {
    "bad_request": UsageError,
    "invalid": UsageError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "ledger": LedgerError,
    "failed": HolonError,
}


@functools.cache
def _trusts_nothing() -> ssl.SSLContext:
    # check_hostname and CERT_REQUIRED are PROTOCOL_TLS_CLIENT's defaults; no CA is loaded.
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def tls_for(url: str) -> ssl.SSLContext | bool:
    """How an httpx client of ``url`` verifies TLS (its ``verify``).

    A plain ``http://`` URL (the local daemon, on loopback unless the operator chose otherwise)
    never negotiates TLS, so its client gets a context that trusts no certificate: it would refuse
    any TLS connection (a redirect to https, were one followed) rather than accept it unverified.
    What it saves is loading the CA bundle, which httpx does for every client by default: ~170 ms
    for the first client of a process and ~40 ms for each one after it, measured 2026-11-29; the
    first is about an eighth of a CLI command sent through the daemon. ``https`` verifies as usual.
    """
    return _trusts_nothing() if url[:7].lower() == "http://" else True


class ApiClient:
    """Calls ``/v1`` on one daemon. Agents are named by name or id, as the API accepts."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._token, self._timeout_s = token, timeout_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout_s, verify=tls_for(self.base_url)
        )

    def clone(self) -> ApiClient:
        """Another client for the same daemon (for another thread)."""
        return ApiClient(self.base_url, token=self._token, timeout_s=self._timeout_s)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing ------------------------------------------------------------------------------

    def _request(self, method: str, path: str, *, retries: int = 0, **kwargs: Any) -> httpx.Response:
        """One call; ``retries`` more attempts after a transport error (only for calls safe to
        repeat: reads, and inputs sent with an idempotency key)."""
        if method != "GET" and "json" not in kwargs and "content" not in kwargs:
            kwargs["json"] = {}  # a body-less change is still JSON: the daemon refuses "simple" requests
        for attempt in range(retries + 1):
            try:
                response = self._http.request(method, f"/v1{path}", **kwargs)
                break
            except httpx.TransportError as e:
                if attempt >= retries:
                    raise DaemonUnreachable(
                        f"the daemon at {self.base_url} does not answer ({type(e).__name__})"
                    ) from e
                time.sleep(min(0.1 * 2**attempt, 1.0))
        self._check(response)
        return response

    def _check(self, response: httpx.Response) -> None:
        status = response.status_code
        if status < 400:
            return
        if status == 401:
            raise UsageError(
                "the daemon refused the API token (it reads <home>/api.token, or the variable [api] token_env names)"
            )
        code = _code(response)
        if code == "model":
            raise ModelError(_message(response))
        if code in _BY_CODE:
            raise _BY_CODE[code](_message(response))
        if status == 404:
            raise NotFoundError(_message(response))
        if status < 500:
            raise UsageError(_message(response))
        raise HolonError(f"the daemon failed ({status}): {_message(response)}")

    def _get(self, path: str, **params: Any) -> Any:  # Any: JSON as the API returns it
        clean = {k: v for k, v in params.items() if v is not None}
        return self._request("GET", path, params=clean, retries=2).json()  # a read is safe to repeat

    def read(self, path: str, **params: Any) -> Any:
        """``GET /v1{path}``: the JSON answer (``None`` params are left out; a read is retried)."""
        return self._get(path, **params)

    def change(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """A state change (``POST``/``PATCH``/``DELETE /v1{path}``) with a JSON body; its JSON answer,
        or ``None`` for an empty one (204). Not retried: a change may not be safe to repeat."""
        response = self._request(method, path, json=body or {})
        return response.json() if response.content else None

    def dashboard_login(self) -> str:
        """A one-time login path for the dashboard (``/login?code=...``, RFC 0009): valid once, two minutes."""
        return str(self.change("POST", "/dashboard/login")["path"])

    # --- agents --------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return dict(self._get("/health"))

    def agents(self) -> list[AgentState]:
        from holon.projections.state import AgentState

        return [AgentState.model_validate(a) for a in self._get("/agents")]

    def create_agent(self, name: str) -> AgentState:
        from holon.projections.state import AgentState

        return AgentState.model_validate(self._request("POST", "/agents", json={"name": name}).json())

    def agent(self, agent: str) -> dict[str, Any]:
        return dict(self._get(f"/agents/{agent}"))

    def configure(self, agent: str, settings: dict[str, Any], *, unset: Sequence[str] = ()) -> AgentState:
        from holon.projections.state import AgentState

        body = {"settings": settings, "unset": list(unset)}
        return AgentState.model_validate(self._request("PATCH", f"/agents/{agent}", json=body).json())

    def abort(self, agent: str) -> bool:
        return bool(self._request("POST", f"/agents/{agent}/abort").json()["aborted"])

    def send(self, agent: str, text: str, *, idempotency_key: str | None = None) -> InputAccepted:
        """Queue an input. It carries an idempotency key (a fresh one unless given), so a dropped
        connection is retried without risk of a second input: the daemon answers a retry with the
        first acknowledgement."""
        from holon.api.models import InputAccepted

        return InputAccepted.model_validate(self.send_json(agent, text, idempotency_key=idempotency_key))

    def send_json(self, agent: str, text: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """``send``, answering the acknowledgement as JSON (``agent_id``, ``seq``, ``event_id``)."""
        key = idempotency_key or str(uuid.uuid4())
        response = self._request(
            "POST", f"/agents/{agent}/inputs", json={"text": text}, headers={"Idempotency-Key": key}, retries=3
        )
        return dict(response.json())

    # --- state and memory ----------------------------------------------------------------------

    def working_memory(self, agent: str) -> dict[str, Any]:
        return dict(self._get(f"/agents/{agent}/working-memory"))

    def work_items(self, agent: str) -> list[dict[str, Any]]:
        return list(self._get(f"/agents/{agent}/work-items"))

    def tasks(self, agent: str) -> list[dict[str, Any]]:
        return list(self._get(f"/agents/{agent}/tasks"))

    def waits(self, agent: str) -> list[dict[str, Any]]:
        return list(self._get(f"/agents/{agent}/waits"))

    def context(self, agent: str, turn: str | None = None) -> list[dict[str, Any]]:
        return list(self._get(f"/agents/{agent}/context", turn=turn))

    def search(self, agent: str, query: str, *, limit: int = 10) -> dict[str, Any]:
        return dict(self._get(f"/agents/{agent}/memory/search", q=query, limit=limit))

    def get(self, agent: str, ref: str) -> dict[str, Any]:
        return dict(self._get(f"/agents/{agent}/memory/get", ref=ref))

    def tail(
        self, agent: str | None = None, n: int = 20, *, after: int | None = None, types: tuple[str, ...] = ()
    ) -> list[EventOut]:
        """The last ``n`` events, or with ``after`` the first ``n`` after that seq; ``types`` filters."""
        from holon.api.models import EventOut

        params = {"n": n, "agent": agent, "after": after, "type": list(types) or None}
        return [EventOut.model_validate(e) for e in self._get("/ledger/tail", **params)]

    def status(self) -> dict[str, Any]:
        """The daemon's status (``GET /v1/status``): per agent, what it is doing right now."""
        return dict(self._get("/status"))

    def agent_status(self, agent: str) -> dict[str, Any]:
        """One agent's live status (paused, running, waiting on what, asleep until when, failed)."""
        return dict(self._get(f"/agents/{agent}/status"))

    def head(self, agent: str) -> int:
        """The ledger head now: a cursor from which ``stream_events`` shows only what comes next."""
        return int(self._get(f"/agents/{agent}/events", stream="false", limit=1, after=2**62)["head"])

    # --- durable memory and proposals (RFC 0006) ----------------------------------------------

    def proposals(self, status: str = "pending") -> list[dict[str, Any]]:
        return self._get("/proposals", status=status)

    def proposal(self, ref: str) -> dict[str, Any]:
        return self._get(f"/proposals/{_segment(ref)}")

    def accept(self, ref: str, text: str | None = None) -> dict[str, Any]:
        body = {"text": text} if text is not None else {}
        return self._request("POST", f"/proposals/{_segment(ref)}/accept", json=body).json()

    def dismiss(self, ref: str, reason: str = "") -> dict[str, Any]:
        return self._request("POST", f"/proposals/{_segment(ref)}/dismiss", json={"reason": reason}).json()

    # --- the event stream ----------------------------------------------------------------------

    def stream_events(self, agent: str, after: int, *, retries: int = 5) -> Generator[StreamItem, None, None]:
        """``open``, then events after ``after`` and live deltas, until the caller stops iterating.

        A dropped connection is resumed from the last event seen (``Last-Event-ID``); after
        ``retries`` failed reconnects in a row, ``DaemonUnreachable``.
        """
        import contextlib

        from holon.api.models import EventOut

        with contextlib.closing(self.stream_json(agent, after, retries=retries)) as items:
            for kind, data in items:
                if kind == "event":
                    yield kind, EventOut.model_validate(data)
                else:
                    yield kind, data

    def stream_json(
        self, agent: str, after: int, *, retries: int = 5
    ) -> Generator[tuple[StreamKind, dict[str, Any]], None, None]:
        """``stream_events`` with each event as the JSON the API sends (``seq``, ``type``,
        ``turn_id``, ``payload``, ...), for a client that needs no models."""
        cursor, failures = after, 0
        while True:
            headers = {"Accept": "text/event-stream", "Last-Event-ID": str(cursor)}
            try:
                with self._http.stream(
                    "GET", f"/v1/agents/{agent}/events", headers=headers, timeout=httpx.Timeout(10.0, read=None)
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        self._check(response)
                    failures = 0
                    yield "open", {}
                    for kind, data in _sse(response.iter_lines()):
                        match kind:
                            case "event":
                                event = json.loads(data)
                                cursor = int(event["seq"])
                                yield "event", event
                            case "delta" | "model":
                                yield kind, json.loads(data)
            except httpx.TransportError as e:
                failures += 1
                if failures > retries:
                    raise DaemonUnreachable(f"lost the event stream of {agent} at {self.base_url}") from e
                time.sleep(min(0.2 * 2**failures, 2.0))


def _segment(ref: str) -> str:
    """``ref`` as one path segment (an id typed by the operator may hold anything)."""
    from urllib.parse import quote

    return quote(ref, safe="")


def _sse(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """(event name, data) of each server-sent event; comments and ids are skipped."""
    name = "message"
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield name, "\n".join(data)
            name, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
