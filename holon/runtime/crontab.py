"""Crontab lines in an IANA zone: which wall-clock minutes a five-field line matches, and its due
instants on the UTC time line, DST-correct (``ZonedCron``). Pure.

The fields are read as APScheduler 3's ``CronTrigger`` read them when it did this work, so no
stored timer changes its due times: every field must match (the day of the month and the day of
the week included); ``*``, ``*/n``, ``a``, ``a-b``, ``a-b/n``, ``a/n`` and lists; month names;
``last`` for the month's last day; weekdays as crontab counts them (0 or 7 = Sunday, or names).
A stored spec names its zone first unless it is UTC: ``CRON_TZ=Europe/Paris 0 9 * * *``.
"""

from __future__ import annotations

import re
from calendar import monthrange
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

__all__ = ["CRON_TZ", "ZonedCron", "from_us", "split_cron", "to_us"]

#: A cron spec names its zone first (cronie's syntax) unless it is UTC: ``CRON_TZ=Europe/Paris 0 9 * * *``.
CRON_TZ = re.compile(r"^CRON_TZ=(\S+)\s+(.*)$", re.S)
_DST_WINDOW = timedelta(hours=3)
"""Longer than any daylight-saving shift: due times this close to a change are checked one by one."""
_SEARCH_YEARS = 400
"""A crontab line that matches no minute in this many years (a whole Gregorian cycle) never fires."""
_MAX_YEAR = 9999


def split_cron(spec: str) -> tuple[str, str]:
    """``(zone, five fields)`` of a stored cron spec."""
    if m := CRON_TZ.match(spec):
        return m.group(1), m.group(2)
    return "UTC", spec


def from_us(us: int) -> datetime:
    """µs since the epoch as an aware UTC datetime."""
    return datetime.fromtimestamp(us / 1e6, tz=UTC)


def to_us(dt: datetime) -> int:
    """An aware datetime as µs since the epoch."""
    return round(dt.timestamp() * 1_000_000)


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
