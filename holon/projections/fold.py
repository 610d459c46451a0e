"""Folding events into projection states: routing, the fold itself, views and derivations.

``fold(states, events)`` is the whole projector as a pure function over a mapping from
``(kind, key)`` to state. The live projector passes a mapping that loads rows on demand; replay
and the property tests pass a plain dict. Either way the same reducers see the same events in the
same order, so ``fold(fold({}, prefix), suffix) == fold({}, prefix + suffix)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from holon.ledger import Event, NewEvent
from holon.ledger import events as ev
from holon.ledger.events import PAYLOAD_TYPES
from holon.projections import reducers as r
from holon.projections.durable import (
    DurableEvent,
    DurableState,
    ProposalEvent,
    ProposalState,
    apply_durable,
    apply_proposal,
)
from holon.projections.episodes import EPISODE_TYPES, apply_episode_drafts, consumed_inputs, ignores, sealed_payload
from holon.projections.state import (
    AgentState,
    EpisodeDrafts,
    State,
    TaskProjection,
    TimerProjection,
    WaitProjection,
    WorkingMemory,
    WorkingMemoryBaseline,
    WorkItemState,
)

__all__ = [
    "KINDS",
    "MEMO_PENDING",
    "Key",
    "Kind",
    "RangeReader",
    "derive",
    "fold",
    "fold_event",
    "folds",
    "needs_decoding",
    "routes",
    "row_columns",
    "state_json",
    "working_memory_view",
]

Key = tuple[str, str]
"""(kind, key) of one projection row."""

#: ``derive`` memo placeholder: a delta is pending and the baseline it yields is not folded yet.
#: Distinct from ``None``, which is the baseline of an agent that never had a delta.
MEMO_PENDING: Any = object()


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    model: type[State]
    reducer: Callable[..., State | None]
    keyed: bool = False
    """The reducer takes the row's key as a third argument (one event may fold into several rows)."""
    ignores: Callable[[Any, str], bool] | None = None  # Any: the kind's own state model, or None
    """(state, event type) -> whether the reducer returns ``state`` unchanged for any event of that
    type, whatever its payload (see ``needs_decoding``)."""


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("agent", AgentState, r.apply_agent),
        Kind("working_memory", WorkingMemory, r.apply_working_memory),
        Kind("wm_baseline", WorkingMemoryBaseline, r.apply_baseline),
        Kind("work_item", WorkItemState, r.apply_work_item),
        Kind("task", TaskProjection, r.apply_task),
        Kind("wait", WaitProjection, r.apply_wait),
        Kind("timer", TimerProjection, r.apply_timer),
        Kind("episode_drafts", EpisodeDrafts, apply_episode_drafts, ignores=ignores),
        Kind("durable", DurableState, apply_durable, keyed=True),
        Kind("proposal", ProposalState, apply_proposal, keyed=True),
    )
}

#: kind -> the event types its reducer reads (the reducers' closed sub-unions of ``Payload``).
_READS: dict[str, frozenset[str]] = {
    "agent": ev.tags_of(r.AgentEvent),
    "working_memory": ev.tags_of(r.WorkingMemoryEvent),
    "work_item": ev.tags_of(r.WorkItemEvent),
    "task": ev.tags_of(r.TaskEvent),
    "wait": ev.tags_of(r.WaitEvent),
    "timer": ev.tags_of(r.TimerEvent),
    "wm_baseline": ev.tags_of(ev.WorkingMemoryDelta),
    "durable": ev.tags_of(DurableEvent),
    "proposal": ev.tags_of(ProposalEvent),
    "episode_drafts": EPISODE_TYPES,
}


def _agent_of(e: Event) -> str:
    return e.agent_id


def _by_field(field: str) -> Callable[[Event], str | None]:
    return lambda e: getattr(e.payload, field)


