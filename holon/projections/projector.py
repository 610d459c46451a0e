"""The synchronous projector: folds events into ``projection_rows`` inside the append transaction.

It is a ``TransactionHook`` of the ledger. Rows are loaded on demand and cached between
transactions while this process is the only writer; the ledger calls ``reset`` whenever another
process moved the head. Every append is folded (and its derived events appended) in its own
transaction; the changed rows are written with the cursor (``projection_cursors``) at most every
``defer_commits`` commits (``settle``), always together, so the stored rows are a fold of the
ledger up to the stored cursor. Reads never see them behind: ``Store`` serves this process's
reads from the rows held here and catches up from the cursor when another process (or one that
was killed) left it behind. When the cursor is behind at an append (an older database, a
``PROJECTOR_VERSION`` bump that requires a rebuild, another process's rows not written yet),
``apply`` catches up inside the same transaction before folding anything new.

It is one of the three ``Projection``s of a home (``holon.projections.framework``): its tables are
made by the ledger's own migrations (``projection_rows``, ``projection_cursors``), so its own
migration list is empty; its cursor is kept with the framework's ``read_cursor``/``write_cursor``.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import Any

from holon.errors import ConflictError
from holon.ledger import Event, EventQuery, NewEvent, Transaction
from holon.ledger.migrations import Migration
from holon.ledger.sql import Conn
from holon.ledger.store import EVENT_COLUMNS, row_to_event
from holon.projections.episodes import CONTENT_TYPES
from holon.projections.fold import KINDS, MEMO_PENDING, Key, derive, fold_event, needs_decoding, row_columns, state_json
from holon.projections.framework import read_cursor, write_cursor
from holon.projections.state import AgentState, State

__all__ = ["CURSOR_NAME", "PROJECTOR_VERSION", "Projector", "load_state"]

#: Bump when a reducer changes what it produces: every home rebuilds its projections on open.
PROJECTOR_VERSION = 16
CURSOR_NAME = "projections"

_UPSERT = (
    "INSERT INTO projection_rows(kind, key, agent_id, status, label, seq, state) VALUES (?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(kind, key) DO UPDATE SET agent_id = excluded.agent_id, status = excluded.status, "
    "label = excluded.label, seq = excluded.seq, state = excluded.state"
)
# A row whose indexed columns (agent_id, label) are stored as they are: only its status (in no
# index), seq and state change. The upsert above assigns every column, and SQLite then rewrites the
# row's entries in ``projection_rows_agent`` and ``projection_agent_name`` even when their values
# are the same: one or two more pages per row in every commit's WAL (measured: an agent row 3
# pages, 1 with this).
_UPDATE = "UPDATE projection_rows SET status = ?, seq = ?, state = ? WHERE kind = ? AND key = ?"

Indexed = tuple[str, str | None]
"""A row's indexed columns besides its key: ``(agent_id, label)``."""


def load_state(conn: Conn, key: Key) -> State | None:
    row = conn.fetchone("SELECT state FROM projection_rows WHERE kind = ? AND key = ?", key)
    return None if row is None else KINDS[key[0]].model.model_validate_json(row[0])


class _Rows(dict[Key, State | None]):
    """Projection states by key, loaded from the database on first access.

    ``stored`` holds the indexed columns of the rows known to be in the database as they are
    there (loaded here, or written by ``Projector.flush``), so a flush that leaves them as they
    are writes only ``status``, ``seq`` and ``state``."""

    conn: Conn | None = None

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[Key, Indexed] = {}

    def __missing__(self, key: Key) -> State | None:
        assert self.conn is not None, "rows are only read inside a transaction"
        row = self.conn.execute(
            "SELECT state, agent_id, label FROM projection_rows WHERE kind = ? AND key = ?", key
        ).fetchone()
        if row is None:
            self[key] = None
            return None
        state = self[key] = KINDS[key[0]].model.model_validate_json(row[0])
        self.stored[key] = (row[1], row[2])
        return state

    def clear(self) -> None:
        super().clear()
        self.stored.clear()

    def get(self, key: Key, default: State | None = None) -> State | None:  # type: ignore[override]  # one signature for dict.get's overloads: every key loads (None when absent)
        return self[key]


