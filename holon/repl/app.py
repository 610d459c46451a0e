"""``Chat``: the operator REPL loop over an ``ApiClient`` (``holon chat`` wires it up).

A plain line is sent to the current agent and its turn is drawn live until it settles (the
``turn.settled`` of the turn that took the input): a spinner with the elapsed time while nothing
else shows (on a terminal), the reply text as the model generates it, "starting the local
model…" while a model child starts. Ctrl-C during a reply aborts the turn; Ctrl-C
at the prompt clears the line; Ctrl-D or ``/quit`` leaves (the daemon keeps running). Briefs that
agents send the operator are polled from the ledger tail in a thread and printed above the prompt
as they arrive (``patch_stdout``); while a reply streams they wait, unless they are the current
agent's (then the reply's own stream shows them in place).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prompt_toolkit import PromptSession
from prompt_toolkit.history import FileHistory, InMemoryHistory
from prompt_toolkit.patch_stdout import patch_stdout
from rich.console import Console
from rich.table import Table
from rich.text import Text

from holon.api.models import EventOut
from holon.errors import HolonError
from holon.repl import render
from holon.repl.client import ApiClient, StreamItem
from holon.repl.commands import Say, Slash, SlashCompleter, help_rows, parse_line, parse_model, parse_proposals

__all__ = ["Chat", "TurnWatch"]

BRIEF_POLL_S = 2.0
BRIEF_PAGE = 100
"""Briefs read per request; the poller pages on until a short page."""


@dataclass(slots=True)
class TurnWatch:
    """Follows the turn that takes input ``input_seq``; ``done`` once that turn settled."""

    input_seq: int
    turn_id: str | None = None
    done: bool = False
    cursor: int = 0
    """The last event seen: where to resume the stream."""

    def see(self, event: EventOut) -> None:
        self.cursor = max(self.cursor, event.seq)
        p = event.payload
        if event.type == "turn.started" and self.input_seq in p.get("inputs", []):
            self.turn_id = p.get("turn_id")
        elif event.type == "turn.settled" and self.turn_id is not None and p.get("turn_id") == self.turn_id:
            self.done = True


class Chat:
    def __init__(self, client: ApiClient, console: Console, agent: str, *, history: Path | None = None) -> None:
        self.client = client
        self.console = console
        self.agent = agent
        self.history = history
        self._lock = threading.Lock()
        self._briefs_shown: set[int] = set()
        self._stop = threading.Event()
        self._brief_cursor = 0
        """The last seq the brief poller has looked past (``begin_briefs`` sets it to the head)."""
        self._names: dict[str, str] = {}
        self._at_prompt = threading.Event()
        """Briefs are printed only while the prompt waits, never into a streaming reply."""

    # --- the loop ------------------------------------------------------------------------------

    def run(self) -> int:
        session: PromptSession[str] = PromptSession(
            history=self._history(),
            completer=SlashCompleter(self._agent_names, self._proposal_ids),
            complete_while_typing=False,
        )
        self.console.print(
            Text(f"holon chat: talking to {self.agent} at {self.client.base_url}; /help for commands", "dim")
        )
        # The cursor is taken before the first prompt: a brief that arrives while the poller
        # thread starts up must not fall between its first read and the prompt.
        with contextlib.suppress(HolonError):
            self.begin_briefs()
        poller = threading.Thread(target=self._poll_briefs, name="chat:briefs", daemon=True)
        poller.start()
        try:
            while True:
                try:
                    # Only the prompt patches stdout (briefs print above it); replies write directly.
                    with patch_stdout(raw=True):
                        self._at_prompt.set()
                        line = session.prompt(f"{self.agent}> ")
                except KeyboardInterrupt:
                    continue
                except EOFError:
                    return 0
                finally:
                    self._at_prompt.clear()
                if self.handle(line) == "quit":
                    return 0
        finally:
            self._stop.set()

    def _history(self) -> FileHistory | InMemoryHistory:
        if self.history is None:
            return InMemoryHistory()
        self.history.parent.mkdir(parents=True, exist_ok=True)
        return FileHistory(str(self.history))

    def _agent_names(self) -> list[str]:
        try:
            return [a.name for a in self.client.agents()]
        except HolonError:
            return []

    def _proposal_ids(self) -> list[str]:
        try:
            return [str(p["proposal_id"]) for p in self.client.proposals()]
        except HolonError:
            return []

    def handle(self, line: str) -> str | None:
        """Run one line; ``"quit"`` when the operator asked to leave. Errors are printed, not raised."""
        try:
            parsed = parse_line(line)
            if isinstance(parsed, Say):
                self.say(parsed.text)
            elif isinstance(parsed, Slash):
                return self.command(parsed)
        except HolonError as e:
            self.console.print(Text(f"error: {e}", "bold red"))
        return None

    # --- talking -------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        """Send ``text`` to the current agent and draw its turn until it settles.

        An agent that will not run now (paused, or a background agent over its daily budget) gets
        the message queued and a notice saying so, instead of a reply that never comes.
        """
        blocked = self._blocked()
        if blocked is not None:
            seq = self.client.send(self.agent, text).seq
            self.console.print(
                Text(f"{blocked}: your message is queued (event {seq}); not waiting for a reply", "yellow")
            )
            return
        view = render.ReplyView(self.console, self.agent)
        head = self.client.head(self.agent)
        watch = TurnWatch(input_seq=0, cursor=head)
        try:
            with contextlib.closing(self.client.stream_events(self.agent, after=head)) as stream:
                next(stream)  # "open": subscribed, so no delta of the reply is missed
                watch.input_seq = self.client.send(self.agent, text).seq
                view.begin()  # a spinner with the elapsed time until text comes or the turn settles
                self._follow(stream, view, watch)
        except KeyboardInterrupt:
            view.close()
            # The interrupted generator is finished; follow the settle on a new stream.
            self._abort_during(view, watch)
        finally:
            view.close()

    def _blocked(self) -> str | None:
        """Why the current agent takes no turn now (a notice for the operator), else ``None``."""
        live = self.client.agent_status(self.agent)
        if live["state"] == "paused":
            return (
                f"{self.agent} is paused; it answers once resumed "
                f"(holon agent resume {self.agent}, or POST /v1/agents/{self.agent}/resume)"
            )
        if live["state"] == "asleep" and str(live.get("detail", "")).startswith("daily budget used"):
            until = f" until {live['next_wake']}" if live.get("next_wake") else ""
            return f"{self.agent} is over its daily budget ({live['detail'].split(': ', 1)[-1]}) and sleeps{until}"
        return None

    def _follow(self, stream: Iterator[StreamItem], view: render.ReplyView, watch: TurnWatch) -> None:
        for item in stream:
            match item:
                case ("delta", data):
                    view.delta(data)
                case ("model", data):
                    view.model(data)
                case ("event", event):
                    watch.see(event)
                    if watch.turn_id is None and (why := _stops_waiting(event)):
                        # Paused, or out of budget, before the turn with this input started.
                        view.close()
                        self.console.print(Text(f"{self.agent} {why}: your message stays queued", "yellow"))
                        return
                    if event.type == "brief.delivered":
                        with self._lock:
                            if event.seq in self._briefs_shown:
                                continue
                            self._briefs_shown.add(event.seq)
                    view.event(event)
                    if watch.done:
                        return

    def _abort_during(self, view: render.ReplyView, watch: TurnWatch) -> None:
        if not watch.input_seq:
            return  # interrupted before the input was sent
        aborted = self.client.abort(self.agent)
        if not aborted and watch.turn_id is None:
            self.console.print(Text("\n[no turn running yet; the message stays queued]", "yellow"))
            return
        self.console.print(Text("\n[aborting]", "yellow"))
        with (
            contextlib.suppress(KeyboardInterrupt),  # a second Ctrl-C stops waiting for the settle
            contextlib.closing(self.client.stream_events(self.agent, after=watch.cursor)) as stream,
        ):
            self._follow((item for item in stream if item[0] != "delta"), view, watch)

    # --- background briefs ---------------------------------------------------------------------

    def begin_briefs(self) -> None:
        """Show the briefs that come from now on: the cursor moves to the ledger head."""
        self._brief_cursor = max((e.seq for e in self.client.tail(n=1)), default=0)

    def _poll_briefs(self) -> None:
        client = self.client.clone()
        try:
            while not self._stop.wait(BRIEF_POLL_S):
                if not self._at_prompt.is_set():
                    continue  # not into a streaming reply; the cursor keeps them for later
                with contextlib.suppress(HolonError):
                    self.show_briefs(client)
        finally:
            client.close()

    def show_briefs(self, client: ApiClient | None = None) -> int:
        """Print every brief after the cursor once, paging through the filtered tail; how many.

        The head is read first: every event up to it is committed, so once the pages after the
        cursor are read the cursor may move to it, and the next poll scans only what is new.
        However many events land between polls, none is skipped.
        """
        client = client or self.client
        head = max((e.seq for e in client.tail(n=1)), default=0)
        shown = 0
        while True:
            page = client.tail(n=BRIEF_PAGE, after=self._brief_cursor, types=("brief.delivered",))
            for e in page:
                self._brief_cursor = max(self._brief_cursor, e.seq)
                shown += self._show_brief(client, e)
            if len(page) < BRIEF_PAGE:
                break
        self._brief_cursor = max(self._brief_cursor, head)
        return shown

    def _show_brief(self, client: ApiClient, e: EventOut) -> bool:
        with self._lock:
            if e.seq in self._briefs_shown:
                return False  # shown already in the current agent's reply stream
            self._briefs_shown.add(e.seq)
        if e.agent_id not in self._names:
            self._names.update({a.agent_id: a.name for a in client.agents()})
        render.brief_line(self.console, self._names.get(e.agent_id, e.agent_id), e.payload)
        return True

    # --- slash commands ------------------------------------------------------------------------

    def command(self, cmd: Slash) -> str | None:
        c, agent, arg = self.client, self.agent, cmd.arg
        match cmd.name:
            case "quit":
                return "quit"
            case "help":
                self._help()
            case "agents":
                render.agents_table(self.console, c.agents(), current=agent, live=self._live())
            case "switch":
                self.agent = c.agent(arg)["agent"]["name"]
                self.console.print(Text(f"now talking to {self.agent}", "dim"))
            case "new":
                self.agent = c.create_agent(arg).name
                self.console.print(Text(f"created {self.agent}; now talking to it", "dim"))
            case "state":
                render.working_memory(self.console, c.working_memory(agent))
            case "work":
                render.work_table(self.console, c.work_items(agent))
            case "tasks":
                render.tasks_table(self.console, c.tasks(agent))
            case "waits":
                render.waits_table(self.console, c.waits(agent))
            case "search":
                render.search_hits(self.console, c.search(agent, arg))
            case "get":
                render.memory_read(self.console, c.get(agent, arg))
            case "context":
                render.context_summary(self.console, c.context(agent, arg or None))
            case "events":
                render.events_table(self.console, c.tail(agent, n=_count(arg, 20)))
            case "transcript":
                render.transcript(self.console, agent, c.tail(agent, n=_count(arg, 200)))
            case "model":
                self._model(arg)
            case "proposals":
                self._proposals(arg)
            case "abort":
                ran = c.abort(agent)
                self.console.print("aborting the running turn" if ran else "no turn is running")
            case _:
                self.console.print(Text(f"/{cmd.name} is not implemented", "red"))
        return None

    def _live(self) -> dict[str, dict[str, Any]]:
        """Each agent's live status from the daemon (``/v1/status``), by agent id."""
        return {a["agent_id"]: a for a in self.client.status().get("agents", [])}

    def _proposals(self, arg: str) -> None:
        """``/proposals``: review what evolve proposes (RFC 0006); nothing becomes durable without this."""
        action = parse_proposals(arg)
        c = self.client
        match action.verb:
            case "list":
                render.proposals_table(self.console, c.proposals())
            case "show":
                render.proposal_detail(self.console, c.proposal(action.ref))
            case "accept":
                text = None
                if action.edit:
                    current = c.proposal(action.ref)
                    body = (
                        (current.get("entry") or {}).get("text")
                        or (current.get("skill") or {}).get("body")
                        or (current.get("write") or {}).get("text", "")
                    )
                    text = self._edit(body)
                    if text is None:
                        self.console.print(Text("not accepted (cancelled or empty text)", "dim"))
                        return
                decision = c.accept(action.ref, text)
                where = decision.get("entry_id") or decision.get("skill_path") or decision.get("memory_file") or ""
                self.console.print(Text(f"accepted {decision['proposal']['proposal_id']} -> {where}", "green"))
            case "dismiss":
                decision = c.dismiss(action.ref, action.reason)
                self.console.print(Text(f"dismissed {decision['proposal']['proposal_id']}", "dim"))

    def _edit(self, current: str) -> str | None:
        """The operator's edit of ``current`` (prefilled at a prompt); ``None`` when emptied or
        cancelled (Ctrl-C, Ctrl-D). A multi-line text (a skill) is edited multi-line: Esc Enter ends it."""
        multiline = "\n" in current
        if multiline:
            self.console.print(Text("edit the text; Esc then Enter accepts it, Ctrl-C cancels", "dim"))
        session: PromptSession[str] = PromptSession(multiline=multiline)
        try:
            with patch_stdout(raw=True):
                edited = session.prompt("edit> ", default=current)
        except (KeyboardInterrupt, EOFError):
            return None
        return edited.strip() or None

    def _help(self) -> None:
        table = Table(show_header=False, show_edge=False, box=None, padding=(0, 2))
        for usage, text in help_rows():
            table.add_row(Text(usage, "bold"), text)
        self.console.print(table)
        self.console.print(Text("Anything else is sent to the agent; Ctrl-C aborts a reply, Ctrl-D quits.", "dim"))

    def _model(self, arg: str) -> None:
        """``/model``: show the agent's model, API base and key variable; with an argument set them
        (``parse_model``). The daemon validates like ``holon agent configure``; keys stay out."""
        if arg:
            change = parse_model(arg)
            state = self.client.configure(self.agent, change.settings, unset=change.unset)
        else:
            state = next(a for a in self.client.agents() if a.name == self.agent)
        s = state.settings
        model = s.get("model") or "(default from config)"
        where = "".join(
            f"  {label} {s[key]}" for key, label in (("api_base", "at"), ("api_key_env", "key")) if s.get(key)
        )
        self.console.print(f"{self.agent} uses {model}{where}")
        if arg and s.get("api_key_env"):
            self.console.print(
                Text(
                    f"the key is read from the daemon's environment, else `holon secrets set {s['api_key_env']}`", "dim"
                )
            )


def _stops_waiting(event: EventOut) -> str | None:
    """Why ``event`` means the queued input will not be answered soon, else ``None``."""
    p = event.payload
    if event.type == "agent.configured" and (p.get("changes") or {}).get("paused"):
        return "was paused"
    if event.type == "brief.delivered" and p.get("kind") == "budget":
        return "reached its daily budget"
    return None


def _count(arg: str, default: int) -> int:
    if not arg:
        return default
    if not arg.isdigit() or not 1 <= int(arg) <= 10_000:
        raise HolonError(f"expected a count from 1 to 10000, got {arg!r}")
    return int(arg)