def _entry_and_superseded(e: Event) -> list[str]:
    p = e.payload
    assert isinstance(p, DurableEvent)  # routed by _READS["durable"]
    return [p.entry_id, *p.supersedes] if isinstance(p, ev.DurableRecorded) else [p.entry_id]


_KeyOf = Callable[[Event], "str | list[str] | None"]


def _route_table() -> dict[str, tuple[tuple[str, _KeyOf], ...]]:
    table: dict[str, list[tuple[str, _KeyOf]]] = {t: [] for t in PAYLOAD_TYPES}
    key_of: dict[str, _KeyOf] = {
        "agent": _agent_of,
        "working_memory": _agent_of,
        "work_item": _by_field("work_item_id"),
        "task": _by_field("task_id"),
        "wait": _by_field("wait_id"),
        "timer": _by_field("timer_id"),
        "wm_baseline": _agent_of,
        "durable": _entry_and_superseded,
        "proposal": _by_field("proposal_id"),
        "episode_drafts": _agent_of,
    }
    for t, route in table.items():
        route.extend((kind, key_of[kind]) for kind, reads in _READS.items() if t in reads)
    return {t: tuple(r) for t, r in table.items()}


_ROUTES = _route_table()

#: Event types every projection reading them keys by the event's agent and may ignore by state:
#: type -> those kinds (``needs_decoding``).
_IGNORABLE: dict[str, tuple[str, ...]] = {
    t: tuple(kind for kind, _key_of in route)
    for t, route in _ROUTES.items()
    if route and all(KINDS[kind].ignores is not None and key_of is _agent_of for kind, key_of in route)
}


#: Event types no projection reads.
_UNREAD = frozenset(t for t, route in _ROUTES.items() if not route)


def folds(event_type: str) -> bool:
    """Whether any projection reads events of this type (replay skips decoding the others)."""
    return event_type not in _UNREAD  # an unknown type is read, and fails its decoding


def needs_decoding(states: Mapping[Key, State | None], event_type: str, agent_id: str) -> bool:
    """Whether a stored event of ``event_type`` by ``agent_id`` can change any of ``states``: not
    when no projection reads the type (``folds``), nor when every projection reading it ignores it
    in its current state (an open episode draft and a tool call). Replay and catch-up skip such
    rows without decoding them; folding them would return every state unchanged."""
    kinds = _IGNORABLE.get(event_type)
    if kinds is None:
        return event_type not in _UNREAD  # ``folds``, inlined: this runs for every row replayed
    for kind in kinds:
        ignores = KINDS[kind].ignores
        assert ignores is not None  # only such kinds are listed
        if not ignores(states.get((kind, agent_id)), event_type):
            return True
    return False


def routes(event: Event) -> list[Key]:
    """The projection rows an event may change."""
    out = []
    for kind, key_of in _ROUTES[event.type]:
        key = key_of(event)
        if isinstance(key, str):
            out.append((kind, key))
        elif key is not None:
            out.extend((kind, k) for k in dict.fromkeys(key))
    return out


#: type -> (kind, key of an event, reducer, keyed) of each projection reading it: ``_ROUTES`` with
#: each kind's reducer looked up once (``fold_event`` runs for every event appended or replayed).
#: ``key_of`` is ``None`` for the kinds keyed by the event's agent (most of them): ``fold_event``
#: reads ``event.agent_id`` itself instead of calling ``_agent_of``.
_FOLDS = {
    t: tuple(
        (kind, None if key_of is _agent_of else key_of, KINDS[kind].reducer, KINDS[kind].keyed)
        for kind, key_of in route
    )
    for t, route in _ROUTES.items()
}