class _RecentContent:
    """The newest episode-content events (``CONTENT_TYPES``) this projector folded, per agent.

    Sealing an episode reads its range of content events (``_read_range``). Every event this
    process appends passes through ``Projector.apply`` first, so from ``since`` on the lists below
    hold every content event of the ledger: a range they cover is served from memory instead of
    a query that decodes every row again (profile of ``bench ledger``'s append loop: the sealing
    reads were 7 of 100 us per event). Older ranges, and anything after ``reset``, read the
    database as before. Bounded: ``per_agent`` events per agent (the oldest half is dropped past
    twice that) and ``agents`` agents (past that, everything is dropped and starts again).
    """

    def __init__(self, *, per_agent: int = 256, agents: int = 64) -> None:
        self._per_agent = per_agent
        self._agents = agents
        self._since: int | None = None
        # agent -> (complete from seq, that agent's content events from there, their seqs)
        self._lists: dict[str, tuple[int, list[Event], list[int]]] = {}

    def start(self, seq: int) -> None:
        """Hold from ``seq`` on (every event from there will be ``add``ed), nothing before."""
        self._lists.clear()
        self._since = seq

    def clear(self) -> None:
        """Hold nothing; the next ``add`` starts again (after a reset, a catch-up or a rebuild)."""
        self._lists.clear()
        self._since = None

    def add(self, events: Sequence[Event]) -> None:
        """The next events folded, in order, right after the previous ones (or after ``clear``)."""
        if self._since is None:
            self._since = events[0].seq
        lists = self._lists
        for e in events:
            if e.type not in _CONTENT:
                continue
            entry = lists.get(e.agent_id)
            if entry is None:
                if len(lists) >= self._agents:
                    self.start(e.seq)
                entry = lists[e.agent_id] = (self._since, [], [])
            entry[1].append(e)
            entry[2].append(e.seq)
            if len(entry[1]) > 2 * self._per_agent:
                drop = len(entry[1]) - self._per_agent
                lists[e.agent_id] = (entry[2][drop - 1] + 1, entry[1][drop:], entry[2][drop:])

    def range(self, agent_id: str, first: int, last: int) -> list[Event] | None:
        """The agent's content events with ``first <= seq <= last``, or ``None`` when not all are held."""
        if self._since is None:
            return None
        entry = self._lists.get(agent_id)
        if entry is None:
            return [] if self._since <= first else None
        complete_from, events, seqs = entry
        if complete_from > first:
            return None
        return events[bisect_left(seqs, first) : bisect_right(seqs, last)]


_CONTENT = frozenset(CONTENT_TYPES)


