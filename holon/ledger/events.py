"""The catalog of event payloads: one frozen pydantic model per event type.

Each model has a stable string tag in ``type`` (``"work_item.completed"``) and a ``VERSION``. The
tag, never a Python import path, is what the ledger stores, so classes can be renamed freely.
``Payload`` is the discriminated union over ``type`` and the one list of event types:
``PAYLOAD_TYPES`` (tag -> model, whose ``VERSION`` is the version written) is derived from it.

Fields typed ``LargeText`` may hold a lot of text (tool output, model replies, message bodies).
When such a field is longer than the configured threshold, the codec moves its body to the blob
store and the stored event keeps a ``BlobRef`` (hash, size, preview) in its place.

Adding a type: write the model, add it to ``Payload``. Changing a type: bump ``VERSION`` and add
an upcaster in ``holon.ledger.codec`` that turns the previous version's dict into the new one.
"""

from __future__ import annotations

import re
import typing
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, field_validator

__all__ = [
    "PAYLOAD_ADAPTER",
    "PAYLOAD_TYPES",
    "Authority",
    "BlobRef",
    "LargeText",
    "Payload",
    "PayloadBase",
    "tags_of",
]

#: How much authority the cause of an event carries. Only ``operator`` may instruct an agent;
#: everything else is information the agent weighs, never an order.
Authority = Literal["operator", "agent", "tool", "runtime", "timer", "external"]

JSONValue = JsonValue  # arbitrary JSON (dict/list/str/int/float/bool/None); pydantic validates JSON-ness.


class BlobRef(BaseModel):
    """Stands in for a large text whose body lives in the blob store."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    blob: str = Field(pattern=r"^[0-9a-f]{64}$")
    """sha256 of the UTF-8 body."""
    size: int = Field(ge=0)
    """Body size in bytes."""
    preview: str
    """The start of the body, for display without a blob read."""


LargeText = str | BlobRef


class PayloadBase(BaseModel):
    # NaN and infinity have no canonical JSON form, so they are refused at the door.
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid", allow_inf_nan=False)
    VERSION: ClassVar[int] = 1


# --- agents ---------------------------------------------------------------------------------


# "tokens" (plural) is a count, as in max_tokens_per_turn and max_output_tokens, not a credential.
_SECRET_SETTING = re.compile(r"(api[_-]?key|token(?!s)|secret|password|passwd)", re.I)


def _no_secret_settings(settings: dict[str, JSONValue]) -> dict[str, JSONValue]:
    """Secrets never enter the ledger: a setting may name an environment variable, not hold a key."""
    for key in settings:
        if _SECRET_SETTING.search(key) and not key.endswith("_env"):
            raise ValueError(
                f"setting {key!r} looks like a secret; store the name of an environment variable "
                f"holding it instead (e.g. '{key}_env')"
            )
    return settings


class AgentCreated(PayloadBase):
    type: Literal["agent.created"] = "agent.created"
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")
    template: str = "assistant"
    home: str
    """The agent's home directory (memory files, AGENTS.md)."""
    settings: dict[str, JSONValue] = Field(default_factory=dict)
    workspace: str | None = None
    """Where the agent's commands run; its home when ``None``."""
    parent_id: str | None = None
    """The agent that spawned this one, for child agents."""

    _no_secrets = field_validator("settings")(_no_secret_settings)


class AgentConfigured(PayloadBase):
    type: Literal["agent.configured"] = "agent.configured"
    changes: dict[str, JSONValue]
    """Setting name -> new value; ``None`` resets a setting to its default."""

    _no_secrets = field_validator("changes")(_no_secret_settings)


class AgentDeleted(PayloadBase):
    """The operator deleted the agent: it leaves the host and its home; its events stay."""

    type: Literal["agent.deleted"] = "agent.deleted"
    reason: str = ""


# --- inputs and turns -----------------------------------------------------------------------


class MessageReceived(PayloadBase):
    """An input for an agent. Its envelope's ``origin``/``authority`` say who it is from."""

    type: Literal["message.received"] = "message.received"
    text: LargeText
    sender: str = "operator"
    channel: str = "cli"
    in_reply_to: str | None = None
    """Event id of the message this one answers, when known."""