def fold_event(states: MutableMapping[Key, State | None], event: Event) -> list[Key]:
    """Apply one event; returns the keys whose state changed (in ``routes`` order)."""
    changed = []
    # This runs for every event appended or replayed: the common route (one row keyed by the
    # event's agent, a held row) takes no call but the reducer's (issue 18, step 5).
    for kind, key_of, reducer, keyed in _FOLDS[event.type]:
        if key_of is None:
            key = (kind, event.agent_id)
            old = states[key] if key in states else states.get(key)
            new = reducer(old, event)
            if new is not old:
                states[key] = new
                changed.append(key)
            continue
        found = key_of(event)
        if found is None:
            continue
        for k in (found,) if isinstance(found, str) else dict.fromkeys(found):
            key = (kind, k)
            old = states.get(key)
            new = reducer(old, event, k) if keyed else reducer(old, event)
            if new is not old:
                states[key] = new
                changed.append(key)
    return changed


def fold(states: MutableMapping[Key, State | None], events: Iterable[Event]) -> MutableMapping[Key, State | None]:
    for event in events:
        fold_event(states, event)
    return states


def state_json(state: State) -> str:
    """The stored form of a state: canonical JSON, so dict key order never changes the bytes."""
    # Field order is the model's; every dict a reducer builds is key-sorted, so the bytes are a
    # function of the state alone (replay compares them byte for byte).
    return state.model_dump_json()


def row_columns(kind: str, state: State) -> tuple[str, str | None, str | None]:
    """(agent_id, status, label) columns of a projection row, for indexed queries."""
    assert isinstance(state, KINDS[kind].model), (kind, type(state).__name__)
    match state:
        case AgentState():
            return state.agent_id, state.status, state.name
        case WorkItemState() | WaitProjection() | TimerProjection() | ProposalState():
            return state.agent_id, state.status, None
        case TaskProjection():
            return state.agent_id, state.state, None
        case DurableState():
            return state.agent_id, state.status, state.entry.owner
        case WorkingMemory() | WorkingMemoryBaseline() | EpisodeDrafts():
            return state.agent_id, None, None
    raise TypeError(f"no projection kind folds into {type(state).__name__}")  # State is open: not a closed union


def working_memory_view(wm: WorkingMemory | None, item: WorkItemState | None) -> dict[str, Any]:
    """Working memory as an agent sees it: agent-level fields plus the active work item's details."""
    base = wm.model_dump(mode="json", exclude={"agent_id"}) if wm is not None else {}
    if item is not None and wm is not None and wm.active_work_item == item.work_item_id:
        base.update(
            objective=item.objective,
            delivery_target=item.delivery_target,
            plan=list(item.plan),
            todos=[t.model_dump(mode="json") for t in item.todos],
            work_item_title=item.title,
            work_item_constraints=list(item.constraints),
        )
    else:
        base.update(
            objective="", delivery_target=None, plan=[], todos=[], work_item_title=None, work_item_constraints=[]
        )
    return dict(sorted(base.items()))


#: Event types after which a draft may be ready to seal (``_seal_ready``).
_SEALING = EPISODE_TYPES - {"episode.sealed"}

RangeReader = Callable[[str, int, int], list[Event]]
"""(agent id, first seq, last seq) -> that agent's events in the range, in order."""