class Projector:
    """The synchronous ``Projection``: a ``TransactionHook`` folding every append as it happens."""

    name = CURSOR_NAME
    migrations: tuple[Migration, ...] = ()

    @property
    def version(self) -> int:
        return PROJECTOR_VERSION  # read at each use: tests bump the module's value

    def __init__(self, *, cache_limit: int = 50_000, defer_commits: int = 64, defer_rows: int = 512) -> None:
        self._rows = _Rows()
        self._defer_commits = defer_commits
        self._defer_rows = defer_rows
        self._deferred = 0  # commits since the rows were last written
        self._agents: set[Key] = set()  # agent rows changed since the last commit (``_renames``)
        self._cleared = False  # every row was deleted in the open transaction (``clear``)
        self._eager = 0  # commits left that write their rows at once (``reset``)
        self._dirty: dict[Key, int] = {}
        self._folded_to: int | None = None
        self._flushed_to: int | None = None
        self._cache_limit = cache_limit
        # agent -> (baseline state, working-memory view it stands for); see ``fold.derive``.
        self._memo: dict[str, tuple[State | None, dict[str, Any]]] = {}
        self._recent = _RecentContent()
        self._written = 0  # see ``written``

    # --- TransactionHook --------------------------------------------------------------------

    def apply(self, tx: Transaction, events: Sequence[Event]) -> Sequence[NewEvent]:
        self._rows.conn = tx.conn
        first = events[0].seq
        if self._folded_to != first - 1:
            self._catch_up(tx, upto=first - 1)
        self._recent.add(events)
        memo = self._memo
        agents = self._agents
        for event in events:
            for key in fold_event(self._rows, event):
                self._dirty[key] = event.seq
                if key[0] == "agent":
                    agents.add(key)
            if event.type == "working_memory.delta":
                seen = memo.get(event.agent_id)
                if seen is not None and seen[0] is MEMO_PENDING:
                    memo[event.agent_id] = (self._rows.get(("wm_baseline", event.agent_id)), seen[1])
        self._folded_to = events[-1].seq
        return derive(self._rows, events, memo, read=lambda agent, a, b: self._read_range(tx, agent, a, b))

    def _read_range(self, tx: Transaction, agent_id: str, first: int, last: int) -> list[Event]:
        held = self._recent.range(agent_id, first, last)
        return held if held is not None else _read_range(tx, agent_id, first, last)

    def settle(self, tx: Transaction) -> None:
        """Just before COMMIT: write the rows now, or keep them for a later commit.

        Rows are kept (deferred) for up to ``defer_commits`` commits or ``defer_rows`` changed
        rows: the ledger is the truth and the rows are its fold, so a crash only leaves the
        cursor behind and the next open or read catches up from it (``Store``). Reads in this
        process are served from the rows held here (``held``, ``pending``); other processes catch
        up from the cursor. An agent row whose indexed columns change (a new agent, a new name) is
        written at once, so the name index refuses a taken name at the append that takes it. After
        rows not written yet were dropped (``reset``: another process appended, or a rollback),
        the next ``defer_commits`` commits write at once: with several writers, deferring would
        only make each process fold the others' commits again."""
        if self._folded_to is None or self._folded_to == self._flushed_to:
            return
        self._deferred += 1
        renamed = self._cleared or self._renames()
        self._agents.clear()
        if self._eager:
            self._eager -= 1
            self.flush(tx)
        elif renamed or self._deferred >= self._defer_commits or len(self._dirty) >= self._defer_rows:
            self.flush(tx)

    def _renames(self) -> bool:
        """Whether an agent row changed since the last commit has indexed columns (its id, its
        name) other than the stored row's: a new agent, a new name, an agent folded away."""
        stored = self._rows.stored
        for key in self._agents:
            state = dict.__getitem__(self._rows, key)
            if state is None:
                return True
            # ``row_columns("agent", state)``'s agent id and label, read directly: this runs at
            # most commits (an agent row changes with every input, turn start and settle).
            assert type(state) is AgentState
            if stored.get(key) != (state.agent_id, state.name):
                return True
        return False

    @property
    def written(self) -> int:
        """Changes whenever ``projection_rows`` may have changed under this process's reads: at
        each write of the rows (``flush``, ``clear``) and whenever the rows held here are dropped
        (``reset``, ``adopt``). While it stays the same and the fold held is at the head
        (``folded``), the stored rows are as this process last read them, except for rows it
        holds changed (``changed``), which its reads take from here anyway: ``Store`` keeps the
        rows of its list reads for as long (another process writes rows only after appending,
        which moves the head, so this process resets before its next read of them)."""
        return self._written

    @property
    def pending(self) -> bool:
        """Whether rows folded here are not written yet (the stored cursor is behind them)."""
        return self._folded_to is not None and self._folded_to != self._flushed_to

    def flush(self, tx: Transaction) -> None:
        if self._folded_to is None or self._folded_to == self._flushed_to:
            return
        rows: list[tuple[str, str, str, str | None, str | None, int, str]] = []  # _UPSERT's values
        updates: list[tuple[str, str, str, str | None, str | None, int, str]] = []
        gone = []
        stored = self._rows.stored
        for key, seq in self._dirty.items():
            state = self._rows[key]
            if state is None:  # folded away: replay would have no such row either
                gone.append(key)
                stored.pop(key, None)
                continue
            agent_id, status, label = row_columns(key[0], state)
            row = (key[0], key[1], agent_id, status, label, seq, state_json(state))
            (updates if stored.get(key) == (agent_id, label) else rows).append(row)
        conn = tx.conn
        if gone:
            conn.executemany("DELETE FROM projection_rows WHERE kind = ? AND key = ?", gone)
        if updates and conn.executemany(_UPDATE, [(r[3], r[5], r[6], r[0], r[1]) for r in updates]).rowcount != len(
            updates
        ):
            # A row this process saw is no longer there (nothing in holon deletes rows behind the
            # projector's back, but the guard is one comparison): write them all in full.
            rows += updates
        try:
            conn.executemany(_UPSERT, rows)
        except conn.IntegrityError as e:
            taken = next((r[4] for r in rows if r[0] == "agent"), None)
            raise ConflictError(f"agent name {taken!r} is already taken" if taken else str(e)) from e
        for r in rows:
            stored[(r[0], r[1])] = (r[2], r[4])
        write_cursor(conn, CURSOR_NAME, self._folded_to, PROJECTOR_VERSION)
        self._written += 1
        self._dirty.clear()
        self._flushed_to = self._folded_to
        self._deferred = 0
        self._cleared = False
        self._agents.clear()
        if len(self._rows) > self._cache_limit:
            self._rows.clear()
            self._memo.clear()

    # --- reads (``Store``) ----------------------------------------------------------------------

    def held(self, key: Key, head: int) -> tuple[bool, State | None]:
        """``(True, state)`` when this process holds the row of ``key`` as a fold of the ledger up
        to ``head`` has it (``None``: no such row); ``(False, None)`` when it must be read from the
        database.

        Everything up to ``head`` is folded here: the rows held are the truth whether or not they
        are written yet (rows not held are as the database has them, since every changed row is
        held until it is written). Another process that appends moves the head, and this process
        resets on its next transaction. Inside an open transaction the head includes what it
        appended. States are frozen and shared: callers must not change their lists or dicts
        (reducers never do)."""
        if self._folded_to != head:
            return False, None
        rows = self._rows
        if key not in rows:
            return False, None
        return True, dict.__getitem__(rows, key)

    def folded(self, head: int) -> bool:
        """Whether everything up to ``head`` is folded here (``held`` and ``changed`` answer for it)."""
        return self._folded_to == head

    def adopt(self, head: int) -> None:
        """The stored rows are a fold up to ``head`` (their cursor says so): hold them from here
        on, loading each on first use, as after a write of everything folded."""
        self._forget()
        self._folded_to = self._flushed_to = head

    def changed(self, kind: str) -> dict[str, tuple[int, State | None]]:
        """Rows of ``kind`` folded here and not written yet: ``key -> (seq, state or None if gone)``."""
        rows = self._rows
        return {key[1]: (seq, dict.__getitem__(rows, key)) for key, seq in self._dirty.items() if key[0] == kind}

    def reset(self) -> None:
        if self.pending:
            # Rows not written yet are dropped: another process appended meanwhile (it folded them
            # again from the cursor) or the transaction rolled back. In a home with several
            # writers, deferring only makes each fold the others' commits again: write at each
            # commit for a while.
            self._eager = self._defer_commits
        self._forget()

    def _forget(self) -> None:
        self._written += 1  # the stored rows are no longer known to be this process's last write
        self._recent.clear()
        self._memo.clear()
        self._rows.clear()
        self._dirty.clear()
        self._agents.clear()
        self._cleared = False
        self._deferred = 0
        self._folded_to = None
        self._flushed_to = None

    # --- catch-up (the ``Projection`` side) -----------------------------------------------------

    def clear(self, tx: Transaction) -> None:
        tx.conn.execute("DELETE FROM projection_rows")
        self._written += 1
        self._cleared = True  # written in this transaction (``settle``): the table is empty until then
        self._recent.clear()
        self._rows.clear()
        self._dirty.clear()

    def fold(self, tx: Transaction, after: int, upto: int) -> None:
        """Fold stored events ``after < seq <= upto`` into the cached rows (``flush`` writes them)."""
        self._rows.conn = tx.conn
        conn = tx.conn
        start = after
        while start < upto:
            # Raw rows: an event no projection would change by is skipped before it is decoded.
            batch = conn.execute(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT 5000",
                (start, upto),
            ).fetchall()
            for raw in batch:
                if not needs_decoding(self._rows, raw[3], raw[2]):
                    continue
                event = row_to_event(raw)
                for key in fold_event(self._rows, event):
                    self._dirty[key] = event.seq
            start = batch[-1][0]

    def _catch_up(self, tx: Transaction, *, upto: int) -> None:
        """Bring rows to ``upto`` from the stored cursor (or from scratch on a version change)."""
        self._rows.conn = tx.conn
        self._recent.clear()
        cursor = read_cursor(tx.conn, CURSOR_NAME)
        current = cursor is not None and cursor.version == PROJECTOR_VERSION
        start = cursor.seq if cursor is not None and current else 0
        if self._folded_to is not None and self._folded_to != start:
            # Rows held here are folded past the stored cursor (written later, ``settle``):
            # folding from the cursor again must start from the stored rows.
            self._rows.clear()
            self._memo.clear()
        if not current:
            self.clear(tx)
        self._dirty.clear()
        if start > upto:
            raise ConflictError(f"projection cursor {start} is ahead of the ledger head {upto}")
        self.fold(tx, start, upto)
        self._folded_to = upto
        self._flushed_to = cursor.seq if cursor is not None and current else None

    def catch_up(self, tx: Transaction) -> int:
        """Fold whatever the stored cursor is missing, up to the transaction's head, and write it.
        Returns the head."""
        if self._folded_to != tx.head_seq:
            self._catch_up(tx, upto=tx.head_seq)
        self.flush(tx)
        return tx.head_seq

    def rebuild(self, tx: Transaction) -> int:
        """Clear every row and fold the whole ledger again, in ``tx``. Returns the head."""
        self._rows.conn = tx.conn
        self._recent.clear()
        self.clear(tx)
        self.fold(tx, 0, tx.head_seq)
        self._folded_to, self._flushed_to = tx.head_seq, None  # ``flush`` writes the rows and the cursor
        return tx.head_seq


def _read_range(tx: Transaction, agent_id: str, first: int, last: int) -> list[Event]:
    """An agent's events in ``first..last``: stored ones, plus this transaction's not yet written."""
    # Only the types an episode's content is made of: model payloads and recorded prompts are
    # large and never needed here.
    stored = tx.find(EventQuery(types=CONTENT_TYPES, agent_id=agent_id, after=first - 1, upto=last))
    found = {e.seq: e for e in stored}
    for e in tx.appended:
        if e.agent_id == agent_id and first <= e.seq <= last and e.type in CONTENT_TYPES:
            found.setdefault(e.seq, e)
    return [found[s] for s in sorted(found)]
