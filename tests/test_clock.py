"""holon.clock: the one place timestamps become ISO 8601 text and back."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from holon.clock import format_us, parse_iso, parse_us, to_us, utc
from holon.errors import UsageError

# Years 1..9999, the range ``datetime`` (and so ISO 8601 text) can hold.
_MIN_US = to_us(datetime(1, 1, 1, tzinfo=UTC))
_MAX_US = to_us(datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC))


def test_format_and_parse_known_values() -> None:
    assert format_us(1_767_225_600_000_000) == "2026-01-01T00:00:00.000000Z"
    assert format_us(1_767_225_600_000_001) == "2026-01-01T00:00:00.000001Z"
    assert format_us(0) == "1970-01-01T00:00:00.000000Z"
    assert parse_us("2026-01-01T00:00:00Z") == 1_767_225_600_000_000
    assert parse_us("2026-01-01") == 1_767_225_600_000_000  # naive means UTC
    assert parse_us("2026-01-01T01:00:00+01:00") == 1_767_225_600_000_000
    assert parse_us("1969-12-31T23:59:59.500000Z") == -500_000


@given(st.integers(_MIN_US, _MAX_US))
def test_round_trip_is_exact_to_the_microsecond(ts: int) -> None:
    text = format_us(ts)
    assert parse_us(text) == ts
    assert parse_iso(text, field="since") == ts
    assert to_us(utc(ts)) == ts


@given(st.datetimes(timezones=st.just(UTC)))
def test_datetimes_round_trip(when: datetime) -> None:
    assert utc(to_us(when)) == when
    assert parse_us(when.isoformat()) == to_us(when)


def test_none_stays_none() -> None:
    assert parse_iso(None, field="since") is None


@pytest.mark.parametrize("bad", ["", "yesterday", "2026-13-01", "2026-01-01T25:00", "\x00", "Z", "10000-01-01"])
def test_bad_values_name_the_field(bad: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_iso(bad, field="--since")
    assert str(e.value) == f"--since is not an ISO 8601 time: {bad!r}"


def test_shown_cuts_a_long_value() -> None:
    with pytest.raises(UsageError, match=r"^'until' is not an ISO 8601 time: 'xxxx'$"):
        parse_iso("x" * 10_000, field="'until'", shown=4)


@given(st.text(max_size=80))
def test_any_string_parses_or_is_a_usage_error(text: str) -> None:
    try:
        ts = parse_iso(text, field="until")
    except UsageError as e:
        assert str(e).startswith("until is not an ISO 8601 time: ")
    else:
        assert _MIN_US - 86_400_000_000 <= ts <= _MAX_US + 86_400_000_000  # an offset moves it a day at most
