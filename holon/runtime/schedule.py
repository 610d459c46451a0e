"""Schedule maths: schedules as people type them, crontab lines in a zone, due times. Pure: no
scheduler, no store, no clock (times come in as µs since the epoch).

The daemon's scheduler (``holon.daemon.timers``, the only module that imports APScheduler) asks
this module *when*; the CLI (``holon agent create --schedule``, ``holon agent schedule``) uses it to
check a schedule and show its next due time without loading the scheduler.

Schedules as people type them (``parse_schedule``): ``every 30s`` / ``every 5 minutes`` /
``every 2h`` / ``every 1 day`` / ``every hour`` (interval, at most 366 days; ``every 1 day`` is 24
hours, so its local time moves with DST), ``@hourly|@daily|@weekly|@monthly|@yearly`` and
five-field crontab lines (cron; weekdays as crontab counts them, 0 or 7 = Sunday), or an ISO time
(once). Crontab lines fire in ``[runtime] timezone`` (the system's zone by default), DST-correct
(``ZonedCron``); times without an offset are that zone's. Each timer keeps its zone in the ledger
(``CRON_TZ=Europe/Paris 0 9 * * *``; its due times are UTC instants), so changing the setting
later moves no existing timer. Anything else, or a crontab line that never fires, is a
``UsageError`` naming the problem and listing the accepted forms.

Crontab lines are read by ``holon.runtime.crontab`` (as APScheduler 3 read them when it did this
work, so no stored timer changes its due times); its names are re-exported here.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Literal
from zoneinfo import ZoneInfo

from holon.clock import parse_us
from holon.config import zone_problem
from holon.errors import UsageError
from holon.ids import new_id
from holon.ledger import events as ev
from holon.projections.state import TimerProjection
from holon.runtime.crontab import CRON_TZ, ZonedCron, from_us, split_cron, to_us

__all__ = [
    "ALIASES",
    "FORMS",
    "MAX_CRON_WALK",
    "MAX_INTERVAL_S",
    "TimerKind",
    "ZonedCron",
    "describe",
    "due_firings",
    "first_due",
    "format_local",
    "from_us",
    "next_after",
    "parse_schedule",
    "split_cron",
    "timer_event",
    "timer_zone",
    "to_us",
]

TimerKind = Literal["once", "interval", "cron"]
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
"""One-shot times must fall in these UTC years (µs since the epoch)."""


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
    if m := CRON_TZ.match(text):
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


_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def _check_cron(text: str, expr: str, zone: str) -> str:
    try:
        trigger = ZonedCron(_zoned(zone, expr))
    except ValueError as e:
        raise UsageError(f"schedule {_quote(text)} is not a valid crontab line: {e}") from e
    if trigger.after(to_us(_EPOCH)) is None:
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


# --- due times -------------------------------------------------------------------------------------


def next_after(kind: TimerKind, spec: str, after_us: int) -> int | None:
    """The first due time strictly after ``after_us`` (``None``: a one-shot timer has no next)."""
    if kind == "interval":
        return after_us + int(spec) * 1_000_000
    if kind == "cron":
        return ZonedCron(spec).after(after_us)
    return None


def first_due(kind: TimerKind, spec: str, now_us: int) -> int | None:
    """The first due time of a timer made at ``now_us`` (a one-shot's ``spec`` is the aware UTC
    time ``parse_schedule`` wrote, so ``parse_us``'s naive-is-UTC rule never applies)."""
    if kind == "once":
        return parse_us(spec)
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
    trigger = ZonedCron(timer.spec)
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


# --- words and events ------------------------------------------------------------------------------


def timer_zone(timer: TimerProjection, default: str = "UTC") -> str:
    """The zone a timer was read in: a cron timer's own; ``default`` for the others."""
    return split_cron(timer.spec)[0] if timer.kind == "cron" else default


def format_local(ts_us: int, zone: str) -> str:
    """A due time as people read it: ``2026-03-29 03:30 CEST (Europe/Paris)``."""
    local = from_us(ts_us).astimezone(ZoneInfo(zone))
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
