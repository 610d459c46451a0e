"""Agent timers on APScheduler 3.11: the only module that imports apscheduler.

The ledger is the truth: a timer exists because of its ``timer.scheduled`` event and ends with
``timer.fired`` (one-shot) or ``timer.cancelled``; the timer projection holds its next due time.
APScheduler (``AsyncIOScheduler`` in the daemon's loop, jobs in a ``SQLAlchemyJobStore`` table of
the home's database) only decides *when* to call ``fire``, and asks the schedule maths
(``holon.runtime.schedule``, pure, shared with the CLI) for each next due time. On start the job
store is reconciled with the projection: jobs of timers that no longer exist go, missing or stale
jobs are (re)made.

A firing appends ``timer.fired`` with an idempotency key made of the timer id and the due time, so
a firing seen twice (APScheduler's own catch-up and the reconcile, or a retry) is recorded once.
Firings missed while the daemon was down are coalesced: one ``timer.fired`` with ``missed=n``,
counted in bounded time however long it was down (``due_firings``).

The schedule maths (``parse_schedule``, ``next_after``, ``due_firings``, ...) and the timer
operations (``add_timer``, ``cancel_timer`` in ``holon.runtime.agents``) are re-exported here for
callers that knew them here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from holon.logs import get_logger
from holon.projections.state import TimerProjection
from holon.runtime import schedule
from holon.runtime.agents import add_timer, cancel_timer
from holon.runtime.schedule import (
    ALIASES,
    FORMS,
    MAX_CRON_WALK,
    MAX_INTERVAL_S,
    TimerKind,
    describe,
    due_firings,
    first_due,
    format_local,
    next_after,
    parse_schedule,
    split_cron,
    timer_event,
    timer_zone,
)

__all__ = [
    "ALIASES",
    "FORMS",
    "JOB_TABLE",
    "MAX_CRON_WALK",
    "MAX_INTERVAL_S",
    "TimerKind",
    "Timers",
    "ZonedCron",
    "add_timer",
    "cancel_timer",
    "describe",
    "due_firings",
    "fire",
    "first_due",
    "format_local",
    "next_after",
    "parse_schedule",
    "split_cron",
    "timer_event",
    "timer_zone",
]

log = get_logger("holon.timers")

JOB_TABLE = "apscheduler_jobs"

#: The running daemon's callback per database path. Jobs are pickled into the job store, so they
#: name this module-level function and the path, never a bound method.
_HANDLERS: dict[str, Callable[[str], Awaitable[None]]] = {}


async def fire(db_path: str, timer_id: str) -> None:
    """The APScheduler job of every timer: hand the firing to the daemon of that database."""
    handler = _HANDLERS.get(db_path)
    if handler is None:
        log.warning("timer fired with no daemon attached", timer_id=timer_id)
        return
    await handler(timer_id)


class ZonedCron(BaseTrigger):
    """APScheduler's view of a crontab line in a zone: its due times are
    ``holon.runtime.schedule.ZonedCron``'s (DST-correct). Pickled into the job store with its one
    string (the class keeps its name and module: stored jobs name it)."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self._cron = schedule.ZonedCron(spec)

    def __getstate__(self) -> dict[str, str]:
        return {"spec": self.spec}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__init__(state["spec"])  # type: ignore[misc]  # unpickling: rebuild the trigger from its spec

    def __str__(self) -> str:
        return f"cron[{self.spec}]"

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        after = schedule.to_us(previous_fire_time) if previous_fire_time is not None else schedule.to_us(now) - 1
        nxt = self._cron.after(after)
        return None if nxt is None else schedule.from_us(nxt)

    def after(self, after_us: int) -> int | None:
        """The first due time strictly after ``after_us``."""
        return self._cron.after(after_us)


def _trigger(timer: TimerProjection) -> BaseTrigger:
    assert timer.next_fire_us is not None
    start = schedule.from_us(timer.next_fire_us)
    if timer.kind == "interval":
        return IntervalTrigger(seconds=int(timer.spec), start_date=start, timezone=UTC)
    if timer.kind == "cron":
        return ZonedCron(timer.spec)
    return DateTrigger(run_date=start, timezone=UTC)


class Timers:
    """The daemon's scheduler: started inside the running loop, stopped before the host closes."""

    def __init__(self, db_path: Path, on_fire: Callable[[str], Awaitable[None]]) -> None:
        self.db_path = str(db_path)
        self._on_fire = on_fire
        self.scheduler = AsyncIOScheduler(
            jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{self.db_path}", tablename=JOB_TABLE)},
            job_defaults={"coalesce": True, "misfire_grace_time": None, "max_instances": 1},
            timezone=UTC,
        )

    def start(self, timers: list[TimerProjection]) -> None:
        _HANDLERS[self.db_path] = self._on_fire
        self.scheduler.start()
        self.reconcile(timers)

    def stop(self) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        if _HANDLERS.get(self.db_path) is self._on_fire:
            del _HANDLERS[self.db_path]

    def reconcile(self, timers: list[TimerProjection]) -> None:
        """Make the job store hold exactly the scheduled timers, each due when the projection says."""
        wanted = {t.timer_id: t for t in timers if t.status == "scheduled" and t.next_fire_us is not None}
        for job in self.scheduler.get_jobs():
            if job.id not in wanted:
                job.remove()
        for timer in wanted.values():
            self.sync(timer)

    def sync(self, timer: TimerProjection | None, timer_id: str | None = None) -> None:
        """Bring one timer's job in line with its projection (``None``: the timer is gone)."""
        key = timer.timer_id if timer is not None else timer_id
        job = self.scheduler.get_job(key) if key else None
        if timer is None or timer.status != "scheduled" or timer.next_fire_us is None:
            if job is not None:
                job.remove()
            return
        if (
            job is not None
            and job.next_run_time is not None
            and schedule.to_us(job.next_run_time) == timer.next_fire_us
        ):
            return
        self.scheduler.add_job(
            fire,
            _trigger(timer),
            args=[self.db_path, timer.timer_id],
            id=timer.timer_id,
            name=f"timer {timer.timer_id} of {timer.agent_id}",
            replace_existing=True,
            # Due when the ledger says, even if that has passed (APScheduler would skip to the next).
            next_run_time=schedule.from_us(timer.next_fire_us),
        )

    def jobs(self) -> int:
        return len(self.scheduler.get_jobs())
