"""``Store``: a home's ledger with its synchronous projections, and typed reads of them.

Most code holds a ``Store``: it appends through ``store.append`` (events and projection rows
commit together) and reads projections through the named, typed reads below (plain prepared
statements on the ledger's connection). SQLModel is imported only by ``projection_rows``, an
inspection read.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any

from holon.clock import Clock, SystemClock
from holon.config import HomePaths, Settings
from holon.errors import NotFoundError
from holon.ledger import Database, Event, Ledger, NewEvent
from holon.ledger.anchor import Anchor
from holon.ledger.damage import translate
from holon.paths import private_dir
from holon.projections.durable import DurableState
from holon.projections.fold import KINDS, working_memory_view
from holon.projections.projector import CURSOR_NAME, PROJECTOR_VERSION, Projector
from holon.projections.replay import ReplayResult, replay
from holon.projections.state import AgentState, State, WorkingMemory, WorkItemState

if TYPE_CHECKING:
    from holon.ledger.schema import ProjectionRow

__all__ = ["Store"]


class Store:
    def __init__(self, paths: HomePaths, settings: Settings, ledger: Ledger, projector: Projector) -> None:
        self.paths = paths
        self.settings = settings
        self.ledger = ledger
        self.projector = projector
        # Values derived from settled ledger events only (which never change), kept across turns
        # by whoever reads them often (context assembly). Bounded by its users.
        self.memo: dict[object, Any] = {}

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
        db = Database(paths.db, synchronous=cfg.synchronous, busy_timeout_ms=cfg.busy_timeout_ms)
        projector = Projector()
        ledger = Ledger(
            db,
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
        if cursor == (self.ledger.head(), PROJECTOR_VERSION):
            return
        with self.ledger.transaction() as tx:
            self.projector.catch_up(tx)

    def _cursor(self) -> tuple[int, int] | None:
        """The synchronous projector's ``(seq, version)``, or ``None`` before its first fold."""
        rows = self.ledger.query("SELECT seq, version FROM projection_cursors WHERE name = ?", (CURSOR_NAME,))
        return (int(rows[0][0]), int(rows[0][1])) if rows else None

    def append(self, *events: NewEvent) -> list[Event]:
        return self.ledger.append(*events)

    # --- typed reads ------------------------------------------------------------------------

    def state(self, kind: str, key: str) -> State | None:
        rows = self.ledger.query("SELECT state FROM projection_rows WHERE kind = ? AND key = ?", (kind, key))
        return KINDS[kind].model.model_validate_json(rows[0][0]) if rows else None

    def rows(self, kind: str, *, agent_id: str | None = None, status: str | None = None) -> list[Any]:
        """States of one kind, optionally filtered, in the order their rows were last changed."""
        sql = "SELECT state FROM projection_rows WHERE kind = ?"
        params: list[object] = [kind]
        if agent_id is not None:
            sql += " AND agent_id = ?"
            params.append(agent_id)
        if status is not None:
            sql += " AND status = ?"
            params.append(status)
        model = KINDS[kind].model
        return [model.model_validate_json(r[0]) for r in self.ledger.query(sql + " ORDER BY seq", params)]

    def agents(self) -> list[AgentState]:
        return sorted(self.rows("agent"), key=lambda a: a.name)

    def agent(self, ref: str) -> AgentState:
        """An agent by name or id."""
        rows = self.ledger.query(
            "SELECT state FROM projection_rows WHERE kind = 'agent' AND label = ? "
            "UNION ALL SELECT state FROM projection_rows WHERE kind = 'agent' AND key = ? LIMIT 1",
            (ref, ref),
        )
        if not rows:
            raise NotFoundError(f"no agent named {ref!r} (see 'holon agent list')")
        return AgentState.model_validate_json(rows[0][0])

    def durable_entries(self, owners: Collection[str], *, active_only: bool = False) -> list[DurableState]:
        """Durable-memory entries of ``owners`` (an agent id or ``shared``), oldest change first."""
        labels: list[object] = list(dict.fromkeys(owners))
        if not labels:
            return []
        marks = ", ".join("?" for _ in labels)
        status = " AND status = 'active'" if active_only else ""
        rows = self.ledger.query(
            f"SELECT state FROM projection_rows WHERE kind = 'durable'{status} AND label IN ({marks}) ORDER BY seq",
            labels,
        )
        return [DurableState.model_validate_json(r[0]) for r in rows]

    def durable_by_owner(self) -> dict[str, list[DurableState]]:
        """Every owner's durable-memory entries (all statuses), oldest change first, in one read."""
        out: dict[str, list[DurableState]] = {}
        for label, raw in self.ledger.query(
            "SELECT label, state FROM projection_rows WHERE kind = 'durable' ORDER BY seq"
        ):  # fmt: skip
            out.setdefault(label, []).append(DurableState.model_validate_json(raw))
        return out

    def keys_with_prefix(self, kind: str, prefix: str, *, limit: int) -> list[str]:
        """Up to ``limit`` keys of ``kind`` that start with ``prefix``, in key order (an index range)."""
        rows = self.ledger.query(
            "SELECT key FROM projection_rows WHERE kind = ? AND key >= ? AND key < ? ORDER BY key LIMIT ?",
            (kind, prefix, prefix + "\U0010ffff", limit),
        )
        return [str(r[0]) for r in rows]

    def cursors(self) -> dict[str, int]:
        """Every projection's cursor (the last seq it folded), by name."""
        return {str(n): int(s) for n, s in self.ledger.query("SELECT name, seq FROM projection_cursors ORDER BY name")}

    def projection_rows(self, kind: str) -> list[ProjectionRow]:
        """Typed rows of one kind through SQLModel (admin and inspection paths; imports SQLModel)."""
        from sqlmodel import col, select

        from holon.ledger.schema import ProjectionRow

        query = select(ProjectionRow).where(ProjectionRow.kind == kind).order_by(col(ProjectionRow.seq))
        with self.ledger.db.session() as s:
            return list(s.exec(query).all())

    def working_memory(self, agent_id: str) -> dict[str, Any]:
        wm = self.state("working_memory", agent_id)
        assert wm is None or isinstance(wm, WorkingMemory)
        item = self.state("work_item", wm.active_work_item) if wm and wm.active_work_item else None
        assert item is None or isinstance(item, WorkItemState)
        return working_memory_view(wm, item)

    # --- maintenance ------------------------------------------------------------------------

    def replay(self, *, progress: Callable[[int, int], None] | None = None) -> ReplayResult:
        try:
            with self.ledger.db.reader() as conn:
                return replay(conn, progress=progress)
        except Exception as e:  # a damaged file: one line naming it (exit 5), never a traceback
            err = translate(e, self.ledger.db.path)
            if err is None:
                raise
            raise err from e

    def close(self) -> None:
        self.ledger.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