class TurnStarted(PayloadBase):
    VERSION: ClassVar[int] = 2
    type: Literal["turn.started"] = "turn.started"
    turn_id: str
    inputs: list[int] = Field(default_factory=list)
    """Ledger sequence numbers of the inputs this turn handles."""
    node: str | None = None
    """The node that runs the turn (``holon serve --node NAME``, RFC 0008); ``None`` for a single
    node, and for turns recorded before version 2 (upcast: ``holon.ledger.codec``)."""


class Usage(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")
    prompt_tokens: int = Field(0, ge=0)
    completion_tokens: int = Field(0, ge=0)
    total_tokens: int = Field(0, ge=0)
    cached_tokens: int = Field(0, ge=0)


TurnOutcome = Literal["completed", "waiting", "failed", "interrupted"]


class TurnSettled(PayloadBase):
    type: Literal["turn.settled"] = "turn.settled"
    turn_id: str
    outcome: TurnOutcome
    reason: str | None = None
    rounds: int = Field(0, ge=0)
    tool_calls: int = Field(0, ge=0)
    reply: LargeText | None = None
    requeue: bool = False
    """Put the turn's inputs back in the queue (set for interruptions and transient model failures)."""
    rejected: list[int] = Field(default_factory=list)
    """Inputs (their seqs) this failed turn settles unanswered, for ``reason``: never re-queued, and
    told to the operator by a ``brief.delivered`` of kind ``error`` in the same transaction. Empty on
    rows written before rejection existed (such a failed turn consumed its inputs silently)."""
    usage: Usage = Usage.model_construct()  # not Usage(): that would build the deferred schema at import
    cost_usd: float | None = Field(None, ge=0)


class ModelRequested(PayloadBase):
    type: Literal["model.requested"] = "model.requested"
    turn_id: str
    round: int = Field(ge=0)
    model: str
    messages: int = Field(ge=0)
    tools: int = Field(0, ge=0)
    prompt_tokens_est: int = Field(0, ge=0)


class ModelStarted(PayloadBase):
    """A model call waited for its model to start (the model process importing litellm, the local
    model server loading): a cold start, recorded apart so model latency never includes it. Appended
    just before the call's ``model.responded``; traces draw it as its own span (RFC 0007)."""

    type: Literal["model.started"] = "model.started"
    turn_id: str
    round: int = Field(ge=0)
    what: str
    """What started: ``model process`` or ``local model``."""
    duration_ms: float = Field(ge=0)
    """How long the call waited for it (from the call to the model being ready)."""


class ToolCallSpec(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")
    call_id: str
    tool: str
    arguments: str
    """The arguments exactly as the model sent them (a JSON string, possibly malformed)."""


class ModelResponded(PayloadBase):
    type: Literal["model.responded"] = "model.responded"
    turn_id: str
    round: int = Field(ge=0)
    model: str
    content: LargeText | None = None
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = Usage.model_construct()  # not Usage(): that would build the deferred schema at import
    cost_usd: float | None = Field(None, ge=0)
    latency_ms: float = Field(0.0, ge=0)
    error: str | None = None
    """Set when the call failed; ``error_kind`` classifies it."""
    error_kind: str | None = None


class ToolCalled(PayloadBase):
    type: Literal["tool.called"] = "tool.called"
    call_id: str
    tool: str
    arguments: LargeText


ToolStatus = Literal["ok", "error", "invalid", "timeout", "interrupted"]


class ToolResulted(PayloadBase):
    type: Literal["tool.resulted"] = "tool.resulted"
    call_id: str
    tool: str
    status: ToolStatus
    output: LargeText
    duration_ms: float = Field(0.0, ge=0)


# --- work items and todos -------------------------------------------------------------------


class WorkItemOpened(PayloadBase):
    type: Literal["work_item.opened"] = "work_item.opened"
    work_item_id: str
    title: str
    objective: str = ""
    delivery_target: str | None = None
    plan: list[str] = Field(default_factory=list)
    constraints: list[str] = Field(default_factory=list)
    activate: bool = True
    """Make it the active work item at once."""


WorkItemStatus = Literal["open", "active", "blocked", "completed", "abandoned"]


class WorkItemUpdated(PayloadBase):
    """A partial update: fields left ``None`` are unchanged."""

    type: Literal["work_item.updated"] = "work_item.updated"
    work_item_id: str
    title: str | None = None
    objective: str | None = None
    delivery_target: str | None = None
    plan: list[str] | None = None
    constraints: list[str] | None = None
    status: Literal["open", "blocked", "abandoned"] | None = None


class WorkItemPicked(PayloadBase):
    """Switch the active work item. ``work_item_id=None`` returns to the previous one."""

    type: Literal["work_item.picked"] = "work_item.picked"
    work_item_id: str | None = None


class WorkItemCompleted(PayloadBase):
    type: Literal["work_item.completed"] = "work_item.completed"
    work_item_id: str
    report: LargeText


TodoStatus = Literal["pending", "in_progress", "done", "dropped"]


class TodoChanged(PayloadBase):
    type: Literal["todo.changed"] = "todo.changed"
    work_item_id: str
    op: Literal["add", "update", "remove"]
    todo_id: str
    text: str | None = None
    status: TodoStatus | None = None


# --- things the agent keeps in mind ---------------------------------------------------------


class ConstraintChanged(PayloadBase):
    """An agent-wide constraint or scope limit (work-item ones live on the work item)."""

    type: Literal["constraint.changed"] = "constraint.changed"
    op: Literal["add", "remove"]
    text: str


class DecisionRecorded(PayloadBase):
    type: Literal["decision.recorded"] = "decision.recorded"
    text: str
    work_item_id: str | None = None


class FollowUpChanged(PayloadBase):
    type: Literal["follow_up.changed"] = "follow_up.changed"
    follow_up_id: str
    op: Literal["add", "resolve"]
    text: str | None = None
    due_us: int | None = None


class FileTouched(PayloadBase):
    type: Literal["file.touched"] = "file.touched"
    path: str
    action: Literal["read", "write", "create", "delete"] = "write"


# --- tasks, waits, timers -------------------------------------------------------------------


TaskState = Literal["pending", "running", "succeeded", "failed", "cancelled", "interrupted"]


class TaskCreated(PayloadBase):
    type: Literal["task.created"] = "task.created"
    task_id: str
    kind: Literal["command", "child_agent", "other"] = "command"
    title: str
    spec: dict[str, JSONValue] = Field(default_factory=dict)


class TaskStateChanged(PayloadBase):
    type: Literal["task.state_changed"] = "task.state_changed"
    task_id: str
    state: TaskState
    detail: str | None = None


class TaskResulted(PayloadBase):
    type: Literal["task.resulted"] = "task.resulted"
    task_id: str
    state: Literal["succeeded", "failed", "cancelled", "interrupted"]
    output: LargeText = ""
    exit_code: int | None = None


class CommandStarted(PayloadBase):
    """A ``run_command`` process exists and has not yet run anything (it waits on a gate until
    this is committed): recovery stops it after a crash, foreground or background (RFC 0002)."""

    type: Literal["command.started"] = "command.started"
    task_id: str
    """Names the command's files under ``<home>/tasks/``, and its task if it goes to the background."""
    process: str | None = None
    """``pid:start-time:boot-id`` of the process group leader (``holon.runtime.tasks.process_identity``)."""
    sandbox: str = ""
    """How it is confined: ``namespaces``, ``wrapper`` or ``none``."""


WaitOn = Literal["task", "timer", "operator", "external", "until"]


class WaitRegistered(PayloadBase):
    type: Literal["wait.registered"] = "wait.registered"
    wait_id: str
    on: WaitOn
    target: str | None = None
    """The task id, timer id or event name waited for."""
    recheck_at_us: int
    """Every wait has a time at which the agent is woken to look again."""
    reason: str = ""


class WaitResolved(PayloadBase):
    type: Literal["wait.resolved"] = "wait.resolved"
    wait_id: str
    resolution: Literal["satisfied", "recheck", "cancelled"]
    by_seq: int | None = None


class TimerScheduled(PayloadBase):
    type: Literal["timer.scheduled"] = "timer.scheduled"
    timer_id: str
    kind: Literal["once", "interval", "cron"]
    spec: str
    """ISO time for ``once``, seconds for ``interval``, a crontab line for ``cron``."""
    next_fire_us: int | None = None
    prompt: str | None = None


class TimerFired(PayloadBase):
    type: Literal["timer.fired"] = "timer.fired"
    timer_id: str
    scheduled_for_us: int
    missed: int = Field(0, ge=0)
    """Firings missed during downtime and coalesced into this one."""
    next_fire_us: int | None = None


class TimerCancelled(PayloadBase):
    type: Literal["timer.cancelled"] = "timer.cancelled"
    timer_id: str


# --- derived records ------------------------------------------------------------------------


class WorkingMemoryDelta(PayloadBase):
    """What changed in an agent's working memory since the previous delta (top-level fields)."""

    type: Literal["working_memory.delta"] = "working_memory.delta"
    turn_id: str | None = None
    changes: dict[str, JSONValue]


class EpisodeSealed(PayloadBase):
    type: Literal["episode.sealed"] = "episode.sealed"
    episode_id: str
    seq_start: int = Field(ge=1)
    seq_end: int = Field(ge=1)
    boundary: str
    work_item_id: str | None = None
    topic: str | None = None
    objective: str = ""
    summary: str = ""
    files: list[str] = Field(default_factory=list)
    commands: list[dict[str, JSONValue]] = Field(default_factory=list)
    decisions: list[str] = Field(default_factory=list)
    follow_ups: list[str] = Field(default_factory=list)
    turns: int = Field(0, ge=0)
    tool_calls: int = Field(0, ge=0)
    excerpts: list[str] = Field(default_factory=list)
    """The first operator messages of the episode, shortened."""
    last_reply: str = ""
    sources: list[int] | None = None
    """Seqs of the events the summary quotes (operator messages, commands and their results, files,
    decisions, follow-ups, the last reply), ascending. ``None`` on rows written before sources were
    recorded: such a summary may quote any operator message of its range, even one still pending."""


class BriefDelivered(PayloadBase):
    """A message from an agent to the operator: progress, a result, a question."""

    type: Literal["brief.delivered"] = "brief.delivered"
    kind: Literal["progress", "result", "question", "budget", "error"]
    text: LargeText
    work_item_id: str | None = None


MemoryScope = Literal["operator", "workspace", "agent"]


class MemoryWritten(PayloadBase):
    """A write to a curated memory file (``memory/self.md``, the operator's file, the workspace file).

    ``path`` is relative to the scope's directory. ``text`` is what the write added: the stamped
    entry of an ``append``, the whole new content of a ``replace``, or the summary that replaced an
    ``archive``d file. Replaying these events in order rebuilds every curated file.
    """

    type: Literal["memory.written"] = "memory.written"
    scope: MemoryScope
    path: str = Field(min_length=1, max_length=300)
    op: Literal["append", "replace", "archive"]
    text: LargeText
    size: int = Field(ge=0)
    """Size of the file in bytes after the write."""
    digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    """sha256 of the file after the write."""
    archive: str | None = None
    """For ``archive``: where the old content went, relative to the scope's directory."""


# --- durable memory and proposals (RFC 0006) --------------------------------------------------

DurableType = Literal["preference", "identity", "fact", "procedure", "blocker", "reference"]
Verification = Literal["none", "verify_before_use", "recheck"]
"""``none``: take it as stated (the operator said it); ``verify_before_use``: check it before
relying on it (facts about a workspace drift); ``recheck``: it may be fixed by now (blockers)."""


class DurableEntry(BaseModel):
    """What a durable memory entry says, and where it came from. Shared by records and proposals."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid", allow_inf_nan=False)

    scope: MemoryScope
    kind: DurableType
    subject: str = Field(min_length=1, max_length=200)
    """Entries with the same scope, owner and subject are about the same thing: a newer one
    supersedes the older instead of piling up."""
    text: str = Field(min_length=1, max_length=4000)
    owner: str = Field(min_length=1, max_length=600)
    """Who may recall it: ``operator`` (every agent of the home), ``workspace:<path>`` (agents
    sharing that workspace) or ``agent:<id>``."""
    verification: Verification = "none"
    stale_after_s: int | None = Field(None, ge=0)
    """Seconds after the last observation or verification at which it turns stale; ``None``: never."""
    evidence: list[int] = Field(default_factory=list, max_length=50)
    """Ledger seqs of the events it was drawn from."""
    observed_us: int = Field(ge=0)
    confidence: float = Field(1.0, ge=0.0, le=1.0)


class DurableRecorded(PayloadBase):
    """A durable memory entry becomes active; the entries it ``supersedes`` stop being recalled."""

    type: Literal["durable.recorded"] = "durable.recorded"
    entry_id: str
    entry: DurableEntry
    supersedes: list[str] = Field(default_factory=list)
    source: Literal["evolve", "proposal", "operator", "model"] = "evolve"
    proposal_id: str | None = None
    superseded_by: str | None = None
    """Recorded as history, already superseded by this (active) entry: an observation older than
    the active entry of its subject that arrived late (evolve jobs may finish out of order)."""


class DurableVerified(PayloadBase):
    """The entry was observed again: its freshness restarts from that observation."""

    type: Literal["durable.verified"] = "durable.verified"
    entry_id: str
    evidence: list[int] = Field(default_factory=list, max_length=50)
    observed_us: int | None = Field(None, ge=0)
    """When the evidence was observed (not when the job ran: a job may run late, or again).
    ``None`` in events written before the field existed: the event's own time is used."""


class EvolveModelUsed(PayloadBase):
    """A model call an evolve job made (model-assisted extraction), outside any turn.

    Appended with the job's output, so durable memory says which calls shaped it, and counted in
    a background agent's daily token and cost budgets like its turns' calls."""

    type: Literal["evolve.model_used"] = "evolve.model_used"
    job: str
    turn_id: str
    model: str
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float | None = Field(None, ge=0)
    latency_ms: float = Field(0.0, ge=0)
    candidates: int = Field(0, ge=0)
    """Candidates the model answered."""
    kept: int = Field(0, ge=0)
    """Of those, how many passed the confidence and evidence gates."""
    error: str | None = None


class DurableForgotten(PayloadBase):
    """The operator asked to forget the entry: it stays in the ledger but is never recalled."""

    type: Literal["durable.forgotten"] = "durable.forgotten"
    entry_id: str
    reason: str = ""


class SkillDraft(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    skill_id: str = Field(pattern=r"^[a-z0-9][a-z0-9\-]{0,63}$")
    name: str = Field(min_length=1, max_length=120)
    description: str = Field(max_length=1000)
    body: str = Field(max_length=20_000)
    """The SKILL.md text."""
    evidence: list[int] = Field(default_factory=list, max_length=50)


class MemoryWriteDraft(BaseModel):
    """An agent's write to operator-scope memory (``operator.md``, which enters every agent's
    prompt): proposed, applied only when the operator accepts it (issue 14, finding 9)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    scope: MemoryScope = "operator"
    path: str = "operator.md"
    op: Literal["append", "replace"]
    text: str
    heading: str | None = None


class ProposalCreated(PayloadBase):
    """Something that would change how an agent treats the operator, waiting for the operator's word."""

    type: Literal["proposal.created"] = "proposal.created"
    proposal_id: str
    kind: Literal["memory", "skill", "memory_write"]
    entry: DurableEntry | None = None
    skill: SkillDraft | None = None
    write: MemoryWriteDraft | None = None
    """For ``memory_write``: the edit to apply on acceptance."""
    reason: str = ""


class ProposalAccepted(PayloadBase):
    type: Literal["proposal.accepted"] = "proposal.accepted"
    proposal_id: str
    text: str | None = None
    """The operator's edited text, when they edited it."""


class ProposalDismissed(PayloadBase):
    type: Literal["proposal.dismissed"] = "proposal.dismissed"
    proposal_id: str
    reason: str = ""


class ContextAssembled(PayloadBase):
    """What one model request contained and why: the manifest, and the exact prompt when recorded."""

    type: Literal["context.assembled"] = "context.assembled"
    turn_id: str
    round: int = Field(0, ge=0)
    budget_tokens: int = Field(ge=0)
    used_tokens: int = Field(ge=0)
    manifest_digest: str
    summary: dict[str, JSONValue] = Field(default_factory=dict)
    manifest: LargeText | None = None
    """The full manifest as JSON; written against ``manifest_base`` when that is set."""
    manifest_base: int | None = None
    """The seq of an earlier ``context.assembled`` of the same turn (its first round) whose
    manifest this one's is written against: an entry of ``sections`` that is the same as that
    manifest's entry at index ``i`` is the number ``i`` (a later round repeats most of the first
    round's ~100 entries; issue 18). ``holon.context.manifests`` reads it whole."""
    prompt: LargeText | None = None
    """The exact messages sent, as JSON (``[context] record_prompts``)."""
    tools: LargeText | None = None
    """The tool schemas sent, as JSON; recorded in round 0 only (a turn's tools do not change)."""


# --- nodes (RFC 0008, several nodes on PostgreSQL) ------------------------------------------


class LeaseAcquired(PayloadBase):
    """``node`` became the agent's owner with fencing ``token`` (appended in the transaction that
    took the lease, under the ledger lock, so ownership changes are ordered with every event)."""

    type: Literal["lease.acquired"] = "lease.acquired"
    node: str
    token: int = Field(ge=1)
    lease_s: float = Field(gt=0)


class LeaseReleased(PayloadBase):
    """``node`` gave the agent's lease (``token``) up: a clean stop or a move between turns."""

    type: Literal["lease.released"] = "lease.released"
    node: str
    token: int = Field(ge=1)
    reason: str = ""


class TurnAbortRequested(PayloadBase):
    """An operator asked ``node`` (``POST …/abort``), which does not run the agent's turns, to abort
    turn ``turn_id``: the node that does (the lease holder) aborts it when its watcher reads this,
    if that turn still runs there; otherwise it changes nothing (RFC 0008 section 4, "Aborts across
    nodes"). No projection folds it: the turn's ``turn.settled`` says what became of it."""

    type: Literal["turn.abort_requested"] = "turn.abort_requested"
    turn_id: str
    node: str


Payload = Annotated[
    AgentCreated
    | AgentConfigured
    | AgentDeleted
    | MessageReceived
    | TurnStarted
    | TurnSettled
    | ModelRequested
    | ModelStarted
    | ModelResponded
    | ToolCalled
    | ToolResulted
    | WorkItemOpened
    | WorkItemUpdated
    | WorkItemPicked
    | WorkItemCompleted
    | TodoChanged
    | ConstraintChanged
    | DecisionRecorded
    | FollowUpChanged
    | FileTouched
    | TaskCreated
    | TaskStateChanged
    | TaskResulted
    | CommandStarted
    | WaitRegistered
    | WaitResolved
    | TimerScheduled
    | TimerFired
    | TimerCancelled
    | WorkingMemoryDelta
    | EpisodeSealed
    | BriefDelivered
    | MemoryWritten
    | DurableRecorded
    | DurableVerified
    | DurableForgotten
    | EvolveModelUsed
    | ProposalCreated
    | ProposalAccepted
    | ProposalDismissed
    | ContextAssembled
    | LeaseAcquired
    | LeaseReleased
    | TurnAbortRequested,
    Field(discriminator="type"),
]

PAYLOAD_ADAPTER: TypeAdapter[Payload] = TypeAdapter(Payload, config=ConfigDict(defer_build=True))


def _catalog() -> dict[str, type[Payload]]:
    """Tag -> model, read off ``Payload`` itself: the union is the one list of event types."""
    union, _discriminator = typing.get_args(Payload)
    out: dict[str, type[Payload]] = {}
    for cls in typing.get_args(union):
        tag = cls.model_fields["type"].default
        if tag in out:
            raise TypeError(f"event type {tag!r} is defined twice ({out[tag].__name__}, {cls.__name__})")
        out[tag] = cls
    return out


#: Event type tag -> payload model, derived from ``Payload``.
PAYLOAD_TYPES: dict[str, type[Payload]] = _catalog()


def tags_of(union: object) -> frozenset[str]:
    """The type tags of a union of payload models (``tags_of(TaskCreated | TaskResulted)``)."""
    return frozenset(cls.model_fields["type"].default for cls in typing.get_args(union) or (union,))
