"""Agent timers on APScheduler 3.11: the only module that imports apscheduler.

The ledger is the truth: a timer exists because of its ``timer.scheduled`` event and ends with
``timer.fired`` (one-shot) or ``timer.cancelled``; the timer projection holds its next due time.
APScheduler (``AsyncIOScheduler`` in the daemon's loop, jobs in a ``SQLAlchemyJobStore`` table of
the home's database) only decides *when* to call ``fire``. On start the job store is reconciled
with the projection: jobs of timers that no longer exist go, missing or stale jobs are (re)made.

A firing appends ``timer.fired`` with an idempotency key made of the timer id and the due time, so
a firing seen twice (APScheduler's own catch-up and the reconcile, or a retry) is recorded once.
Firings missed while the daemon was down are coalesced: one ``timer.fired`` with ``missed=n``,
counted in bounded time however long it was down (``due_firings``).

Schedules as people type them (``parse_schedule``): ``every 30s`` / ``every 5 minutes`` /
``every 2h`` / ``every 1 day`` / ``every hour`` (interval, at most 366 days; ``every 1 day`` is 24
hours, so its local time moves with DST), ``@hourly|@daily|@weekly|@monthly|@yearly`` and
five-field crontab lines (cron; weekdays as crontab counts them, 0 or 7 = Sunday, which
APScheduler 3 does not), or an ISO time (once). Crontab lines fire in ``[runtime] timezone`` (the
system's zone by default), DST-correct (``ZonedCron``); times without an offset are that zone's.
Each timer keeps its zone in the ledger (``CRON_TZ=Europe/Paris 0 9 * * *``; its due times are UTC
instants), so changing the setting later moves no existing timer. Anything else, or a crontab line
that never fires, is a ``UsageError`` naming the problem and listing the accepted forms.

Schedules change after an agent is made with ``add_timer`` / ``cancel_timer`` (``holon agent
schedule``, ``POST``/``DELETE /v1/agents/{agent}/timers``): each is a ledger event, so a running
daemon's watcher brings its jobs in line whichever process appended it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo

from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from holon.config import zone_problem
from holon.errors import ConflictError, NotFoundError, UsageError
from holon.ids import new_id
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.logs import get_logger
from holon.projections import Store
from holon.projections.state import TimerProjection
from holon.runtime.settings import read_settings

__all__ = [
    "ALIASES",
    "FORMS",
    "JOB_TABLE",
    "ZonedCron",
    "TimerKind",
    "Timers",
    "add_timer",
    "cancel_timer",
    "describe",
    "due_firings",
    "format_local",
    "fire",
    "next_after",
    "parse_schedule",
    "split_cron",
    "timer_event",
    "timer_zone",
]

log = get_logger("holon.timers")

TimerKind = Literal["once", "interval", "cron"]
JOB_TABLE = "apscheduler_jobs"
_UNITS = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
    **dict.fromkeys(("w", "week", "weeks"), 7 * 86400),
}
_EVERY = re.compile(r"^every\s+(?:([0-9]{1,12})\s*)?([a-z]*)$", re.I)
#: Crontab's nicknames, as the five-field lines they stand for (read in the timer's zone).
ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
#: A cron spec names its zone first (cronie's syntax) unless it is UTC: ``CRON_TZ=Europe/Paris 0 9 * * *``.
_CRON_TZ = re.compile(r"^CRON_TZ=(\S+)\s+(.*)$", re.S)
FORMS = (
    "'every 30s|5 minutes|2h|1 day', '@hourly|@daily|@weekly|@monthly', "
    "a crontab line like '0 9 * * *', or a time like '2030-03-04T09:30'"
)
"""The accepted forms, for help texts and error messages."""
MAX_INTERVAL_S = 366 * 86_400
"""The longest ``every`` interval; rarer timers are a crontab line or an ISO time."""
MAX_CRON_WALK = 10_000
"""Due times of a cron timer counted one by one when it is overdue; past this the count is a
lower bound and the last due time is found from the end (see ``due_firings``)."""
_YEARS = (1970, 9000)
"""One-shot times must fall in these UTC years (µs since the epoch, and APScheduler's datetimes)."""
_DST_WINDOW = timedelta(hours=3)
"""Longer than any daylight-saving shift: due times this close to a change are checked one by one."""

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


def parse_schedule(text: str, *, zone: str = "UTC") -> tuple[TimerKind, str]:
    """``(kind, spec)`` of a schedule as typed; ``UsageError`` naming the problem otherwise.

    ``zone`` (an IANA name, ``[runtime] timezone``) is where crontab lines fire and what a time
    without an offset means. A cron spec keeps its zone (``CRON_TZ=Europe/Paris 0 9 * * *``; bare
    means UTC, as before zones existed); a one-shot spec is a UTC instant."""
    text = text.strip()
    if m := _EVERY.match(text):
        return "interval", _check_every(text, m, zone)
    if text.lower() in ALIASES:
        return "cron", _zoned(zone, _check_cron(text, ALIASES[text.lower()], zone))
    if m := _CRON_TZ.match(text):
        named, expr = m.group(1), m.group(2).strip()
        if problem := zone_problem(named):
            raise UsageError(f"schedule {_quote(text)}: {problem}")
        expr = ALIASES.get(expr.lower(), expr)
        if len(expr.split()) != 5:
            raise UsageError(f"schedule {_quote(text)}: CRON_TZ=ZONE is followed by a crontab line like '0 9 * * *'")
        return "cron", _zoned(named, _check_cron(text, expr, named))
    if len(text.split()) == 5:
        return "cron", _zoned(zone, _check_cron(text, text, zone))
    return "once", _check_once(text, zone)


def _zoned(zone: str, expr: str) -> str:
    return expr if zone == "UTC" else f"CRON_TZ={zone} {expr}"


def split_cron(spec: str) -> tuple[str, str]:
    """``(zone, five fields)`` of a stored cron spec."""
    if m := _CRON_TZ.match(spec):
        return m.group(1), m.group(2)
    return "UTC", spec


def _not_a_schedule(text: str, zone: str) -> UsageError:
    return UsageError(f"schedule {_quote(text)}: use {FORMS} (crontab lines and times are read in {zone})")


def _check_every(text: str, m: re.Match[str], zone: str) -> str:
    number, unit = m.group(1), m.group(2).lower()
    if (unit and unit not in _UNITS) or (number is None and not unit):
        raise _not_a_schedule(text, zone)
    seconds = int(number or 1) * _UNITS.get(unit, 1)
    if not 1 <= seconds <= MAX_INTERVAL_S:
        raise UsageError(
            f"schedule {_quote(text)}: the interval must be from 1 second to {MAX_INTERVAL_S // 86_400} days"
        )
    return str(seconds)


def _quote(text: str) -> str:
    """``text`` for an error message: quoted, and cut short when long."""
    return repr(text if len(text) <= 80 else text[:77] + "...")


_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _weekday(token: str) -> int:
    if token.isascii() and token.isdigit() and int(token) <= 7:
        return int(token)
    if token in _WEEKDAYS:
        return _WEEKDAYS.index(token)
    raise ValueError(f"bad day of the week {token!r} (0-7 or sun-sat)")


def _crontab_weekdays(field: str) -> str:
    """A crontab day-of-week field (0 and 7 are Sunday) as day names for APScheduler 3, whose
    numbers start at Monday: its ``from_crontab`` passes numbers through, so ``1-5`` would mean
    Tuesday to Saturday."""
    if field == "*":
        return "*"
    days: set[int] = set()
    for part in field.lower().split(","):
        base, slash, step_text = part.partition("/")
        step = int(step_text) if slash else 1
        if step < 1:
            raise ValueError(f"the step in {part!r} must be at least 1")
        if base == "*":
            low, high = 0, 6
        elif "-" in base:
            first, last = base.split("-", 1)
            low, high = _weekday(first), _weekday(last)
        else:
            low = _weekday(base)
            high = 7 if slash else low
        if low > high:
            raise ValueError(f"the day-of-week range {base!r} runs backwards")
        days.update(day % 7 for day in range(low, high + 1, step))
    return ",".join(_WEEKDAYS[day] for day in sorted(days))


class ZonedCron(BaseTrigger):
    """A crontab line in an IANA zone, DST-correct (APScheduler 3's own ``CronTrigger`` repeats
    a time the fall-back repeats, and can return the same time forever there).

    The line is matched against local wall-clock time (a ``CronTrigger`` on naive wall time,
    where no DST exists); each matching wall time is then placed on the UTC time line:

    * a local time the clocks skip (spring forward) fires once, as late as the skip (02:30 ->
      03:30 when 02:00 becomes 03:00);
    * a local time that happens twice (fall back) fires once, the first time;
    * every other local time fires at its one instant, so ``0 9 * * *`` stays 09:00 local.

    Pickled into the job store with its two strings; the daemon's firing code and ``due_firings``
    use the same ``after``."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        zone, expr = split_cron(spec)
        fields = expr.split()
        if len(fields) != 5:
            raise ValueError(f"a crontab line has 5 fields, got {len(fields)}")
        fields[4] = _crontab_weekdays(fields[4])
        self._wall = CronTrigger.from_crontab(" ".join(fields), timezone=UTC)
        self._zone = ZoneInfo(zone)

    def __getstate__(self) -> dict[str, str]:
        return {"spec": self.spec}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__init__(state["spec"])  # type: ignore[misc]

    def __str__(self) -> str:
        return f"cron[{self.spec}]"

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        after = _us(previous_fire_time) if previous_fire_time is not None else _us(now) - 1
        nxt = self.after(after)
        return None if nxt is None else _dt(nxt)

    def _next_wall(self, wall: datetime) -> datetime | None:
        """The first matching wall time strictly after ``wall`` (naive wall time posing as UTC)."""
        return self._wall.get_next_fire_time(None, wall + timedelta(microseconds=1))

    def _instant(self, wall: datetime) -> datetime:
        """A wall time's first instant (``fold=0``: before a fall-back; late by the gap in a skip)."""
        return wall.replace(tzinfo=self._zone, fold=0).astimezone(UTC)

    def _shift(self, at: datetime) -> timedelta:
        """How far the zone's clocks move within ``_DST_WINDOW`` of ``at`` (zero on most days)."""
        before = (at - _DST_WINDOW).astimezone(self._zone).utcoffset()
        after = (at + _DST_WINDOW).astimezone(self._zone).utcoffset()
        assert before is not None and after is not None
        return abs(after - before)

    def after(self, after_us: int) -> int | None:
        """The first due time strictly after ``after_us``."""
        start = _dt(after_us)
        local = start.astimezone(self._zone).replace(tzinfo=UTC, fold=0)
        shift = self._shift(start)
        if not shift:  # an ordinary day: wall-clock order is time order
            wall = self._next_wall(local)
            if wall is None:
                return None
            first = self._instant(wall)
            if not (shift := self._shift(first)):
                return _us(first)
        # Near a change wall order is not time order: a skipped 02:30 fires at 03:30, after 03:00,
        # and a repeated hour's walls lie behind ``local``. Look ``shift`` either side.
        best: datetime | None = None
        wall, limit = self._next_wall(local - shift), None
        while wall is not None and (limit is None or wall <= limit):
            instant = self._instant(wall)
            if instant > start and (best is None or instant < best):
                best = instant
                limit = limit or wall + shift
            wall = self._next_wall(wall)
        return None if best is None else _us(best)


def _cron(spec: str) -> ZonedCron:
    """The trigger of a stored cron spec (a crontab line, with its zone when not UTC)."""
    try:
        return ZonedCron(spec)
    except KeyError as e:  # an unknown zone: ZoneInfoNotFoundError
        raise ValueError(f"unknown time zone in {spec!r}") from e


_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def _check_cron(text: str, expr: str, zone: str) -> str:
    try:
        trigger = _cron(_zoned(zone, expr))
    except (ValueError, TypeError, KeyError, IndexError) as e:  # APScheduler's parser raises all four
        raise UsageError(f"schedule {_quote(text)} is not a valid crontab line: {e}") from e
    if trigger.after(_us(_EPOCH)) is None:
        raise UsageError(f"schedule {_quote(text)} never fires (no such date)")
    return expr


def _check_once(text: str, zone: str) -> str:
    try:
        when = datetime.fromisoformat(text)
    except ValueError as e:
        raise _not_a_schedule(text, zone) from e
    try:
        when = (when if when.tzinfo else when.replace(tzinfo=ZoneInfo(zone))).astimezone(UTC)
    except (OverflowError, ValueError):  # past year 1 or 9999 once in UTC
        when = datetime.min.replace(tzinfo=UTC)
    if not _YEARS[0] <= when.year < _YEARS[1]:
        raise UsageError(f"schedule {_quote(text)}: the time must be between the years {_YEARS[0]} and {_YEARS[1]}")
    return when.isoformat()


def _dt(us: int) -> datetime:
    return datetime.fromtimestamp(us / 1e6, tz=UTC)


def _us(dt: datetime) -> int:
    return round(dt.timestamp() * 1_000_000)


def next_after(kind: TimerKind, spec: str, after_us: int) -> int | None:
    """The first due time strictly after ``after_us`` (``None``: a one-shot timer has no next)."""
    if kind == "interval":
        return after_us + int(spec) * 1_000_000
    if kind == "cron":
        return _cron(spec).after(after_us)
    return None


def first_due(kind: TimerKind, spec: str, now_us: int) -> int | None:
    if kind == "once":
        return _us(datetime.fromisoformat(spec))
    return next_after(kind, spec, now_us)


def due_firings(timer: TimerProjection, now_us: int) -> tuple[int, int]:
    """``(last_due_us, count)`` of the timer's due times up to ``now_us`` (count 0: not due yet).

    Bounded however long holon was down: interval misses are arithmetic; a cron timer's due times
    are counted one by one up to ``MAX_CRON_WALK`` (then the count is that lower bound, and the
    last due time is searched back from ``now_us``)."""
    first = timer.next_fire_us
    if first is None or first > now_us:
        return 0, 0
    if timer.kind == "interval":
        step = int(timer.spec) * 1_000_000
        n = (now_us - first) // step
        return first + n * step, n + 1
    if timer.kind != "cron":
        return first, 1
    trigger = _cron(timer.spec)
    last, count = first, 1
    while count < MAX_CRON_WALK:
        t = trigger.after(last)
        if t is None or t > now_us:
            return last, count
        last, count = t, count + 1
    return _last_cron_due(trigger, last, now_us), count


def _last_cron_due(trigger: ZonedCron, known_us: int, now_us: int) -> int:
    """The last due time at or before ``now_us``, given a due time ``known_us`` before it: look
    back over a window that doubles until it holds a due time, then walk forward (at most
    ``MAX_CRON_WALK`` steps; crontab times are at least a minute apart)."""
    span = 60_000_000
    start = trigger.after(now_us - span - 1)
    while (start is None or start > now_us) and now_us - span > known_us:
        span *= 2
        start = trigger.after(max(now_us - span, known_us) - 1)
    last = known_us if start is None or start > now_us else start
    for _ in range(MAX_CRON_WALK):
        t = trigger.after(last)
        if t is None or t > now_us:
            break
        last = t
    return last


def timer_zone(timer: TimerProjection, default: str = "UTC") -> str:
    """The zone a timer was read in: a cron timer's own; ``default`` for the others."""
    return split_cron(timer.spec)[0] if timer.kind == "cron" else default


def format_local(ts_us: int, zone: str) -> str:
    """A due time as people read it: ``2026-03-29 03:30 CEST (Europe/Paris)``."""
    local = _dt(ts_us).astimezone(ZoneInfo(zone))
    return f"{local:%Y-%m-%d %H:%M:%S %Z} ({zone})" if zone != "UTC" else f"{local:%Y-%m-%d %H:%M:%S} UTC"


def describe(kind: TimerKind, spec: str) -> str:
    """A timer's schedule in words: ``every 300s``, ``cron '0 9 * * *' (Europe/Paris)``, ``once at ...``."""
    if kind == "interval":
        return f"every {spec}s"
    if kind == "cron":
        zone, expr = split_cron(spec)
        return f"cron '{expr}' ({zone})"
    return f"once at {spec}"


def timer_event(schedule: str, *, now_us: int, prompt: str | None = None, zone: str = "UTC") -> ev.TimerScheduled:
    """The ``timer.scheduled`` event of a schedule as typed, read in ``zone``; ``UsageError`` for
    a one-shot time that has already passed (it would fire at once, which is never what was meant)."""
    kind, spec = parse_schedule(schedule, zone=zone)
    due = first_due(kind, spec, now_us)
    if kind == "once" and due is not None and due <= now_us:
        raise UsageError(f"schedule {_quote(schedule.strip())} is in the past")
    return ev.TimerScheduled(timer_id=new_id("tmr"), kind=kind, spec=spec, next_fire_us=due, prompt=prompt)


def add_timer(
    store: Store, agent: str, schedule: str, *, now_us: int, prompt: str | None = None, origin: str
) -> TimerProjection:
    """Give an agent one more schedule: ``timer.scheduled``, and ``agent.configured(background)``
    in the same transaction when it was not a background agent yet (a timer wakes it with no
    operator present, so its per-day budgets must apply, as for ``agent create --schedule``)."""
    state = store.agent(agent)
    made = timer_event(schedule, now_us=now_us, prompt=prompt, zone=store.settings.runtime.zone())
    events = []
    if read_settings(state.settings).settings.background is not True:  # total: "no" is not background
        events.append(NewEvent(state.agent_id, ev.AgentConfigured(changes={"background": True}), origin=origin, authority="operator"))  # fmt: skip
    events.append(NewEvent(state.agent_id, made, origin=origin, authority="operator"))
    store.append(*events)
    timer = store.state("timer", made.timer_id)
    assert isinstance(timer, TimerProjection)
    return timer


def cancel_timer(store: Store, agent: str, timer_id: str, *, origin: str) -> TimerProjection:
    """Cancel one of an agent's timers (``timer.cancelled``): ``NotFoundError`` for a timer id the
    agent does not have, ``ConflictError`` for one that is already over (fired once, cancelled)."""
    state = store.agent(agent)
    timer = store.state("timer", timer_id)
    if not isinstance(timer, TimerProjection) or timer.agent_id != state.agent_id:
        raise NotFoundError(f"agent {state.name} has no timer {timer_id!r} (see 'holon agent schedule {state.name}')")
    if timer.status != "scheduled":
        raise ConflictError(f"timer {timer_id} of {state.name} is already {timer.status}")
    store.append(NewEvent(state.agent_id, ev.TimerCancelled(timer_id=timer_id), origin=origin, authority="operator"))
    cancelled = store.state("timer", timer_id)
    assert isinstance(cancelled, TimerProjection)
    return cancelled


def _trigger(timer: TimerProjection) -> BaseTrigger:
    assert timer.next_fire_us is not None
    start = _dt(timer.next_fire_us)
    if timer.kind == "interval":
        return IntervalTrigger(seconds=int(timer.spec), start_date=start, timezone=UTC)
    if timer.kind == "cron":
        return _cron(timer.spec)
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