def derive(
    states: MutableMapping[Key, State | None],
    events: Iterable[Event],
    memo: dict[str, tuple[State | None, dict[str, Any]]] | None = None,
    read: RangeReader | None = None,
) -> list[NewEvent]:
    """Events derived after folding ``events``: a working-memory delta per settled turn.

    A delta lists the view fields whose value differs from the agent's baseline (the digests of
    the previous delta). ``memo`` (agent -> (baseline state, the view it was made from)) lets a
    long-lived projector compare plain values instead of hashing every field; it only applies
    while the baseline object is the one it was recorded with, so the result is the same with or
    without it.
    """
    events = events if isinstance(events, list) else list(events)
    out: list[NewEvent] = _seal_ready(states, events, read)
    for event in events:
        # The type tag, not ``isinstance``: a failed ``isinstance`` against a payload class (an
        # ABC metaclass) costs 0.18 us, and this runs for every event appended (issue 18, step 5).
        if event.type != "turn.settled":
            continue
        p = event.payload
        assert type(p) is ev.TurnSettled
        agent = event.agent_id
        wm = states.get(("working_memory", agent))
        assert wm is None or isinstance(wm, WorkingMemory)
        item = states.get(("work_item", wm.active_work_item)) if wm and wm.active_work_item else None
        assert item is None or isinstance(item, WorkItemState)
        view = working_memory_view(wm, item)
        base = states.get(("wm_baseline", agent))
        seen = memo.get(agent) if memo is not None else None
        if seen is not None and seen[0] is base:
            changes = {k: v for k, v in view.items() if seen[1].get(k) != v}
        else:
            old = base.digests if isinstance(base, WorkingMemoryBaseline) else {}
            changes = {k: v for k, v in view.items() if old.get(k) != r.value_digest(v)}
        if changes:
            delta = NewEvent(
                agent_id=agent,
                # The values come from ``model_dump(mode="json")``: already valid JSON, so the
                # deep JsonValue validation is skipped.
                payload=_delta(p.turn_id, changes),
                origin="runtime:projector",
                authority="runtime",
                turn_id=p.turn_id,
            )
            out.append(delta)
        if memo is not None:
            # The baseline after this delta is folded is a new object; remember the view under a
            # placeholder that ``Projector`` re-keys once the delta has been applied.
            memo[agent] = (MEMO_PENDING if changes else base, view)
    return out


_DELTA_FIELDS = frozenset({"turn_id", "changes"})
_new = object.__new__
_set = object.__setattr__


def _delta(turn_id: str | None, changes: dict[str, Any]) -> ev.WorkingMemoryDelta:
    """``WorkingMemoryDelta.model_construct(turn_id=..., changes=...)``, built directly: the same
    field dict (in field order) and set fields, without ``model_construct``'s walk over every
    field's default (5 us of each settled turn's derivation; issue 18, step 5).
    ``test_a_delta_built_directly_equals_model_construct`` compares the two."""
    d = _new(ev.WorkingMemoryDelta)
    _set(d, "__dict__", {"type": "working_memory.delta", "turn_id": turn_id, "changes": changes})
    _set(d, "__pydantic_fields_set__", set(_DELTA_FIELDS))
    _set(d, "__pydantic_extra__", None)
    _set(d, "__pydantic_private__", None)
    return d


def _seal_ready(
    states: MutableMapping[Key, State | None], events: list[Event], read: RangeReader | None
) -> list[NewEvent]:
    """An ``episode.sealed`` event for every draft that reached a boundary in ``events``."""
    out: list[NewEvent] = []
    # This runs after every append, and most appends make nothing ready: a plain loop, and the
    # agent's drafts looked at before anything else (generators cost more than the check).
    agents: dict[str, None] = {}
    for e in events:
        if e.type in _SEALING:
            agents[e.agent_id] = None
    for agent in agents:
        drafts = states.get(("episode_drafts", agent))
        if not isinstance(drafts, EpisodeDrafts) or not drafts.ready:
            continue
        turn_id = next((e.turn_id for e in reversed(events) if e.agent_id == agent and e.turn_id), None)
        for d in drafts.ready:
            item = states.get(("work_item", d.work_item_id)) if d.work_item_id else None
            assert d.seq_end is not None
            covered = read(agent, d.seq_start, d.seq_end) if read is not None else []
            # The inputs its turns took before the range are their requests: quoted here too.
            earlier = sorted(s for s in consumed_inputs(covered) if s < d.seq_start)
            if earlier and read is not None:
                wanted = set(earlier)
                covered = [e for e in read(agent, earlier[0], d.seq_start - 1) if e.seq in wanted] + covered
            payload = sealed_payload(d, item if isinstance(item, WorkItemState) else None, covered)
            out.append(
                NewEvent(
                    agent_id=agent,
                    payload=payload,
                    origin="runtime:projector",
                    authority="runtime",
                    episode_id=payload.episode_id,
                    work_item_id=d.work_item_id,
                    turn_id=turn_id,
                )
            )
    return out
