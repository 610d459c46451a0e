"""What a turn asks of the model: the request budget, the inputs it admits, and the record of
each prompt it assembles (``context.assembled``).

**Admission by size.** A turn takes the pending inputs oldest first while their shortened forms
fit ``INPUT_SHARE`` of what the prompt's pinned minimum leaves free (always at least one, at most
``[runtime] max_inputs_per_turn``); the rest stay queued for the next turn. An input too long for
any prompt is shown by reference (a preview and the ``memory_get`` call that reads it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from holon.config import ContextSettings
from holon.context.assembler import Assembly, Budget, Manifest
from holon.context.sections import fixed_minimum, input_tokens
from holon.context.tokens import MESSAGE_OVERHEAD, TokenCounter
from holon.context.view import gather
from holon.ledger import events as ev
from holon.ledger.codec import canonical_json
from holon.projections import Store
from holon.projections.state import AgentState
from holon.runtime.providers.base import ModelSettings

__all__ = ["INPUT_SHARE", "MAX_OUTPUT_RESERVE", "admit", "context_event", "request_budget"]

MAX_OUTPUT_RESERVE = 4_096
INPUT_SHARE = 0.5
"""Share of the prompt budget left free by its pinned minimum that a turn's inputs may fill when
it takes more than one; the rest is room for the turn's own rounds (tool calls and results)."""


def request_budget(
    settings: ModelSettings, context: ContextSettings, known_window: int | None
) -> tuple[ModelSettings, Budget]:
    """The request budget: the model's window (``settings.context_window``, else the provider's
    ``known_window``, else ``[context] default_context_window``) minus the tokens reserved for its reply."""
    window = settings.context_window or known_window or context.default_context_window
    reserve = context.output_reserve_tokens or settings.max_output_tokens or min(MAX_OUTPUT_RESERVE, window // 4)
    reserve = min(reserve, window // 2)
    if settings.max_output_tokens is None:
        settings = dataclasses.replace(settings, max_output_tokens=reserve)
    return settings, Budget(context_window=window, output_reserve=reserve)


def admit(
    store: Store, agent: AgentState, budget: Budget, counter: TokenCounter, tools: list[dict[str, Any]]
) -> list[int]:
    """The oldest pending inputs (at most ``max_inputs_per_turn``) whose shortened forms fit
    ``INPUT_SHARE`` of the budget the prompt's pinned minimum (without inputs) leaves free;
    always the first. An input too long for that is shown by reference when its turn comes
    (the input section's leanest form)."""
    candidates = list(agent.pending_inputs)[: store.settings.runtime.max_inputs_per_turn]
    if len(candidates) <= 1:
        return candidates
    # A provisional view, as the turn would see it if it started now; only sizes are read.
    head = store.ledger.head()
    view = gather(store, agent.agent_id, inputs=candidates, started_seq=head + 1, tools=tools)
    fixed = fixed_minimum(view, counter)  # the pinned sections alone: nothing else is built
    room = (budget.limit - fixed - MESSAGE_OVERHEAD) * INPUT_SHARE
    taken: list[int] = []
    used = 0
    for seq, cost in zip(candidates, input_tokens(view, counter), strict=True):
        if taken and used + cost > room:
            break
        taken.append(seq)
        used += cost
    return taken


def context_event(
    turn_id: str,
    round_no: int,
    budget: Budget,
    a: Assembly,
    *,
    record_prompts: bool,
    base: tuple[int, Manifest] | None = None,
) -> ev.ContextAssembled:
    """What the model is about to see in round ``round_no``: the manifest, a summary, and (with
    ``[context] record_prompts``) the prompt itself. With ``base`` (the seq and manifest of the
    turn's first ``context.assembled``) the manifest is written against that one's: the entries
    it repeats by their index (``manifest_base``)."""
    summary = a.manifest.summary()
    if base is not None:
        manifest, manifest_base = a.manifest.json_bytes_against(base[1]).decode(), base[0]
    else:
        manifest, manifest_base = a.manifest.json_bytes().decode(), None
    prompt = (a.messages_json or canonical_json(a.messages)).decode() if record_prompts else None
    tools = a.tools_json.decode() if record_prompts and round_no == 0 else None
    return ev.ContextAssembled(
        turn_id=turn_id,
        round=round_no,
        budget_tokens=budget.limit,
        used_tokens=a.used_tokens,
        manifest_digest=a.digest,
        summary=dict(summary),
        manifest=manifest,
        manifest_base=manifest_base,
        prompt=prompt,
        tools=tools,
    )
