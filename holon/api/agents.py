"""``/v1/agents``: create, list, show, configure, pause/resume/abort, delete; inputs; an agent's state.

Changes go through the ``DaemonPort`` (durable before the answer, and the host is woken); reads
of projections go through ``port.store`` with the same functions the CLI calls.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Response

from holon.api.models import AddTimer, AgentDetail, ConfigureAgent, CreateAgent, HookPath, InputAccepted, InputIn
from holon.api.port import DaemonPort
from holon.clock import parse_iso
from holon.context.manifests import turn_contexts
from holon.errors import NotFoundError, UsageError
from holon.memory.access import search_memory
from holon.memory.get import DEFAULT_MAX_CHARS, MAX_MAX_CHARS, MIN_MAX_CHARS, MemoryGetRequest, memory_get
from holon.projections import Store
from holon.projections.state import AgentState, TaskProjection, TimerProjection, WaitProjection, WorkItemState
from holon.runtime.agents import DEFAULT_AGENT, missing_agent
from holon.runtime.embedders import embedder_from_settings
from holon.runtime.ingress import InputSpec, check_idempotency_key
from holon.runtime.status import is_internal, model_label, status_entry

__all__ = ["AllQ", "IdempotencyHeader", "agent_router", "api_input", "one_key"]

AllQ = Annotated[bool, Query(description="Include holon's internal agents (holon diagnose's).")]
StatusQ = Annotated[str | None, Query(max_length=64, description="Only rows with this status.")]
IdempotencyHeader = Annotated[
    str | None,
    Header(alias="Idempotency-Key", description="Makes a retry safe: the same key returns the first acknowledgement."),
]


def one_key(header: str | None, field: str | None) -> str | None:
    """The request's idempotency key, from the header or the body field (both: they must agree)."""
    if header is not None and field is not None and header != field:
        raise UsageError("the Idempotency-Key header and the idempotency_key field differ; send one key")
    key = header if header is not None else field
    return None if key is None else check_idempotency_key(key)


def api_input(text: str, idempotency_key: str | None) -> InputSpec:
    """An operator's input sent through the API (``POST .../inputs``, ``.../messages``, chat completions)."""
    return InputSpec(
        text, origin="operator:api", authority="operator", sender="operator", channel="api",
        idempotency_key=idempotency_key,
    )  # fmt: skip


def _configure_ref(store: Store, agent: str) -> str:
    """The agent a configure applies to: its id, or the name of the default agent that the
    configure creates (``configure_or_create_default``). Any other unknown name is a 404."""
    try:
        return store.agent(agent).agent_id
    except NotFoundError:
        if agent != DEFAULT_AGENT:
            raise missing_agent(agent) from None
        return agent


