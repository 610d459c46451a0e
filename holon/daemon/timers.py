"""Agent timers on APScheduler 3.11: the only module that imports apscheduler.

The ledger is the truth: a timer exists because of its ``timer.scheduled`` event and ends with
``timer.fired`` (one-shot) or ``timer.cancelled``; the timer projection holds its next due time.
APScheduler (``AsyncIOScheduler`` in the daemon's loop, jobs in a ``SQLAlchemyJobStore`` table of
the home's database) only decides *when* to call ``fire``. On start the job store is reconciled
with the projection: jobs of timers that no longer exist go, missing or stale jobs are (re)made.

A firing appends ``timer.fired`` with an idempotency key made of the timer id and the due time, so
a firing seen twice (APScheduler's own catch-up and the reconcile, or a retry) is recorded once.
Firings missed while the daemon was down are coalesced: one ``timer.fired`` with ``missed=n``.

Schedules as people type them (``parse_schedule``): ``every 30s`` / ``every 5m`` / ``every 2h`` /
``every 1d`` (interval), a five-field crontab line (cron, UTC), or an ISO time (once).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from holon.errors import UsageError
from holon.ids import new_id
from holon.ledger import events as ev
from holon.logs import get_logger
from holon.projections.state import TimerProjection

__all__ = ["JOB_TABLE", "TimerKind", "Timers", "due_firings", "fire", "next_after", "parse_schedule", "timer_event"]

log = get_logger("holon.timers")

TimerKind = Literal["once", "interval", "cron"]
JOB_TABLE = "apscheduler_jobs"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_EVERY = re.compile(r"^every\s+(\d+)\s*([smhd]?)$", re.I)

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


def parse_schedule(text: str) -> tuple[TimerKind, str]:
    """``(kind, spec)`` of a schedule as typed; ``UsageError`` naming the problem otherwise."""
    text = text.strip()
    if m := _EVERY.match(text):
        seconds = int(m.group(1)) * _UNITS[(m.group(2) or "s").lower()]
        if seconds < 1:
            raise UsageError(f"schedule {text!r}: the interval must be at least 1 second")
        return "interval", str(seconds)
    if len(text.split()) == 5:
        try:
            CronTrigger.from_crontab(text, timezone=UTC)
        except ValueError as e:
            raise UsageError(f"schedule {text!r} is not a valid crontab line: {e}") from e
        return "cron", text
    try:
        when = datetime.fromisoformat(text)
    except ValueError as e:
        raise UsageError(
            f"schedule {text!r}: use 'every 30s|5m|2h|1d', a crontab line like '0 9 * * *', or an ISO time"
        ) from e
    return "once", (when if when.tzinfo else when.replace(tzinfo=UTC)).isoformat()


def _dt(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1e6, tz=UTC)


def _us(dt: datetime) -> int:
    return round(dt.timestamp() * 1_000_000)


def next_after(kind: TimerKind, spec: str, after_us: int) -> int | None:
    """The first due time strictly after ``after_us`` (``None``: a one-shot timer has no next)."""
    if kind == "interval":
        return after_us + int(spec) * 1_000_000
    if kind == "cron":
        trigger = CronTrigger.from_crontab(spec, timezone=UTC)
        nxt = trigger.get_next_fire_time(None, _dt(after_us) + timedelta(microseconds=1))
        return None if nxt is None else _us(nxt)
    return None


def first_due(kind: TimerKind, spec: str, now_us: int) -> int | None:
    if kind == "once":
        return _us(datetime.fromisoformat(spec))
    return next_after(kind, spec, now_us)


def due_firings(timer: TimerProjection, now_us: int) -> tuple[int, int]:
    """``(last_due_us, count)`` of the timer's due times up to ``now_us`` (count 0: not due yet)."""
    t = timer.next_fire_us
    last, count = 0, 0
    while t is not None and t <= now_us:
        last, count = t, count + 1
        t = next_after(timer.kind, timer.spec, t)
        if count > 1_000_000:  # an every-second timer down for over 11 days: enough counting
            break
    return last, count


def timer_event(schedule: str, *, now_us: int, prompt: str | None = None) -> ev.TimerScheduled:
    kind, spec = parse_schedule(schedule)
    return ev.TimerScheduled(
        timer_id=new_id("tmr"), kind=kind, spec=spec, next_fire_us=first_due(kind, spec, now_us), prompt=prompt
    )


def _trigger(timer: TimerProjection) -> BaseTrigger:
    assert timer.next_fire_us is not None
    start = _dt(timer.next_fire_us)
    if timer.kind == "interval":
        return IntervalTrigger(seconds=int(timer.spec), start_date=start, timezone=UTC)
    if timer.kind == "cron":
        return CronTrigger.from_crontab(timer.spec, timezone=UTC)
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
        if job is not None and job.next_run_time is not None and _us(job.next_run_time) == timer.next_fire_us:
            return
        self.scheduler.add_job(
            fire,
            _trigger(timer),
            args=[self.db_path, timer.timer_id],
            id=timer.timer_id,
            name=f"timer {timer.timer_id} of {timer.agent_id}",
            replace_existing=True,
            # Due when the ledger says, even if that has passed (APScheduler would skip to the next).
            next_run_time=_dt(timer.next_fire_us),
        )

    def jobs(self) -> int:
        return len(self.scheduler.get_jobs())
