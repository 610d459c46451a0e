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

A crontab line's fields are read as APScheduler 3's ``CronTrigger`` read them when it did this
work (every field must match, the day of the month and the day of the week included; ``*``,
``*/n``, ``a``, ``a-b``, ``a-b/n``, ``a/n``, lists, month names, ``last`` for the day of the month),
so no stored timer changes its due times.
"""

from __future__ import annotations

import re
from calendar import monthrange
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from holon.config import zone_problem
from holon.errors import UsageError
from holon.ids import new_id
from holon.ledger import events as ev
from holon.projections.state import TimerProjection

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
"""One-shot times must fall in these UTC years (µs since the epoch)."""
_DST_WINDOW = timedelta(hours=3)
"""Longer than any daylight-saving shift: due times this close to a change are checked one by one."""
_SEARCH_YEARS = 400
"""A crontab line that matches no minute in this many years (a whole Gregorian cycle) never fires."""
_MAX_YEAR = 9999


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


# --- crontab fields --------------------------------------------------------------------------------

_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_ALL = re.compile(r"\*(?:/([0-9]+))?")
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?(?:/([0-9]+))?")
_NAMES = re.compile(r"([a-z]+)(?:-([a-z]+))?", re.I)


def _weekday(token: str) -> int:
    if token.isascii() and token.isdigit() and int(token) <= 7:
        return int(token)
    if token in _WEEKDAYS:
        return _WEEKDAYS.index(token)
    raise ValueError(f"bad day of the week {token!r} (0-7 or sun-sat)")


def _crontab_weekdays(field: str) -> frozenset[int]:
    """A crontab day-of-week field (0 and 7 are Sunday) as Python weekdays (0 is Monday)."""
    if field == "*":
        return frozenset(range(7))
    days: set[int] = set()
    for part in field.lower().split(","):
        base, slash, step_text = part.partition("/")
        if slash and not (step_text.isascii() and step_text.isdigit()):
            raise ValueError(f"bad step in {part!r}")
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
        days.update((day - 1) % 7 for day in range(low, high + 1, step))  # crontab's Sunday 0 -> Python's 6
    return frozenset(days)


def _field(expr: str, name: str, low: int, high: int, names: tuple[str, ...] = ()) -> frozenset[int]:
    """The values one crontab field (``minute``, ``hour``, ``day``, ``month``) matches.

    ``day`` may also hold ``last`` (the month's last day), returned as ``0``."""
    values: set[int] = set()
    for part in expr.split(","):
        if m := _ALL.fullmatch(part):
            first, last, step = low, high, _step(m.group(1), high - low, part)
        elif m := _RANGE.fullmatch(part):
            first = int(m.group(1))
            last = int(m.group(2)) if m.group(2) else (high if m.group(3) else first)
            if first > last:
                raise ValueError(f"{part!r}: the minimum value in a range must not be higher than the maximum")
            if first < low or last > high:
                raise ValueError(f"{part!r}: the {name} must be from {low} to {high}")
            step = _step(m.group(3), last - first, part)
        elif name == "day" and part.lower() == "last":
            values.add(0)
            continue
        elif names and (m := _NAMES.fullmatch(part)):
            first = _name(m.group(1), names, part)
            last = _name(m.group(2), names, part) if m.group(2) else first
            if first > last:
                raise ValueError(f"{part!r}: the minimum value in a range must not be higher than the maximum")
            step = 1
        else:
            raise ValueError(f"unrecognized expression {part!r} for the {name}")
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _step(text: str | None, span: int, part: str) -> int:
    if text is None:
        return 1
    step = int(text)
    if step == 0:
        raise ValueError(f"{part!r}: the step must be higher than 0")
    if step > span:
        raise ValueError(f"{part!r}: the step ({step}) is higher than the range of the expression ({span})")
    return step


def _name(text: str, names: tuple[str, ...], part: str) -> int:
    try:
        return names.index(text.lower()) + 1
    except ValueError:
        raise ValueError(f"{part!r}: invalid name {text!r}") from None


@dataclass(frozen=True, slots=True)
class _Crontab:
    """The five fields of a crontab line as value sets; every field must match (APScheduler 3's reading)."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    """Days of the month; ``0`` stands for the month's last day."""
    months: frozenset[int]
    weekdays: frozenset[int]
    """Python weekdays (0 is Monday)."""

    @classmethod
    def parse(cls, expr: str) -> _Crontab:
        fields = expr.split()
        if len(fields) != 5:
            raise ValueError(f"a crontab line has 5 fields, got {len(fields)}")
        minute, hour, day, month, weekday = fields
        return cls(
            minutes=tuple(sorted(_field(minute, "minute", 0, 59))),
            hours=tuple(sorted(_field(hour, "hour", 0, 23))),
            days=_field(day, "day", 1, 31),
            months=_field(month, "month", 1, 12, _MONTHS),
            weekdays=_crontab_weekdays(weekday),
        )

    def _day_matches(self, year: int, month: int, day: int, last_day: int) -> bool:
        if day not in self.days and not (day == last_day and 0 in self.days):
            return False
        return date(year, month, day).weekday() in self.weekdays

    def _time_from(self, hour: int, minute: int) -> tuple[int, int] | None:
        """The first matching ``(hour, minute)`` at or after ``hour:minute`` in a day."""
        for h in self.hours:
            if h < hour:
                continue
            for m in self.minutes:
                if h > hour or m >= minute:
                    return h, m
        return None

    def next_wall(self, wall: datetime) -> datetime | None:
        """The first matching wall time (naive) strictly after ``wall``; ``None`` if there is none."""
        start = wall.replace(second=0, microsecond=0, tzinfo=None) + timedelta(minutes=1)
        year, month = start.year, start.month
        first = True
        while year <= min(start.year + _SEARCH_YEARS, _MAX_YEAR):
            if month in self.months:
                last_day = monthrange(year, month)[1]
                for day in range(start.day if first else 1, last_day + 1):
                    if not self._day_matches(year, month, day, last_day):
                        continue
                    on_start = first and day == start.day
                    hm = self._time_from(start.hour, start.minute) if on_start else self._time_from(0, 0)
                    if hm is not None:
                        return datetime(year, month, day, hm[0], hm[1])
            first = False
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        return None


class ZonedCron:
    """A crontab line in an IANA zone, DST-correct.

    The line is matched against local wall-clock time (naive wall time, where no DST exists);
    each matching wall time is then placed on the UTC time line:

    * a local time the clocks skip (spring forward) fires once, as late as the skip (02:30 ->
      03:30 when 02:00 becomes 03:00);
    * a local time that happens twice (fall back) fires once, the first time;
    * every other local time fires at its one instant, so ``0 9 * * *`` stays 09:00 local.

    ``ValueError`` for a line that is not a crontab line, or an unknown zone."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        zone, expr = split_cron(spec)
        fields = expr.split()
        if len(fields) != 5:
            raise ValueError(f"a crontab line has 5 fields, got {len(fields)}")
        self._wall = _Crontab.parse(expr)
        try:
            self._zone = ZoneInfo(zone)
        except (KeyError, ValueError) as e:  # ZoneInfoNotFoundError is a KeyError
            raise ValueError(f"unknown time zone in {spec!r}") from e

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
        start = from_us(after_us)
        local = start.astimezone(self._zone).replace(tzinfo=None, fold=0)
        shift = self._shift(start)
        if not shift:  # an ordinary day: wall-clock order is time order
            wall = self._wall.next_wall(local)
            if wall is None:
                return None
            first = self._instant(wall)
            if not (shift := self._shift(first)):
                return to_us(first)
        # Near a change wall order is not time order: a skipped 02:30 fires at 03:30, after 03:00,
        # and a repeated hour's walls lie behind ``local``. Look ``shift`` either side.
        best: datetime | None = None
        found, limit = self._wall.next_wall(local - shift), None
        while found is not None and (limit is None or found <= limit):
            instant = self._instant(found)
            if instant > start and (best is None or instant < best):
                best = instant
                limit = limit or found + shift
            found = self._wall.next_wall(found)
        return None if best is None else to_us(best)


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


def from_us(us: int) -> datetime:
    """µs since the epoch as an aware UTC datetime."""
    return datetime.fromtimestamp(us / 1e6, tz=UTC)


def to_us(dt: datetime) -> int:
    """An aware datetime as µs since the epoch."""
    return round(dt.timestamp() * 1_000_000)


# --- due times -------------------------------------------------------------------------------------


def next_after(kind: TimerKind, spec: str, after_us: int) -> int | None:
    """The first due time strictly after ``after_us`` (``None``: a one-shot timer has no next)."""
    if kind == "interval":
        return after_us + int(spec) * 1_000_000
    if kind == "cron":
        return ZonedCron(spec).after(after_us)
    return None


def first_due(kind: TimerKind, spec: str, now_us: int) -> int | None:
    if kind == "once":
        return to_us(datetime.fromisoformat(spec))
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
