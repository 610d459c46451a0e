"""``Store``: a home's ledger with its synchronous projections, and typed reads of them.

Most code holds a ``Store``: it appends through ``store.append`` (events, and the events derived
from them, commit together; the projection rows they change are written then or a few commits
later, see ``Projector.settle``) and reads projections through the named, typed reads below (plain
prepared statements on the ledger's connection, merged with the rows the projector holds). SQLModel is imported only by ``projection_rows``, an
inspection read.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, TypeVar, cast

from holon.clock import Clock, SystemClock
from holon.config import HomePaths, Settings
from holon.errors import NotFoundError
from holon.ledger import Event, Ledger, NewEvent
from holon.ledger.anchor import Anchor
from holon.ledger.engines import engine_for
from holon.paths import private_dir
from holon.projections.durable import DurableState, ProposalState
from holon.projections.fold import KINDS, row_columns, working_memory_view
from holon.projections.framework import Host
from holon.projections.local import DEFAULT_NODE, LocalDb, node_db_path
from holon.projections.projector import CURSOR_NAME, PROJECTOR_VERSION, Projector
from holon.projections.replay import ReplayResult, replay
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

if TYPE_CHECKING:
    from holon.ledger.schema import ProjectionRow

__all__ = ["Store"]

S = TypeVar("S", bound=State)

_LISTS_KEPT = 256
"""Queries whose stored rows ``Store._stored`` keeps (cleared past that)."""


class Store:
    def __init__(self, paths: HomePaths, settings: Settings, ledger: Ledger, projector: Projector) -> None:
        self.paths = paths
        self.settings = settings
        self.ledger = ledger
        self.projector = projector
        # Values derived from settled ledger events only (which never change), kept across turns
        # by whoever reads them often (context assembly). Bounded by its users.
        self.memo: dict[object, Any] = {}
        self.node = settings.node.name or DEFAULT_NODE
        """This process's node name (``[node] name``, ``holon serve --node``): where its node-local
        projections live when the ledger is remote (``holon.projections.local``); fixed at the
        first ``local_db()``."""
        self._local: LocalDb | None = None
        # ``_select``'s stored rows per query, decoded, with the ``Projector.written`` they hold for.
        self._lists: dict[tuple[object, ...], tuple[int, list[tuple[str, str | None, str]], dict[str, State]]] = {}

    @classmethod
    def open(
        cls,
        paths: HomePaths,
        settings: Settings,
        *,
        clock: Clock | None = None,
        create: bool = True,
        catch_up: bool = True,
    ) -> Store:
        """Open the database of ``paths``; migrate and catch projections up.

        ``create``: when there is no database file yet, create one (``holon init``; tests). An
        existing file is never initialised over: an empty or foreign one is refused (see
        ``Ledger``). Commands that open a home (``open_home``) pass ``create=False``.
        ``catch_up=False`` leaves projections as they are (``holon ledger verify`` must run on a
        ledger whose damaged rows a catch-up could not fold).
        """
        if create:
            private_dir(paths.root)
        cfg = settings.ledger
        engine = engine_for(paths, settings)  # [storage] url: the home's SQLite file by default
        projector = Projector()
        ledger = Ledger(
            engine,
            clock=clock or SystemClock(),
            blob_threshold=cfg.blob_threshold_bytes,
            preview_chars=cfg.blob_preview_chars,
            hooks=[projector],
            anchor=Anchor(paths.anchor),
            create=create,
        )
        store = cls(paths, settings, ledger, projector)
        try:
            if catch_up and ledger.refusal is None:  # a ledger that lost events is opened for reading only
                store.catch_up()
        except BaseException:
            ledger.close()
            raise
        return store

    def catch_up(self) -> None:
        """Fold any events the projection cursor is missing (older databases, version bumps)."""
        cursor = self._cursor()
        head = self.ledger.head()
        if cursor == (head, PROJECTOR_VERSION):
            if not self.projector.pending:
                self.projector.adopt(head)
            return
        with self.ledger.transaction() as tx:
            self.projector.catch_up(tx)

    def _cursor(self) -> tuple[int, int] | None:
        """The synchronous projector's ``(seq, version)``, or ``None`` before its first fold."""
        rows = self.ledger.query("SELECT seq, version FROM projection_cursors WHERE name = ?", (CURSOR_NAME,))
        return (int(rows[0][0]), int(rows[0][1])) if rows else None

    def append(self, *events: NewEvent) -> list[Event]:
        return self.ledger.append(*events)

    def local_db(self) -> Host:
        """Where node-local projections (the search index) keep their tables and cursor: the
        ledger's own database on SQLite (nothing moves), this node's ``LocalDb`` file when the
        ledger is remote (RFC 0008 section 5)."""
        if self.ledger.engine.dialect == "sqlite":
            return self.ledger
        if self._local is None:
            self._local = LocalDb(self.ledger, node_db_path(self.paths, self.node))
        return self._local

    def cursors(self) -> dict[str, int]:
        """How far each projection has folded the ledger: ``name -> seq``, in name order (a
        node-local projection's cursor included once it was opened in this process)."""
        self.write_projections()
        rows = self.ledger.query("SELECT name, seq FROM projection_cursors ORDER BY name")
        out = {str(name): int(seq) for name, seq in rows}
        if self._local is not None:
            out = dict(sorted({**out, **self._local.cursors()}.items()))
        return out

    # --- typed reads ------------------------------------------------------------------------
    #
    # One accessor per projection kind, returning its state model: ``store.task(id)``,
    # ``store.tasks(agent_id=..., status=...)``. Lists are in the order their rows last changed.
    #
    # The synchronous projector writes its rows every few commits, not at each (``Projector.settle``):
    # a read first makes sure it sees a fold of the whole ledger (``_fresh``). When this process has
    # folded up to the head, a row it holds is served from memory (no query, no JSON validation:
    # ``Projector.held``) and the rows it has not written yet are merged into the rows read from
    # ``projection_rows`` (``Projector.changed``); otherwise the stored cursor says whether the
    # stored rows are current, and when they are not (another process appended and has not
    # written its rows yet, or it was killed) this process catches up from the cursor first.

    def _fresh(self, head: int) -> int | None:
        """Inside ``ledger.reading()``: the head up to which the projector holds a fold (serve
        from it and merge), or ``None`` when ``projection_rows`` alone is current.

        ``head`` is the reading block's; an append of this thread inside the block has moved the
        ledger past it, and the fold held is then at the new head."""
        projector = self.projector
        if projector.folded(head):
            return head
        now = self.ledger.head()
        if now != head and projector.folded(now):
            return now
        if self._cursor() == (now, PROJECTOR_VERSION):
            projector.adopt(now)  # the next reads cost no cursor read
            return now
        if self.ledger.refusal is not None:
            return None  # a ledger refusing writes is read as it is: ``catch_up`` cannot write
        tx = self.ledger.open_transaction
        if tx is not None:
            projector.catch_up(tx)
        else:
            with self.ledger.transaction() as tx:
                projector.catch_up(tx)
        now = self.ledger.head()
        return now if projector.folded(now) else None

    def write_projections(self) -> None:
        """Make ``projection_rows`` current: write the rows this process holds, or catch up from the
        cursor. For reads that are not merged with the projector's rows, and for tests and tools
        that look at the table itself."""
        with self.ledger.reading() as head:
            if self._fresh(head) is None or not self.projector.pending or self.ledger.refusal is not None:
                return
            tx = self.ledger.open_transaction
            if tx is not None:
                self.projector.flush(tx)
            else:
                with self.ledger.transaction() as tx:
                    self.projector.flush(tx)

    def _one(self, kind: str, model: type[S], key: str) -> S | None:
        assert KINDS[kind].model is model, kind
        with self.ledger.reading() as head:
            hit, state = self.projector.held((kind, key), head)
            if hit:
                return cast(S, state)  # the row of a ``kind`` is its model (asserted above)
            fresh = self._fresh(head)
            if fresh is not None and fresh != head:
                hit, state = self.projector.held((kind, key), fresh)
                if hit:
                    return cast(S, state)
            rows = self.ledger.query("SELECT state FROM projection_rows WHERE kind = ? AND key = ?", (kind, key))
        return model.model_validate_json(rows[0][0]) if rows else None

    def _select(
        self,
        kind: str,
        model: type[S],
        where: str,
        params: list[object],
        keep: Callable[[str | None, str | None, str | None], bool],
    ) -> list[tuple[str, S]]:
        """Rows of ``kind`` matching ``where`` (over ``projection_rows``' columns), as
        ``(label, state)`` in the order they last changed; ``keep(agent_id, status, label)`` is
        the same filter in Python, for the rows this process has not written yet."""
        held = self.projector.held
        with self.ledger.reading() as head:
            fresh = self._fresh(head)
            merged = fresh is not None
            stored, decoded = self._stored(kind, where, params, merged)
            changed = self.projector.changed(kind) if merged else {}
            out: list[tuple[str, S]] = []
            for key, label, raw in stored:
                if key in changed:
                    continue
                hit, state = held((kind, key), fresh) if fresh is not None else (False, None)
                if not hit or state is None:
                    state = decoded.get(key)
                    if state is None:
                        state = decoded[key] = model.model_validate_json(raw)
                out.append((cast(str, label), cast(S, state)))  # a stored label as it is (``None`` too, as before)
            # Rows not written yet changed after every written one: they come last, by seq.
            for _key, (_seq, state) in sorted(changed.items(), key=lambda kv: (kv[1][0], kv[0])):
                if state is None:
                    continue
                agent_id, status, label = row_columns(kind, state)
                if keep(agent_id, status, label):
                    out.append((label or "", cast(S, state)))
        return out

    def _stored(
        self, kind: str, where: str, params: list[object], merged: bool
    ) -> tuple[list[tuple[str, str | None, str]], dict[str, State]]:
        """``projection_rows`` of ``kind`` matching ``where`` in the order they last changed, as
        ``(key, label, state JSON)``, and a place to keep their states once decoded.

        While this process serves reads from its fold (``merged``) the stored rows change only
        when it writes them or drops its fold (``Projector.written``): until then both are kept
        and the rows are not read again (a turn lists its agent's work items, tasks and waits 8
        times, 12-17 us a query; issue 18, step 6)."""
        written = self.projector.written
        memo_key = (kind, where, *params)
        if merged:
            kept = self._lists.get(memo_key)
            if kept is not None and kept[0] == written:
                return kept[1], kept[2]
        rows = self.ledger.query(
            f"SELECT key, label, state FROM projection_rows WHERE kind = ?{where} ORDER BY seq", [kind, *params]
        )
        stored = [(str(key), label, raw) for key, label, raw in rows]
        decoded: dict[str, State] = {}
        if merged:
            if len(self._lists) >= _LISTS_KEPT:
                self._lists.clear()
            self._lists[memo_key] = (written, stored, decoded)
        return stored, decoded

    def _all(self, kind: str, model: type[S], agent_id: str | None, status: str | tuple[str, ...] | None) -> list[S]:
        assert KINDS[kind].model is model, kind
        where = ""
        params: list[object] = []
        if agent_id is not None:
            where += " AND agent_id = ?"
            params.append(agent_id)
        statuses = status if isinstance(status, tuple) else None if status is None else (status,)
        if statuses is not None:  # any of these (only their rows are decoded)
            where += f" AND status IN ({', '.join('?' for _ in statuses)})"
            params += statuses

        def keep(row_agent: str | None, row_status: str | None, _label: str | None) -> bool:
            return (agent_id is None or row_agent == agent_id) and (statuses is None or row_status in statuses)

        return [state for _label, state in self._select(kind, model, where, params, keep)]

    def _many(self, kind: str, model: type[S], keys: Collection[str]) -> dict[str, S]:
        """The rows of ``kind`` with these keys (those that exist), by key: the rows the projector
        holds at the head (written or not), the others by one query per 500 keys."""
        assert KINDS[kind].model is model, kind
        held = self.projector.held
        out: dict[str, S] = {}
        with self.ledger.reading() as head:
            fresh = self._fresh(head)
            missing: list[str] = []
            for key in dict.fromkeys(keys):
                hit, state = held((kind, key), fresh) if fresh is not None else (False, None)
                if not hit:
                    missing.append(key)
                elif state is not None:
                    out[key] = cast(S, state)
            for i in range(0, len(missing), 500):
                chunk = missing[i : i + 500]
                sql = f"SELECT key, state FROM projection_rows WHERE kind = ? AND key IN ({', '.join('?' for _ in chunk)})"
                for key, raw in self.ledger.query(sql, [kind, *chunk]):
                    out[str(key)] = model.model_validate_json(raw)
        return out

    def agent_state(self, agent_id: str) -> AgentState | None:
        """An agent by id, or ``None`` (``agent`` finds one by name or id, or raises)."""
        return self._one("agent", AgentState, agent_id)

    def agents(self) -> list[AgentState]:
        return sorted(self._all("agent", AgentState, None, None), key=lambda a: a.name)

    def working_memory_state(self, agent_id: str) -> WorkingMemory | None:
        """The agent-level working memory row (``working_memory`` is the view an agent sees)."""
        return self._one("working_memory", WorkingMemory, agent_id)

    def working_memory_states(self, agent_ids: Collection[str]) -> dict[str, WorkingMemory]:
        """``working_memory_state`` of many agents at once, by agent id (those that have one)."""
        return self._many("working_memory", WorkingMemory, agent_ids)

    def baseline(self, agent_id: str) -> WorkingMemoryBaseline | None:
        return self._one("wm_baseline", WorkingMemoryBaseline, agent_id)

    def work_item(self, work_item_id: str) -> WorkItemState | None:
        return self._one("work_item", WorkItemState, work_item_id)

    def work_items(
        self, *, agent_id: str | None = None, status: str | tuple[str, ...] | None = None
    ) -> list[WorkItemState]:
        return self._all("work_item", WorkItemState, agent_id, status)

    def task(self, task_id: str) -> TaskProjection | None:
        return self._one("task", TaskProjection, task_id)

    def tasks(self, *, agent_id: str | None = None, status: str | None = None) -> list[TaskProjection]:
        """Tasks; ``status`` filters on the task's ``state``."""
        return self._all("task", TaskProjection, agent_id, status)

    def wait(self, wait_id: str) -> WaitProjection | None:
        return self._one("wait", WaitProjection, wait_id)

    def waits(self, *, agent_id: str | None = None, status: str | None = None) -> list[WaitProjection]:
        return self._all("wait", WaitProjection, agent_id, status)

    def timer(self, timer_id: str) -> TimerProjection | None:
        return self._one("timer", TimerProjection, timer_id)

    def timers(self, *, agent_id: str | None = None, status: str | None = None) -> list[TimerProjection]:
        return self._all("timer", TimerProjection, agent_id, status)

    def episode_drafts(self, agent_id: str) -> EpisodeDrafts | None:
        return self._one("episode_drafts", EpisodeDrafts, agent_id)

    def durable_entry(self, entry_id: str) -> DurableState | None:
        return self._one("durable", DurableState, entry_id)

    def proposal(self, proposal_id: str) -> ProposalState | None:
        return self._one("proposal", ProposalState, proposal_id)

    def proposals(self, *, agent_id: str | None = None, status: str | None = None) -> list[ProposalState]:
        return self._all("proposal", ProposalState, agent_id, status)

    def counts(self, agent_id: str) -> dict[str, int]:
        """How many work items, tasks, waits and timers (in any status) an agent has."""
        kinds = ("work_item", "task", "wait", "timer")
        self.write_projections()
        rows = self.ledger.query(
            "SELECT kind, count(*) FROM projection_rows WHERE agent_id = ? AND kind IN (?, ?, ?, ?) GROUP BY kind",
            (agent_id, *kinds),
        )
        found = {str(kind): int(n) for kind, n in rows}
        return {kind: found.get(kind, 0) for kind in kinds}

    def keys_starting(self, kind: str, prefix: str, *, limit: int) -> list[str]:
        """Keys of rows of ``kind`` that start with ``prefix`` (finding an entry by an id prefix)."""
        if "\x00" in prefix:  # no key holds a NUL, and PostgreSQL takes no NUL in a text parameter
            return []
        self.write_projections()
        rows = self.ledger.query(
            "SELECT key FROM projection_rows WHERE kind = ? AND key >= ? AND key < ? ORDER BY key LIMIT ?",
            (kind, prefix, prefix + "\U0010ffff", limit),
        )
        return [str(r[0]) for r in rows]

    def agent(self, ref: str) -> AgentState:
        """An agent by name or id."""
        # A new agent's row, and a renamed one's, are written at the append (``Projector.settle``):
        # the stored names and ids are current, only a stored state may be older than the one held.
        with self.ledger.reading() as head:
            fresh = self._fresh(head)
            rows = self.ledger.query(
                "SELECT key, state FROM projection_rows WHERE kind = 'agent' AND label = ? "
                "UNION ALL SELECT key, state FROM projection_rows WHERE kind = 'agent' AND key = ? LIMIT 1",
                (ref, ref),
            )
            if rows and fresh is not None:
                hit, state = self.projector.held(("agent", rows[0][0]), fresh)
                if hit and isinstance(state, AgentState):
                    return state
        if not rows:
            raise NotFoundError(f"no agent named {ref!r} (see 'holon agent list')")
        return AgentState.model_validate_json(rows[0][1])

    # --- the untyped fallback ---------------------------------------------------------------

    def state(self, kind: str, key: str) -> State | None:
        """The untyped fallback: one row of a kind named by string. Prefer the typed accessors
        above (``store.task(id)``, ...); this stays for callers not yet moved to them."""
        return self._one(kind, KINDS[kind].model, key)

    def rows(self, kind: str, *, agent_id: str | None = None, status: str | None = None) -> list[Any]:
        """The untyped fallback: states of a kind named by string, optionally filtered, in the
        order their rows were last changed. Prefer the typed accessors (``store.tasks(...)``)."""
        return self._all(kind, KINDS[kind].model, agent_id, status)

    def durable_entries(
        self, owners: Collection[str] | None = None, *, status: str | None = None, active_only: bool = False
    ) -> list[DurableState]:
        """Durable-memory entries, oldest change first: of ``owners`` (an agent id or ``shared``)
        when given, else of everyone; only ``status`` ones (``active_only``: status ``active``)."""
        if active_only:
            status = "active"
        if owners is None:
            return self._all("durable", DurableState, None, status)
        labels: list[object] = list(dict.fromkeys(owners))
        if not labels:
            return []
        marks = ", ".join("?" for _ in labels)
        where = " AND status = ?" if status is not None else ""
        wanted = set(labels)

        def keep(_agent: str | None, row_status: str | None, label: str | None) -> bool:
            return (status is None or row_status == status) and label in wanted

        params = [*([status] if status is not None else []), *labels]
        rows = self._select("durable", DurableState, f"{where} AND label IN ({marks})", params, keep)
        return [state for _label, state in rows]

    def durable_by_owner(self) -> dict[str, list[DurableState]]:
        """Every owner's durable-memory entries (all statuses), oldest change first, in one read."""
        out: dict[str, list[DurableState]] = {}
        for label, state in self._select("durable", DurableState, "", [], lambda _a, _s, _l: True):
            out.setdefault(label, []).append(state)
        return out

    def projection_rows(self, kind: str) -> list[ProjectionRow]:
        """Typed rows of one kind through SQLModel (admin and inspection paths; imports SQLModel)."""
        from sqlmodel import col, select

        from holon.ledger.schema import ProjectionRow

        query = select(ProjectionRow).where(ProjectionRow.kind == kind).order_by(col(ProjectionRow.seq))
        self.write_projections()
        with self.ledger.engine.session() as s:
            return list(s.exec(query).all())

    def working_memory(self, agent_id: str) -> dict[str, Any]:
        wm = self.working_memory_state(agent_id)
        item = self.work_item(wm.active_work_item) if wm and wm.active_work_item else None
        return working_memory_view(wm, item)

    # --- maintenance ------------------------------------------------------------------------

    def replay(self, *, progress: Callable[[int, int], None] | None = None) -> ReplayResult:
        self.write_projections()  # the replay compares the stored rows (on a connection of its own)
        engine = self.ledger.engine
        try:
            with engine.reader() as conn:
                return replay(conn, text_bytes=engine.text_bytes, progress=progress)
        except Exception as e:  # a damaged file: one line naming it (exit 5), never a traceback
            err = engine.translate(e)
            if err is None:
                raise
            raise err from e

    def close(self) -> None:
        try:
            if self.projector.pending and self.ledger.refusal is None:
                with self.ledger.transaction() as tx:  # not required (the next open catches up): cheaper
                    self.projector.flush(tx)
        finally:
            if self._local is not None:
                self._local.close()
            self.ledger.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