def agent_router(port: DaemonPort) -> APIRouter:
    r = APIRouter(prefix="/v1/agents", tags=["agents"])
    store = port.store

    def find(agent: str) -> AgentState:
        return store.agent(agent)

    @r.get("", response_model=list[AgentState])
    async def list_agents(all: AllQ = False) -> list[AgentState]:
        """Every agent, but holon's own (``holon diagnose``'s) unless ``all=true``."""
        return [a for a in store.agents() if all or not is_internal(a)]

    @r.post("", status_code=201, response_model=AgentState)
    async def create(body: CreateAgent) -> AgentState:
        return port.create_agent(
            body.name,
            template=body.template,
            workspace=body.workspace,
            schedule=body.schedule,
            prompt=body.prompt,
            settings=body.settings,
        )

    @r.get("/{agent}", response_model=AgentDetail)
    async def show(agent: str) -> AgentDetail:
        a = find(agent)
        counts = store.counts(a.agent_id)
        status = status_entry(port.agent_status(a), model=model_label(a, store.settings.model.model))
        return AgentDetail(agent=a, status=status, working_memory=store.working_memory(a.agent_id), counts=counts)

    @r.get("/{agent}/status")
    async def status(agent: str) -> dict[str, Any]:
        """What the agent is doing now, as the daemon sees it (one entry of ``GET /v1/status``):
        idle, running, waiting (on what), asleep (until when: its sleep, timer or budget), paused,
        aborted, or failed (its last error; with ``next_wake`` its retry time); ``next_wake`` is
        ``next_wake_us`` as an ISO time. The same decision as every other view
        (``holon.runtime.status``)."""
        a = find(agent)
        return status_entry(port.agent_status(a), model=model_label(a, store.settings.model.model))

    @r.patch("/{agent}", response_model=AgentState)
    async def configure(agent: str, body: ConfigureAgent) -> AgentState:
        """Change an agent's settings; the default agent ``assistant`` is created by its first."""
        return port.configure_agent(_configure_ref(store, agent), dict(body.settings), unset=list(body.unset))

    @r.post("/{agent}/pause", response_model=AgentState)
    async def pause(agent: str) -> AgentState:
        return port.pause(find(agent).agent_id)

    @r.post("/{agent}/resume", response_model=AgentState)
    async def resume(agent: str) -> AgentState:
        return port.resume(find(agent).agent_id)

    @r.post("/{agent}/abort")
    async def abort(agent: str) -> dict[str, bool]:
        """Abort the agent's running turn (it settles aborted): ``aborted`` is true when it did. A
        turn running on another node (RFC 0008) is asked to stop through the ledger and awaited."""
        return {"aborted": await port.abort_anywhere(find(agent).agent_id)}

    @r.delete("/{agent}", status_code=204, response_class=Response)
    async def delete(agent: str) -> Response:
        port.delete(find(agent).agent_id)
        return Response(status_code=204)

    @r.post("/{agent}/inputs", status_code=202, response_model=InputAccepted)
    async def send_input(agent: str, body: InputIn, idempotency_key: IdempotencyHeader = None) -> InputAccepted:
        """Queue an input (durable when answered). With an ``Idempotency-Key`` (header or
        ``idempotency_key``), a retry gets the first acknowledgement back, and the same key with
        another text is a 409."""
        a = find(agent)
        event = await port.submit_input(
            a.agent_id, api_input(body.text, one_key(idempotency_key, body.idempotency_key))
        )
        return InputAccepted(agent_id=a.agent_id, seq=event.seq, event_id=event.id)

    @r.get("/{agent}/working-memory")
    async def working_memory(agent: str) -> dict[str, Any]:
        return store.working_memory(find(agent).agent_id)

    @r.get("/{agent}/work-items", response_model=list[WorkItemState])
    async def work_items(agent: str, status: StatusQ = None) -> list[WorkItemState]:
        return store.work_items(agent_id=find(agent).agent_id, status=status)

    @r.get("/{agent}/tasks", response_model=list[TaskProjection])
    async def tasks(agent: str, status: StatusQ = None) -> list[TaskProjection]:
        return store.tasks(agent_id=find(agent).agent_id, status=status)

    @r.get("/{agent}/waits", response_model=list[WaitProjection])
    async def waits(agent: str, status: StatusQ = None) -> list[WaitProjection]:
        return store.waits(agent_id=find(agent).agent_id, status=status)

    @r.get("/{agent}/timers", response_model=list[TimerProjection])
    async def timers(agent: str, status: StatusQ = None) -> list[TimerProjection]:
        return store.timers(agent_id=find(agent).agent_id, status=status)

    @r.post("/{agent}/timers", status_code=201, response_model=TimerProjection)
    async def add_timer(agent: str, body: AddTimer) -> TimerProjection:
        """Another schedule for the agent (it becomes a background agent, with per-day budgets, if
        it was not); a running daemon's timer fires without a restart. A bad schedule is a 400."""
        return port.add_timer(find(agent).agent_id, body.schedule, prompt=body.prompt)

    @r.delete("/{agent}/timers/{timer_id}", response_model=TimerProjection)
    async def cancel_timer(agent: str, timer_id: str) -> TimerProjection:
        """Cancel one of the agent's timers; it never fires again. 404 for a timer the agent does
        not have, 409 for one already over (a one-shot that fired, or cancelled)."""
        return port.cancel_timer(find(agent).agent_id, timer_id)

    @r.get("/{agent}/context")
    async def context(
        agent: str,
        turn: Annotated[str | None, Query(max_length=128, description="Turn id or its suffix (default: last).")] = None,
        render: Annotated[bool, Query(description="Include the exact prompt that was sent.")] = False,
    ) -> list[dict[str, Any]]:
        """What the model saw in each round of a turn, and why (as ``holon context show --json``)."""
        items = turn_contexts(store, find(agent), turn)
        if not render:
            for item in items:
                item.pop("prompt")
        return items

    @r.get("/{agent}/memory/search")
    async def memory_search(
        agent: str,
        q: Annotated[str, Query(max_length=2_000, description="Plain words; any text is a valid query.")],
        kind: Annotated[list[str] | None, Query(description="Only these kinds (repeatable).")] = None,
        since: Annotated[str | None, Query(max_length=64, description="ISO 8601 time.")] = None,
        until: Annotated[str | None, Query(max_length=64, description="ISO 8601 time.")] = None,
        work_item: Annotated[str | None, Query(max_length=128)] = None,
        scope: Literal["agent", "operator", "workspace"] | None = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 10,
    ) -> dict[str, Any]:
        """MemorySearch exactly as the agent's ``memory_search`` tool (same scopes, same ranking)."""
        result = search_memory(
            store,
            find(agent),
            q,
            kinds=tuple(kind or ()),
            since_us=parse_iso(since, field="since"),
            until_us=parse_iso(until, field="until"),
            work_item_id=work_item,
            scopes=(scope,) if scope else (),
            limit=limit,
            embedder=embedder_from_settings(store.settings),
        )
        return result.as_dict()

    @r.get("/{agent}/memory/get")
    async def memory_read(
        agent: str,
        ref: Annotated[str, Query(max_length=2_000, description="file:agent/self.md, event:<seq>, episode:<id>, ...")],
        mode: Annotated[str | None, Query(max_length=16, description="full, headers, section, tail or lines.")] = None,
        heading: Annotated[str | None, Query(max_length=500)] = None,
        start: Annotated[int | None, Query(ge=1, le=10_000_000)] = None,
        end: Annotated[int | None, Query(ge=1, le=10_000_000)] = None,
        lines: Annotated[int | None, Query(ge=1, le=10_000_000)] = None,
        expand: bool = False,
        max_chars: Annotated[int, Query(ge=MIN_MAX_CHARS, le=MAX_MAX_CHARS)] = DEFAULT_MAX_CHARS,
    ) -> dict[str, Any]:
        """MemoryGet exactly as the agent's ``memory_get`` tool; too large a read returns sizes and next calls."""
        reader = find(agent)
        request = MemoryGetRequest(
            ref=ref, mode=mode, heading=heading, start=start, end=end, lines=lines, expand=expand, max_chars=max_chars
        )
        return memory_get(store, reader, request).as_json()

    @r.get("/{agent}/hook", response_model=HookPath)
    async def hook(agent: str) -> HookPath:
        """The capability URL path for external events to this agent (keep it secret)."""
        return HookPath(path=f"/v1/hooks/{port.external_token(find(agent).agent_id)}")

    @r.post("/{agent}/hook/rotate", response_model=HookPath)
    async def rotate_hook(agent: str) -> HookPath:
        """A new capability URL for the agent; the old one answers 404 from now on."""
        return HookPath(path=f"/v1/hooks/{port.rotate_external_token(find(agent).agent_id)}")

    return r
