"""Slash commands: what they are, parsing a line, and completing one (no terminal needed).

``parse_line`` turns a line into ``Say`` (text for the current agent), ``Slash`` (a command and
its argument) or ``None`` (blank). ``completions`` is the pure core of ``SlashCompleter``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from holon.errors import UsageError

__all__ = [
    "COMMANDS",
    "PROPOSAL_VERBS",
    "ModelChange",
    "ProposalAction",
    "Say",
    "Slash",
    "SlashCompleter",
    "completions",
    "help_rows",
    "parse_line",
    "parse_model",
]


@dataclass(frozen=True, slots=True)
class Spec:
    usage: str
    """The argument, as help shows it ("" for none; "[X]" optional; "X" required)."""
    help: str

    @property
    def takes(self) -> str:
        return "none" if not self.usage else ("optional" if self.usage.startswith("[") else "required")


COMMANDS: dict[str, Spec] = {
    "agents": Spec("", "list agents and what they are doing"),
    "switch": Spec("NAME", "talk to another agent"),
    "new": Spec("NAME", "create an agent and switch to it"),
    "state": Spec("", "the agent's working memory"),
    "work": Spec("", "work items"),
    "tasks": Spec("", "tasks (commands, child agents)"),
    "waits": Spec("", "what the agent waits on"),
    "search": Spec("QUERY", "search the agent's memory"),
    "get": Spec("REF", "read a memory ref (file:agent/self.md, event:12, episode:ID)"),
    "context": Spec("[TURN]", "what the model saw last turn, and why"),
    "events": Spec("[N]", "the agent's last N ledger events (20)"),
    "transcript": Spec("[N]", "messages and replies (from the last N events, 200)"),
    "model": Spec(
        "[NAME [--api-base URL] [--api-key-env VAR] | default]",
        "show or set the agent's model, API base and key variable (default: the config's)",
    ),
    "abort": Spec("", "stop the agent's running turn"),
    "proposals": Spec("[show|accept|dismiss ID]", "what evolve proposes: accept ID [--edit], dismiss ID [reason]"),
    "help": Spec("", "this list"),
    "quit": Spec("", "leave (Ctrl-D); the daemon keeps running"),
}
AGENT_ARG = frozenset({"switch"})
"""Commands whose argument is an existing agent's name (completed from the daemon)."""
PROPOSAL_VERBS = ("show", "accept", "dismiss")
ALIASES = {"exit": "quit", "q": "quit", "?": "help", "ls": "agents"}


@dataclass(frozen=True, slots=True)
class Say:
    text: str


@dataclass(frozen=True, slots=True)
class Slash:
    name: str
    arg: str = ""


def parse_line(line: str) -> Say | Slash | None:
    """What the operator typed. ``//text`` sends ``/text`` as a message. Raises ``UsageError``."""
    stripped = line.strip()
    if not stripped:
        return None
    if not stripped.startswith("/") or stripped.startswith("//"):
        return Say(stripped[1:] if stripped.startswith("//") else stripped)
    word, _, arg = stripped[1:].partition(" ")
    name = ALIASES.get(word.lower(), word.lower())
    arg = arg.strip()
    spec = COMMANDS.get(name)
    if spec is None:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        hint = f"; did you mean /{close[0]}?" if close else "; /help lists them"
        raise UsageError(f"unknown command /{word}{hint}")
    if spec.takes == "required" and not arg:
        raise UsageError(f"/{name} needs {spec.usage}")
    if spec.takes == "none" and arg:
        raise UsageError(f"/{name} takes no argument")
    return Slash(name, arg)


@dataclass(frozen=True, slots=True)
class ProposalAction:
    verb: str
    """``list``, ``show``, ``accept`` or ``dismiss``."""
    ref: str = ""
    edit: bool = False
    reason: str = ""


