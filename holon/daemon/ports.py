"""The port methods: what the HTTP API asks of the daemon (``holon.api.port.DaemonPort``).

Each change is a ledger event before it is acknowledged, then the agent is woken (``Wakes``) or
the watcher's view brought up to date at once (``publish``), so a timer's job is made, or goes,
now rather than on the watcher's next pass. The agent operations themselves are the ones the CLI
uses without a daemon (``holon.runtime.agents``, ``holon.daemon.deletion``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from holon.clock import Clock
from holon.daemon.deletion import REASON, delete_records, descendants
from holon.daemon.group_commit import GroupCommit
from holon.daemon.hooks import hook_tokens
from holon.daemon.wakes import Phase, Wakes
from holon.errors import ConflictError, NotFoundError
from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.logs import get_logger
from holon.projections import Store
from holon.projections.state import AgentState, TimerProjection
from holon.runtime.agents import add_timer, cancel_timer, configure_or_create_default, create_agent
from holon.runtime.ingress import InputSpec
from holon.runtime.recovery import reject_unstarted, settle_unfinished_turn
from holon.runtime.status import ABORTED_REASON

if TYPE_CHECKING:
    from holon.runtime.host import AgentHost
    from holon.runtime.turn import TurnResult

__all__ = ["Ports"]

log = get_logger("holon.daemon")

ORIGIN = "operator:daemon"
ABORT_WAIT_S = 10.0
"""How long ``abort_anywhere`` waits for another node to settle the turn it asked to abort."""
ABORT_POLL_S = 0.05


class Ports:
    def __init__(
        self, store: Store, *, clock: Clock, host: AgentHost, wakes: Wakes, phase: Phase, group: GroupCommit
    ) -> None:
        self.store = store
        self.clock = clock
        self.host = host
        self.wakes = wakes
        self.phase = phase
        self.group = group
        self.node: str | None = None
        """This daemon's node name when it is one of several (``holon serve --node``), else None."""

    def _check_open(self) -> None:
        if not self.phase.accepting:
            raise ConflictError("the daemon is not taking input (it is starting or shutting down)")

    # --- inputs -----------------------------------------------------------------------------

    def submit(self, agent: str, spec: InputSpec | str, **fields: Any) -> Event:
        """``AgentHost.submit`` while the daemon takes input, then the agent is woken."""
        self._check_open()
        stored = self.host.submit(agent, spec, **fields)
        self.wakes.wake(stored.agent_id)
        return stored

    async def submit_input(self, agent: str, spec: InputSpec) -> Event:
        """``submit`` through the group commit: inputs arriving together share one transaction
        (and one fsync); the event comes back once it is committed."""
        self._check_open()
        stored = await self.group.run(lambda tx: self.host.deliver(agent, spec, tx))
        self.wakes.wake(stored.agent_id)
        return stored

    # --- agents -----------------------------------------------------------------------------

    def create_agent(
        self, name: str, *, template: str = "assistant", workspace: str | None = None, schedule: str | None = None,
        prompt: str | None = None, settings: dict[str, Any] | None = None,
    ) -> AgentState:  # fmt: skip
        agent = create_agent(
            self.store, name, template=template, settings=settings, workspace=workspace, schedule=schedule,
            prompt=prompt, now_us=self.clock.now_us(),
        )  # fmt: skip
        self.wakes.publish_new()
        return agent

    def configure_agent(self, agent: str, changes: dict[str, Any], *, unset: list[str] | None = None) -> AgentState:
        # The default agent is created by its first configure (before `holon chat` made it).
        state, _created = configure_or_create_default(self.store, agent, changes, unset=unset or [])
        self.wakes.wake(state.agent_id)
        return state

    def pause(self, agent: str) -> AgentState:
        return self.configure_agent(agent, {"paused": True})

    def resume(self, agent: str) -> AgentState:
        return self.configure_agent(agent, {}, unset=["paused"])

    def delete(self, agent: str) -> None:
        """Delete the agent with everything it started: its child agents first (recursively), then
        itself; each one's running turn is aborted, its background tasks killed, its waits, tasks
        and timers ended, its home and token removed (``_delete_one``). Nothing it started keeps
        running or spending. A deleted child's parent is told its task will get no answer."""
        state = self.store.agent(agent)
        line = descendants(self.store, state.agent_id)
        for member in [*line, state]:
            self._delete_one(member)
        self.host.child_deleted(state)
        self.wakes.publish_new()
        log.info("agent.deleted", agent=state.name, agent_id=state.agent_id, children=[a.name for a in line])

    def _delete_one(self, state: AgentState) -> None:
        """Abort the agent's turn, kill its background tasks (``task.resulted(cancelled)``), then
        the rest of its deletion as ``holon agent delete`` does it without a daemon
        (``deletion.delete_records``)."""
        self.abort(state.agent_id)
        killed = self.host.tasks.cancel_agent(state.agent_id, REASON)
        delete_records(self.store, state, origin=ORIGIN)
        if killed:
            log.info("agent.tasks_killed", agent=state.name, tasks=killed)

    # --- timers -----------------------------------------------------------------------------

    def add_timer(self, agent: str, schedule: str, *, prompt: str | None = None) -> TimerProjection:
        now = self.clock.now_us()
        timer = add_timer(self.store, agent, schedule, now_us=now, prompt=prompt, origin=ORIGIN)
        self.wakes.publish_new()  # its job is made now, not on the watcher's next pass
        return timer

    def cancel_timer(self, agent: str, timer_id: str) -> TimerProjection:
        timer = cancel_timer(self.store, agent, timer_id, origin=ORIGIN)
        self.wakes.publish_new()  # its job goes now: it cannot fire again
        return timer

    # --- turns ------------------------------------------------------------------------------

    def abort(self, agent: str) -> bool:
        """Abort the agent's turn if it runs in this process (it settles ``failed``, aborted)."""
        agent_id = self.store.agent(agent).agent_id
        run = self.host.active_run(agent_id)
        if run is None:
            return False
        # No turn started yet: the run waits to start one (for its model's window, RFC 0005).
        unstarted = self.store.agent(agent_id).current_turn_id is None
        self.wakes.aborting.add(agent_id)
        run.cancel()
        settle = self._settle_abort(agent_id, run, unstarted=unstarted)
        asyncio.get_running_loop().create_task(settle, name=f"abort:{agent_id}")
        return True

    async def abort_anywhere(self, agent: str, *, wait_s: float = ABORT_WAIT_S) -> bool:
        """``abort`` when the turn runs here. On a node of several (RFC 0008 section 4, "Aborts
        across nodes"), a turn running on another node is asked to stop through the shared ledger:
        ``turn.abort_requested`` (unfenced: any node may append it), which the owner's watcher acts
        on (``abort_requested``); this waits, at most ``wait_s``, for that turn to settle and answers
        True only when it settled aborted (False: no turn ran, it ended otherwise first, or it had
        not settled in time; the request stays, and the owner still acts on it if the turn runs)."""
        if self.abort(agent):
            return True
        state = self.store.agent(agent)
        turn_id = state.current_turn_id
        if self.node is None or turn_id is None or self.wakes.owns is None or self.wakes.owns(state.agent_id):
            return False  # a single daemon, no turn, or this node's agent (whose turn does not run)
        [request] = self.store.append(
            NewEvent(
                state.agent_id, ev.TurnAbortRequested(turn_id=turn_id, node=self.node), origin=ORIGIN,
                authority="operator",
            )
        )  # fmt: skip
        log.info("turn.abort_requested", agent_id=state.agent_id, turn_id=turn_id, seq=request.seq, node=self.node)
        self.wakes.publish_new()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while (settled := self.store.ledger.turn_settled_seq(state.agent_id, turn_id, after=0)) is None:
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(ABORT_POLL_S)
        [event] = self.store.ledger.get_many([settled])
        return isinstance(event.payload, ev.TurnSettled) and event.payload.reason == ABORTED_REASON

    def abort_requested(self, agent_id: str, turn_id: str) -> None:
        """Another node's API asked to abort ``turn_id`` (``turn.abort_requested``, read by the
        watcher): aborted when it is the agent's turn running here, else nothing (it settled
        already, or another node runs the agent)."""
        if self.host.active_run(agent_id) is None:
            return
        try:
            running = self.store.agent(agent_id).current_turn_id
        except NotFoundError:
            return
        if running == turn_id and self.abort(agent_id):
            log.info("turn.aborted_on_request", agent_id=agent_id, turn_id=turn_id)

    async def _settle_abort(self, agent_id: str, run: asyncio.Task[list[TurnResult]], *, unstarted: bool) -> None:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await run
        try:
            agent = self.store.agent(agent_id)
            if agent.current_turn_id is not None:
                settle_unfinished_turn(
                    self.store, agent, outcome="failed", reason=ABORTED_REASON, requeue=False, origin=ORIGIN
                )
            elif unstarted and run.cancelled():  # before its turn started: its inputs are what it was doing
                reject_unstarted(self.store, agent, reason=ABORTED_REASON, origin=ORIGIN)
        except NotFoundError:
            pass
        finally:
            self.wakes.aborting.discard(agent_id)
            self.wakes.wake(agent_id)

    # --- external events --------------------------------------------------------------------

    def external_token(self, agent: str) -> str:
        """Kept in ``<home>/run/external_tokens.json`` (mode 0600) on SQLite, in ``hook_tokens`` on
        PostgreSQL; never in the ledger."""
        return hook_tokens(self.store).token(self.store.agent(agent).agent_id)

    def rotate_external_token(self, agent: str) -> str:
        """A new capability token; the agent's old URL is refused from now on."""
        return hook_tokens(self.store).rotate(self.store.agent(agent).agent_id)

    def agent_for_token(self, token: str) -> AgentState | None:
        found = hook_tokens(self.store).agent_for(token)
        if found is None:
            return None
        try:
            return self.store.agent(found)
        except NotFoundError:
            return None
