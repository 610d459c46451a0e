"""The turn: inputs -> prompt -> model -> tools -> ... -> settled.

A turn is bracketed by ``turn.started`` (which takes the agent's pending inputs) and
``turn.settled`` (completed, waiting, failed or interrupted). In between it is a step machine over
one ``TurnState`` value (``state``): assemble -> request -> record -> run tools -> assemble | settle
(``runner``). Each model round commits in steps that keep a crash explainable:

1. ``context.assembled`` + ``model.requested``  (so a crash during the call is visible; in the
   transaction of what came just before: ``turn.started``, or the last call's result)
2. ``model.responded`` + every ``tool.called``  (atomically: the calls are recorded before they run)
3. per call: its emitted events + ``tool.resulted`` (atomically)

The final answer (a ``model.responded`` without tool calls) commits with ``turn.settled`` in one
transaction, so a crash can never leave an answer recorded and its turn unsettled: recovery would
ask the model again and the input would be answered twice (exactly-once answers, RFC 0002).

A ``tool.called`` without a ``tool.resulted`` therefore means the call was in flight when holon
died; recovery reports it as interrupted instead of running it again. Limits (rounds, tokens,
cost, failed tool calls) are checked before anything is spent.

A turn admits its inputs by size (``prompt``). **A failed turn never consumes inputs it did not
answer.** Transient model failures re-queue them (``requeue``); every other failure settles them
``rejected`` with its reason (and a brief to the operator, ``briefs``), so nothing that fails the
same way every time is retried forever.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from holon import lazy

if TYPE_CHECKING:
    from holon.runtime.turn.briefs import rejection_brief, waiting_brief
    from holon.runtime.turn.prompt import INPUT_SHARE
    from holon.runtime.turn.runner import TurnRunner
    from holon.runtime.turn.state import ProviderResolver, TurnLimits, TurnObserver, TurnResult, TurnState

__all__ = [
    "INPUT_SHARE",
    "ProviderResolver",
    "TurnLimits",
    "TurnObserver",
    "TurnResult",
    "TurnRunner",
    "TurnState",
    "rejection_brief",
    "waiting_brief",
]

#: Each name's module, imported on first use (``holon.lazy``): the daemon needs the turn's types and
#: briefs at start, the runner (context assembly, tools) only for its first turn (issue 18).
__getattr__ = lazy.exports(
    __name__,
    {
        "INPUT_SHARE": "holon.runtime.turn.prompt",
        "ProviderResolver": "holon.runtime.turn.state",
        "TurnLimits": "holon.runtime.turn.state",
        "TurnObserver": "holon.runtime.turn.state",
        "TurnResult": "holon.runtime.turn.state",
        "TurnRunner": "holon.runtime.turn.runner",
        "TurnState": "holon.runtime.turn.state",
        "rejection_brief": "holon.runtime.turn.briefs",
        "waiting_brief": "holon.runtime.turn.briefs",
    },
)
