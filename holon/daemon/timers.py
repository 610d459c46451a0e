"""Agent timers on APScheduler 3.11: the only module that imports apscheduler.

The ledger is the truth: a timer exists because of its ``timer.scheduled`` event and ends with
``timer.fired`` (one-shot) or ``timer.cancelled``; the timer projection holds its next due time.
APScheduler (``AsyncIOScheduler`` in the daemon's loop, jobs in its in-memory job store) only
decides *when* to call the daemon's firing, and asks the schedule maths (``holon.runtime.schedule``,
pure, shared with the CLI) for each next due time. On start the jobs are made from the projection,
each due when the projection says, and kept in line with it (``sync``) as ``timer.*`` events come.
Nothing about timers is stored outside the ledger: a job store in the database (APScheduler's
``SQLAlchemyJobStore``, used until issue 18) only repeated the projection, and loading SQLAlchemy
for it was a third of the daemon's start-up.

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
from typing import TYPE_CHECKING

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from holon.projections.state import TimerProjection

if TYPE_CHECKING:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler
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
    "MAX_CRON_WALK",
    "MAX_INTERVAL_S",
    "TimerKind",
    "Timers",
    "ZonedCron",
    "add_timer",
    "cancel_timer",
    "describe",
    "due_firings",
    "first_due",
    "format_local",
    "next_after",
    "parse_schedule",
    "split_cron",
    "timer_event",
    "timer_zone",
]


class ZonedCron(BaseTrigger):
    """APScheduler's view of a crontab line in a zone: its due times are
    ``holon.runtime.schedule.ZonedCron``'s (DST-correct). Picklable by its one string, as
    APScheduler expects of triggers (the in-memory store never pickles it)."""

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
    """The daemon's scheduler: started inside the running loop, stopped before the host closes.

    APScheduler's scheduler is made on first use: its module reads every installed package's
    entry points when it loads (~50 ms), which ``holon serve`` pays after its API is up."""

    def __init__(self, on_fire: Callable[[str], Awaitable[None]]) -> None:
        self._on_fire = on_fire
        self._scheduler: AsyncIOScheduler | None = None
        self.owns: Callable[[str], bool] = lambda agent_id: True
        """Whose timers this scheduler holds: a node of several holds only its agents' (RFC 0008)."""

    @property
    def scheduler(self) -> AsyncIOScheduler:
        if self._scheduler is None:
            from apscheduler.schedulers.asyncio import AsyncIOScheduler

            self._scheduler = AsyncIOScheduler(
                job_defaults={"coalesce": True, "misfire_grace_time": None, "max_instances": 1}, timezone=UTC
            )
        return self._scheduler

    @staticmethod
    def load() -> None:
        """Import APScheduler's scheduler (a caller on the loop may do it in a thread first)."""
        import apscheduler.schedulers.asyncio  # noqa: F401

    @property
    def running(self) -> bool:
        return self._scheduler is not None and self._scheduler.running

    def start(self, timers: list[TimerProjection]) -> None:
        self.scheduler.start()
        self.reconcile(timers)

    def stop(self) -> None:
        if self.running:
            self.scheduler.shutdown(wait=False)

    def reconcile(self, timers: list[TimerProjection]) -> None:
        """Make the job store hold exactly the scheduled timers, each due when the projection says."""
        wanted = {
            t.timer_id: t
            for t in timers
            if t.status == "scheduled" and t.next_fire_us is not None and self.owns(t.agent_id)
        }
        for job in self.scheduler.get_jobs():
            if job.id not in wanted:
                job.remove()
        for timer in wanted.values():
            self.sync(timer)

    def sync(self, timer: TimerProjection | None, timer_id: str | None = None) -> None:
        """Bring one timer's job in line with its projection (``None``: the timer is gone)."""
        key = timer.timer_id if timer is not None else timer_id
        job = self.scheduler.get_job(key) if key else None
        if timer is None or timer.status != "scheduled" or timer.next_fire_us is None or not self.owns(timer.agent_id):
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
            self._on_fire,
            _trigger(timer),
            args=[timer.timer_id],
            id=timer.timer_id,
            name=f"timer {timer.timer_id} of {timer.agent_id}",
            replace_existing=True,
            # Due when the ledger says, even if that has passed (APScheduler would skip to the next).
            next_run_time=schedule.from_us(timer.next_fire_us),
        )

    def drop_agent(self, agent_id: str) -> int:
        """Remove the jobs of ``agent_id``'s timers (a node losing the agent, RFC 0008) without
        reading the database, which may be the very thing lost. Returns how many went."""
        if not self.running:
            return 0
        suffix = f" of {agent_id}"
        gone = [job for job in self.scheduler.get_jobs() if str(job.name).endswith(suffix)]
        for job in gone:
            job.remove()
        return len(gone)

    def jobs(self) -> int:
        """How many timers the running scheduler holds (0 before it starts)."""
        return len(self.scheduler.get_jobs()) if self.running else 0
