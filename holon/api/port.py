"""What the HTTP API needs from the daemon: the ``DaemonPort`` protocol.

The API layer sits below the daemon (``holon.daemon`` imports ``holon.api``, never the reverse),
so the API is written against this protocol and ``holon.daemon.Daemon`` implements it. Reads that
are plain projections (working memory, work items, tasks, waits, timers, context manifests,
MemorySearch, MemoryGet, ledger tail/verify/stats) go through ``port.store`` with the same
functions the CLI uses; everything that changes state or needs the running host goes through the
port's methods, so that inputs are durable before they are acknowledged and the host is woken.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from holon.ledger import Event
from holon.projections import Store
from holon.projections.state import AgentState, TimerProjection
from holon.runtime.ingress import InputSpec
from holon.runtime.status import AgentStatus

__all__ = ["AgentStatus", "DaemonPort", "Notice", "Spending"]


@dataclass(frozen=True, slots=True)
class Notice:
    """A live notification for streams: a new ledger event, text a model is generating, or a model
    child starting (``model``: sent to every stream, whatever agent it follows)."""

    kind: Literal["event", "delta", "model"]
    agent_id: str
    seq: int | None = None
    """For ``event``: the ledger seq (read the event from the store); for ``delta``: the ledger head
    when the text was written (the events up to it come before it on a stream)."""
    text: str = ""
    """For ``delta``: the next piece of the reply being generated; for ``model``: what is starting
    (``model process``, ``local model``)."""
    turn_id: str | None = None
    state: str = ""
    """For ``model``: ``starting``, ``ready`` or ``failed``."""


@dataclass(frozen=True, slots=True)
class Spending:
    """What an agent spent today (UTC) against the per-day budget it spends from (RFC 0005,
    "Schedules, timers and background agents"): its owner's, the topmost background agent of its
    line; a foreground agent with none has no limits (``owner`` is ``None``)."""

    turns: int
    tokens: int
    cost_usd: float
    owner: str | None = None
    """The name of the agent whose budget this is (itself, or a background ancestor)."""
    limit_turns: int | None = None
    limit_tokens: int | None = None
    limit_cost_usd: float | None = None


class DaemonPort(Protocol):
    store: Store

    def submit(self, agent: str, spec: InputSpec) -> Event:
        """Record an input durably (a ``message.received`` event), wake the agent, return the event.

        The input resolves the agent's waits it answers: an ``operator`` input its operator waits,
        an ``external`` one its external waits (on ``spec.event``, the event's name, when given).
        With an ``idempotency_key`` already used for this agent, nothing is stored and the first
        input's event comes back (``IdempotencyConflict`` when that input was different)."""
        ...

    async def submit_input(self, agent: str, spec: InputSpec) -> Event:
        """``submit`` for the request handlers: inputs arriving together are committed together
        (one transaction, one fsync); returns once the input's transaction is committed."""
        ...

    def create_agent(
        self,
        name: str,
        *,
        template: str = "assistant",
        workspace: str | None = None,
        schedule: str | None = None,
        prompt: str | None = None,
        settings: dict[str, Any] | None = None,
    ) -> AgentState: ...

    def configure_agent(self, agent: str, changes: dict[str, Any], *, unset: list[str] | None = None) -> AgentState: ...

    def pause(self, agent: str) -> AgentState: ...

    def resume(self, agent: str) -> AgentState: ...

    def delete(self, agent: str) -> None:
        """Delete the agent with its data (home directory, schedules) and everything it started:
        its running turn, its background tasks (killed) and its child agents (deleted, recursively).
        Its ledger events stay."""
        ...

    def add_timer(self, agent: str, schedule: str, *, prompt: str | None = None) -> TimerProjection:
        """Give the agent another schedule (a ``timer.scheduled`` event; the agent becomes a
        background agent if it was not); a schedule that cannot be read is a ``UsageError``."""
        ...

    def cancel_timer(self, agent: str, timer_id: str) -> TimerProjection:
        """Cancel one of the agent's timers (``timer.cancelled``): it never fires again.
        ``NotFoundError`` for a timer the agent does not have, ``ConflictError`` if it is over."""
        ...

    def abort(self, agent: str) -> bool:
        """Stop the agent's running turn, if any (it settles as aborted). True when one was running."""
        ...

    async def abort_anywhere(self, agent: str) -> bool:
        """``abort``, also when another node of several runs the agent's turn (asked through the
        ledger; waits a bounded time for it to settle). True when the turn was, or settled, aborted."""
        ...

    def status(self) -> dict[str, Any]:
        """Daemon status: pid, uptime, ledger head, projection and index lag, and per agent an ``AgentStatus``."""
        ...

    def agent_entries(self, agents: list[AgentState]) -> list[dict[str, Any]]:
        """The status entries of ``agents`` decided at once, in their order: what ``status()``
        lists for them (``holon.runtime.status.status_entries``), without the daemon's counters."""
        ...

    def agent_status(self, agent: AgentState) -> AgentStatus:
        """One agent's live state (paused, running, waiting on what, asleep until when, failed)."""
        ...

    def spending(self, agent: AgentState) -> Spending:
        """Today's turns, tokens and cost of the agent's budget line, with its limits (cached by the daemon)."""
        ...

    def external_token(self, agent: str) -> str:
        """The secret token of the agent's capability URL for external events (created on first use)."""
        ...

    def rotate_external_token(self, agent: str) -> str:
        """Replace the agent's capability token; the old URL is refused from then on."""
        ...

    def agent_for_token(self, token: str) -> AgentState | None:
        """The agent whose capability token this is (compared in constant time), else None."""
        ...

    def subscribe(self, agent_id: str | None = None) -> AsyncIterator[Notice]:
        """Live notices (all agents when ``agent_id`` is None) until the subscriber stops iterating."""
        ...