def parse_proposals(arg: str) -> ProposalAction:
    """``/proposals [show ID | accept ID [--edit] | dismiss ID [reason]]``. Raises ``UsageError``."""
    words = arg.split()
    if not words:
        return ProposalAction("list")
    verb, rest = words[0].lower(), words[1:]
    if verb not in PROPOSAL_VERBS:
        raise UsageError(f"/proposals {verb}: use show ID, accept ID [--edit] or dismiss ID [reason]")
    if not rest:
        raise UsageError(f"/proposals {verb} needs a proposal id (see /proposals)")
    ref, extra = rest[0], rest[1:]
    if verb == "accept":
        if extra not in ([], ["--edit"]):
            raise UsageError("/proposals accept ID [--edit]")
        return ProposalAction("accept", ref, edit=bool(extra))
    if verb == "show" and extra:
        raise UsageError("/proposals show ID")
    return ProposalAction(verb, ref, reason=" ".join(extra))


@dataclass(frozen=True, slots=True)
class ModelChange:
    """``/model NAME [--api-base URL] [--api-key-env VAR]``: the three settings together (those not
    given are reset to the config's), or ``/model default`` (all three reset)."""

    settings: dict[str, str]
    unset: tuple[str, ...]


_MODEL_FLAGS = {"--api-base": "api_base", "--api-key-env": "api_key_env"}


def parse_model(arg: str) -> ModelChange:
    """The change ``/model ARG`` asks for (``arg`` not empty). Raises ``UsageError``."""
    words = arg.split()
    usage = "/model NAME [--api-base URL] [--api-key-env VAR], or /model default"
    if words == ["default"]:
        return ModelChange({}, ("model", "api_base", "api_key_env"))
    if words[0].startswith("-"):
        raise UsageError(f"the model name comes first: {usage}")
    settings = {"model": words[0]}
    rest = words[1:]
    while rest:
        flag, *rest = rest
        key = _MODEL_FLAGS.get(flag.split("=", 1)[0])
        if key is None or key in settings:
            raise UsageError(f"unexpected {flag!r}: {usage}")
        if "=" in flag:
            settings[key] = flag.split("=", 1)[1]
        elif rest:
            settings[key], *rest = rest
        if not settings.get(key):
            raise UsageError(f"{flag} needs a value: {usage}")
    return ModelChange(settings, tuple(k for k in ("api_base", "api_key_env") if k not in settings))


def completions(text: str, agents: Iterable[str], proposals: Iterable[str] = ()) -> list[str]:
    """Whole-word completions for ``text`` (the line before the cursor); ``proposals`` are pending ids."""
    if not text.startswith("/"):
        return []
    word, space, arg = text[1:].partition(" ")
    if not space:
        return [f"/{name}" for name in COMMANDS if name.startswith(word.lower())]
    if word.lower() in AGENT_ARG and " " not in arg:
        return sorted(a for a in agents if a.startswith(arg))
    if word.lower() == "proposals":
        verb, space, ref = arg.partition(" ")
        if not space:
            return [v for v in PROPOSAL_VERBS if v.startswith(verb)]
        if verb.lower() in PROPOSAL_VERBS and " " not in ref:
            return sorted(p for p in proposals if p.startswith(ref))
    return []


def help_rows() -> list[tuple[str, str]]:
    return [(f"/{name} {spec.usage}".rstrip(), spec.help) for name, spec in COMMANDS.items()]


class SlashCompleter(Completer):
    """prompt_toolkit completer over ``completions``; ``agents`` and ``proposals`` (pending ids) are
    asked each time, and only when the line needs them (they change)."""

    def __init__(self, agents: Callable[[], Sequence[str]], proposals: Callable[[], Sequence[str]] = tuple) -> None:
        self.agents = agents
        self.proposals = proposals

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterator[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/"):
            return
        names = self.agents() if " " in text else ()
        ids = self.proposals() if text.lower().startswith("/proposals ") and text.count(" ") >= 2 else ()
        current = text.rsplit(" ", 1)[-1] if " " in text else text
        for option in completions(text, names, ids):
            yield Completion(option, start_position=-len(current))
