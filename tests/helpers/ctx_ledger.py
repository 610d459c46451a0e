"""Writing an agent's history into a real ``Store`` the way the turn runner does, batch by batch.

``Script`` appends the events a turn leaves (``turn.started``; ``model.responded`` with its
``tool.called`` s; each tool's emitted events with its ``tool.resulted``; ``turn.settled``) so the
projector folds and derives (working-memory deltas, sealed episodes) exactly as in production.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.ledger.events import Authority
from holon.projections import Store
from holon.projections.state import EpisodeDrafts

__all__ = ["CONTENT_TYPES", "Script", "content_events", "sealed"]

#: What an episode is made of: a turn, the operator's words, tool calls and their results, tasks,
#: files, decisions and follow-ups (bookkeeping such as ``model.*``, ``context.assembled`` and
#: ``working_memory.delta`` is not).
CONTENT_TYPES = frozenset(
    {
        "message.received",
        "turn.started",
        "turn.settled",
        "tool.called",
        "tool.resulted",
        "task.created",
        "task.resulted",
        "file.touched",
        "decision.recorded",
        "follow_up.changed",
        "work_item.opened",
        "work_item.picked",
        "work_item.completed",
        "wait.registered",
    }
)


@dataclass
class Script:
    store: Store
    agent_id: str = "agt_ep"
    name: str = "ep"
    home: str = "/nonexistent/ep"
    turn_id: str | None = None
    turns: int = 0
    calls: int = 0
    batches: list[list[Event]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.append(ev.AgentCreated(name=self.name, home=self.home))

    # --- raw appends ------------------------------------------------------------------------

    def append_new(self, *new: NewEvent) -> list[Event]:
        stored = self.store.append(*new)
        self.batches.append(stored)
        return stored

    def append(
        self,
        *payloads: ev.PayloadBase,
        origin: str = "runtime:turn",
        authority: Authority = "runtime",
        work_item_id: str | None = None,
    ) -> list[Event]:
        return self.append_new(
            *(
                NewEvent(
                    self.agent_id,
                    p,
                    origin=origin,
                    authority=authority,
                    turn_id=self.turn_id,
                    work_item_id=work_item_id,
                )
                for p in payloads
            )
        )

    # --- inputs -----------------------------------------------------------------------------

    def say(self, text: str, *, authority: Authority = "operator", origin: str | None = None) -> Event:
        """An input outside any turn (``operator:cli`` for the operator)."""
        origin = origin or ("operator:cli" if authority == "operator" else f"{authority}:source")
        new = NewEvent(self.agent_id, ev.MessageReceived(text=text), origin=origin, authority=authority)
        return self.append_new(new)[0]

    # --- turns ------------------------------------------------------------------------------

    def start(self) -> Event:
        agent = self.store.agent(self.agent_id)
        self.turns += 1
        self.turn_id = f"turn_{self.turns:03d}"
        active = self.store.working_memory(self.agent_id).get("active_work_item")
        [started] = self.append(
            ev.TurnStarted(turn_id=self.turn_id, inputs=list(agent.pending_inputs)), work_item_id=active
        )
        return started

    def call(
        self,
        tool: str,
        arguments: dict[str, object],
        output: str,
        *,
        status: str = "ok",
        emitted: Iterable[ev.PayloadBase] = (),
        work_item_id: str | None = None,
    ) -> list[Event]:
        """One model round with one tool call; returns [model.responded, tool.called, *emitted, tool.resulted]."""
        assert self.turn_id is not None, "start a turn first"
        self.calls += 1
        call_id = f"call_{self.calls:03d}"
        args = json.dumps(arguments)
        first = self.append(
            ev.ModelResponded(
                turn_id=self.turn_id,
                round=self.calls,
                model="scripted",
                tool_calls=[ev.ToolCallSpec(call_id=call_id, tool=tool, arguments=args)],
            ),
            ev.ToolCalled(call_id=call_id, tool=tool, arguments=args),
        )
        origin = f"agent:{self.agent_id}"
        second = self.append_new(
            *(
                NewEvent(
                    self.agent_id, p, origin=origin, authority="agent", turn_id=self.turn_id, work_item_id=work_item_id
                )
                for p in emitted
            ),
            NewEvent(
                self.agent_id,
                ev.ToolResulted(call_id=call_id, tool=tool, status=status, output=output),  # type: ignore[arg-type]
                origin=f"tool:{tool}",
                authority="tool",
                turn_id=self.turn_id,
            ),
        )
        return first + second

    def run(self, command: str, exit_code: int | None, output: str = "done") -> list[Event]:
        text = output if exit_code is None else f"exit code: {exit_code}\n{output}"
        return self.call("run_command", {"command": command}, text, status="ok" if not exit_code else "error")

    def open_item(self, work_item_id: str, title: str, *, activate: bool = True) -> list[Event]:
        opened = ev.WorkItemOpened(
            work_item_id=work_item_id, title=title, objective=f"Objective of {title}", activate=activate
        )
        return self.call(
            "open_work_item", {"title": title}, f"opened {work_item_id}", emitted=[opened], work_item_id=work_item_id
        )

    def pick(self, work_item_id: str) -> list[Event]:
        return self.call(
            "pick_work_item",
            {"work_item_id": work_item_id},
            "picked",
            emitted=[ev.WorkItemPicked(work_item_id=work_item_id)],
            work_item_id=work_item_id,
        )

    def complete(self, work_item_id: str, report: str = "done") -> list[Event]:
        return self.call(
            "complete_work_item",
            {"report": report},
            "completed",
            emitted=[ev.WorkItemCompleted(work_item_id=work_item_id, report=report)],
            work_item_id=work_item_id,
        )

    def wait(self, wait_id: str, on: str = "timer") -> list[Event]:
        reg = ev.WaitRegistered(wait_id=wait_id, on=on, recheck_at_us=1, reason="until the build finishes")  # type: ignore[arg-type]
        return self.call("wait", {"on": on}, "waiting", emitted=[reg])

    def settle(self, reply: str | None = "ok", outcome: str = "completed") -> Event:
        assert self.turn_id is not None
        [settled] = [
            e
            for e in self.append(
                ev.TurnSettled(turn_id=self.turn_id, outcome=outcome, reply=reply, rounds=1)  # type: ignore[arg-type]
            )
            if e.type == "turn.settled"
        ]
        self.turn_id = None
        return settled

    def exchange(self, text: str, reply: str = "ok") -> tuple[Event, Event, Event]:
        """A plain conversation turn: the operator says something, the agent answers."""
        said = self.say(text)
        started = self.start()
        return said, started, self.settle(reply)

    # --- reading ----------------------------------------------------------------------------

    def drafts(self) -> EpisodeDrafts:
        d = self.store.state("episode_drafts", self.agent_id)
        assert isinstance(d, EpisodeDrafts)
        return d

    def sealed(self) -> list[Event]:
        return sealed(self.store, self.agent_id)


def sealed(store: Store, agent_id: str) -> list[Event]:
    """The agent's ``episode.sealed`` events, in ledger order."""
    return [e for e in store.ledger.read(agent_id=agent_id) if e.type == "episode.sealed"]


def content_events(store: Store, agent_id: str) -> list[Event]:
    """The agent's events that make up episodes (see ``CONTENT_TYPES``), in ledger order."""
    return [e for e in store.ledger.read(agent_id=agent_id) if e.type in CONTENT_TYPES]
