"""Agent timers (``holon.daemon.timers``): schedules as typed, due-time arithmetic, and the real
daemon firing cron and one-shot timers on APScheduler, its jobs made from the timer projection.

Unit tests cover ``parse_schedule`` (every form, and hostile input: always a ``UsageError`` that
names the problem, never a crash), ``next_after`` and ``due_firings`` (bounded however long holon
was down). The daemon tests run a real ``Daemon`` in process with a scripted model; APScheduler
runs on wall time, so their timers are due a second or so ahead.
"""

from __future__ import annotations

import asyncio
import pickle
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from helpers.runtime import SCRIPTED
from helpers.wait import await_for
from hypothesis import example, given
from hypothesis import strategies as st

from holon.clock import SystemClock
from holon.config import load_settings, local_zone_name, resolve_home, zone_problem
from holon.daemon import Daemon
from holon.daemon.timers import (
    MAX_CRON_WALK,
    MAX_INTERVAL_S,
    ZonedCron,
    describe,
    due_firings,
    format_local,
    next_after,
    parse_schedule,
    timer_event,
)
from holon.errors import ConfigError, UsageError
from holon.ids import new_id
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.projections.state import TimerProjection
from holon.runtime.providers.scripted import ScriptedProvider, reply

pytestmark = pytest.mark.timeout(60)

S = 1_000_000
MIN = 60 * S
T0 = int(datetime(2030, 3, 4, 8, 0, tzinfo=UTC).timestamp()) * S
"""A Monday, 08:00 UTC."""


def _timer(kind: str, spec: str, next_fire_us: int | None) -> TimerProjection:
    return TimerProjection(timer_id="tmr_x", agent_id="agt_x", kind=kind, spec=spec, next_fire_us=next_fire_us)  # type: ignore[arg-type]


# --- parse_schedule ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("every 30s", ("interval", "30")),
        ("every 30", ("interval", "30")),
        ("  EVERY 5M ", ("interval", "300")),
        ("every 2h", ("interval", "7200")),
        ("every 1d", ("interval", "86400")),
        ("every 366d", ("interval", str(MAX_INTERVAL_S))),
        ("0 9 * * 1-5", ("cron", "0 9 * * 1-5")),
        ("*/5 * * * *", ("cron", "*/5 * * * *")),
        ("2030-03-04T09:30:00", ("once", "2030-03-04T09:30:00+00:00")),
        ("2030-03-04T11:30:00+02:00", ("once", "2030-03-04T09:30:00+00:00")),
    ],
)
def test_parse_schedule_forms(text: str, expected: tuple[str, str]) -> None:
    assert parse_schedule(text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("every 0s", "from 1 second"),
        ("every 367d", "366 days"),
        ("every " + "9" * 5000 + "s", "use 'every"),
        ("every 5x", "use 'every"),
        ("61 * * * *", "not a valid crontab line"),
        ("*/0 * * * *", "not a valid crontab line"),
        ("0 0 * * 8", "not a valid crontab line"),
        ("a b c d e", "not a valid crontab line"),
        ("0 0 30 2 *", "never fires"),
        ("0 0 31 4 *", "never fires"),
        ("tomorrow at nine", "use 'every"),
        ("", "use 'every"),
        ("\x00", "use 'every"),
        ("2030-13-01", "use 'every"),
        ("0001-01-01T00:00:00+14:00", "between the years"),
        ("9999-12-31T23:59:59-14:00", "between the years"),
    ],
)
def test_parse_schedule_refuses_with_a_clear_error(text: str, problem: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_schedule(text)
    assert problem in str(raised.value)
    assert repr(text.strip())[:40] in str(raised.value), "the message quotes what was typed"


def test_a_one_shot_time_in_the_past_is_refused() -> None:
    now = T0
    with pytest.raises(UsageError, match="in the past"):
        timer_event("2030-03-04T07:59:59", now_us=now)
    made = timer_event("2030-03-04T08:00:01", now_us=now, prompt="go")
    assert (made.kind, made.next_fire_us, made.prompt) == ("once", now + S, "go")


_FIELD = st.sampled_from(
    ["*", "0", "5", "59", "60", "*/7", "*/0", "1-5", "5-1", "mon", "jan", "L", "?", "1,2", "x", "-1"]
)


@given(st.text(max_size=60) | st.builds(" ".join, st.lists(_FIELD, min_size=5, max_size=5)))
@example("every 99999999999999999999d")
@example("every ٣s")  # a non-ASCII digit
@example("* * * * 7")
@example("0 0 29 2 *")
def test_parse_schedule_never_crashes_and_what_it_accepts_works(text: str) -> None:
    """Anything typed is accepted with a usable spec, or refused with a UsageError; nothing else."""
    try:
        kind, spec = parse_schedule(text)
    except UsageError as e:
        assert str(e).startswith("schedule ")
        return
    due = next_after(kind, spec, T0) if kind != "once" else int(datetime.fromisoformat(spec).timestamp() * S)
    assert due is not None and (kind == "once" or due > T0)
    event = timer_event(text, now_us=T0) if kind != "once" or due > T0 else None
    if event is not None:
        assert event.next_fire_us == due


# --- next_after and due_firings ---------------------------------------------------------------------


def test_next_after_is_strictly_after() -> None:
    nine = T0 + 60 * MIN
    assert next_after("cron", "0 9 * * *", T0) == nine
    assert next_after("cron", "0 9 * * *", nine) == nine + 24 * 60 * MIN
    assert next_after("cron", "0 9 * * 1-5", nine + 4 * 24 * 60 * MIN) == nine + 7 * 24 * 60 * MIN  # Fri -> Mon
    assert next_after("interval", "90", T0) == T0 + 90 * S
    assert next_after("once", "2030-03-04T09:00:00+00:00", T0) is None


def _weekdays(spec: str) -> list[str]:
    """The weekdays of a week of due times of ``spec`` from Monday ``T0``."""
    out, t = [], T0
    for _ in range(7):
        t = next_after("cron", spec, t)  # type: ignore[assignment]
        if t - T0 >= 7 * 86_400 * S:
            break
        out.append(datetime.fromtimestamp(t / S, UTC).strftime("%a"))
    return out


@pytest.mark.parametrize(
    ("spec", "days"),
    [
        ("0 9 * * 1-5", ["Mon", "Tue", "Wed", "Thu", "Fri"]),
        ("0 9 * * mon-fri", ["Mon", "Tue", "Wed", "Thu", "Fri"]),
        ("0 9 * * 0", ["Sun"]),
        ("0 9 * * 7", ["Sun"]),
        ("0 9 * * 6,0", ["Sat", "Sun"]),
        ("0 9 * * */2", ["Tue", "Thu", "Sat", "Sun"]),
        ("0 9 * * 5-7", ["Fri", "Sat", "Sun"]),
        ("0 9 * * 3/2", ["Wed", "Fri", "Sun"]),
    ],
)
def test_cron_weekdays_are_read_as_crontab_reads_them(spec: str, days: list[str]) -> None:
    """Crontab counts weekdays from Sunday (0 or 7); APScheduler 3 from Monday. Crontab wins."""
    assert _weekdays(spec) == days


def test_cron_weekday_errors() -> None:
    for spec, problem in [("0 9 * * 8", "bad day of the week '8'"), ("0 9 * * 5-1", "runs backwards"),
                          ("0 9 * * */0", "at least 1"), ("0 9 * * funday", "bad day")]:  # fmt: skip
        with pytest.raises(UsageError, match=problem):
            parse_schedule(spec)
    assert next_after("once", "2030-03-04T09:00:00+00:00", T0) is None


def test_due_firings_counts_and_finds_the_last_due_time() -> None:
    assert due_firings(_timer("interval", "10", T0), T0 - 1) == (0, 0)
    assert due_firings(_timer("interval", "10", None), T0) == (0, 0)
    assert due_firings(_timer("interval", "10", T0), T0) == (T0, 1)
    assert due_firings(_timer("interval", "10", T0), T0 + 35 * S) == (T0 + 30 * S, 4)
    assert due_firings(_timer("once", "x", T0), T0 + 10 * 86_400 * S) == (T0, 1)
    assert due_firings(_timer("cron", "*/15 * * * *", T0), T0 + 50 * MIN) == (T0 + 45 * MIN, 4)


# No stopwatch: the timeout is the bound. An unbounded walk (315 million seconds, 576,000 cron
# minutes) would run for minutes; the bounded ones take milliseconds.
@pytest.mark.timeout(60)
def test_due_firings_is_bounded_however_long_holon_was_down() -> None:
    ten_years = 10 * 365 * 86_400 * S
    last, count = due_firings(_timer("interval", "1", T0), T0 + ten_years)
    assert (last, count) == (T0 + ten_years, ten_years // S + 1)

    now = T0 + 400 * 86_400 * S + 90 * S  # an every-minute cron down for 400 days (576,000 due times)
    last, count = due_firings(_timer("cron", "* * * * *", T0), now)
    assert last == T0 + 400 * 86_400 * S + MIN, "the last due time at or before now"
    assert count == MAX_CRON_WALK, "counted up to the cap: a lower bound"

    # Past the cap with sparse due times (every minute of each 1 January): the search back from
    # now still finds the last one.
    now = _us(datetime(2060, 6, 1, tzinfo=UTC))
    last, count = due_firings(_timer("cron", "* * 1 1 *", T0), now)
    assert (last, count) == (_us(datetime(2060, 1, 1, 23, 59, tzinfo=UTC)), MAX_CRON_WALK)

    # Under the cap the count is exact.
    last, count = due_firings(_timer("cron", "0 0 1 1 *", T0), now)
    assert (last, count) == (_us(datetime(2060, 1, 1, tzinfo=UTC)), 1 + 30)


def _us(when: datetime) -> int:
    return int(when.timestamp()) * S


@given(
    step=st.integers(1, 10_000),
    offset=st.integers(0, 10**12),
    late=st.integers(-(10**9), 10**11),
)
def test_interval_due_firings_match_walking(step: int, offset: int, late: int) -> None:
    first = T0 + offset
    last, count = due_firings(_timer("interval", str(step), first), first + late)
    walked, t, n = 0, first, 0
    while t <= first + late and n <= 200:
        walked, t, n = t, t + step * S, n + 1
    if n <= 200:
        assert (last, count) == (walked, n)
    if count:
        assert last <= first + late < next_after("interval", str(step), last)  # type: ignore[operator]


@given(
    spec=st.sampled_from(["*/15 * * * *", "0 9 * * 1-5", "30 2 1 * *", "0 0 29 2 *", "5,10 */3 * * *"]),
    late_min=st.integers(-100, 200_000),
)
def test_cron_due_firings_bracket_now(spec: str, late_min: int) -> None:
    first = next_after("cron", spec, T0)
    assert first is not None
    now = first + late_min * MIN
    last, count = due_firings(_timer("cron", spec, first), now)
    if now < first:
        assert (last, count) == (0, 0)
        return
    assert first <= last <= now < next_after("cron", spec, last)  # type: ignore[operator]
    assert 1 <= count <= MAX_CRON_WALK


# --- zones, DST and the friendlier forms ------------------------------------------------------------

PARIS = "Europe/Paris"


def _paris(*args: int) -> int:
    return int(datetime(*args, tzinfo=ZoneInfo(PARIS)).timestamp()) * S


def _walk(spec: str, start: int, n: int) -> list[str]:
    """The next ``n`` due times of a cron spec after ``start``, as Paris local time with offset."""
    out, t = [], start
    for _ in range(n):
        t = next_after("cron", spec, t)  # type: ignore[assignment]
        out.append(datetime.fromtimestamp(t / S, ZoneInfo(PARIS)).strftime("%m-%d %H:%M%z"))
    return out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("every 5 minutes", ("interval", "300")),
        ("every 2h", ("interval", "7200")),
        ("every 1 day", ("interval", "86400")),
        ("every 90 seconds", ("interval", "90")),
        ("every minute", ("interval", "60")),
        ("Every Hour", ("interval", "3600")),
        ("every 2 weeks", ("interval", str(14 * 86400))),
        ("@hourly", ("cron", "CRON_TZ=Europe/Paris 0 * * * *")),
        ("@daily", ("cron", "CRON_TZ=Europe/Paris 0 0 * * *")),
        ("@WEEKLY", ("cron", "CRON_TZ=Europe/Paris 0 0 * * 0")),
        ("@monthly", ("cron", "CRON_TZ=Europe/Paris 0 0 1 * *")),
        ("0 9 * * *", ("cron", "CRON_TZ=Europe/Paris 0 9 * * *")),
        ("CRON_TZ=Asia/Tokyo 0 9 * * *", ("cron", "CRON_TZ=Asia/Tokyo 0 9 * * *")),
        ("CRON_TZ=UTC @daily", ("cron", "0 0 * * *")),
        ("2030-03-04T09:30:00", ("once", "2030-03-04T08:30:00+00:00")),  # read in Paris (CET, +01:00)
        ("2030-07-04 09:30", ("once", "2030-07-04T07:30:00+00:00")),  # summer time (CEST, +02:00)
        ("2030-03-04T09:30:00+00:00", ("once", "2030-03-04T09:30:00+00:00")),  # an offset wins
    ],
)
def test_parse_schedule_friendly_forms_in_a_zone(text: str, expected: tuple[str, str]) -> None:
    assert parse_schedule(text, zone=PARIS) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("@fortnightly", "'@hourly|@daily|@weekly|@monthly'"),
        ("every", "'every 30s|5 minutes|2h|1 day'"),
        ("every 5 fortnights", "a crontab line like '0 9 * * *'"),
        ("daily", "or a time like"),
        ("every 0 minutes", "from 1 second"),
        ("every 53 weeks", "366 days"),
        ("CRON_TZ=Mars/Olympus 0 9 * * *", "not an IANA time zone"),
        ("CRON_TZ=Europe/Paris every 5m", "followed by a crontab line"),
    ],
)
def test_junk_schedules_get_an_error_listing_the_accepted_forms(text: str, problem: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_schedule(text, zone=PARIS)
    assert problem in str(raised.value) and str(raised.value).startswith(f"schedule {text!r}")


def test_an_unknown_form_error_names_every_form_and_the_zone() -> None:
    with pytest.raises(UsageError) as raised:
        parse_schedule("tomorrow at nine", zone=PARIS)
    message = str(raised.value)
    for form in ("every 30s", "5 minutes", "1 day", "@hourly", "@daily", "@weekly", "@monthly", "0 9 * * *"):
        assert form in message, form
    assert "read in Europe/Paris" in message


def test_cron_in_a_zone_is_dst_correct_on_spring_forward() -> None:
    """29 March 2026, Paris: 02:00 CET becomes 03:00 CEST. 02:30 does not exist that day: it fires
    once, an hour late (03:30 CEST); 09:00 stays 09:00 local (08:00 UTC before, 07:00 UTC after)."""
    _, half_past_two = parse_schedule("30 2 * * *", zone=PARIS)
    assert _walk(half_past_two, _paris(2026, 3, 27), 4) == [
        "03-27 02:30+0100", "03-28 02:30+0100", "03-29 03:30+0200", "03-30 02:30+0200",
    ]  # fmt: skip
    _, nine = parse_schedule("0 9 * * *", zone=PARIS)
    assert _walk(nine, _paris(2026, 3, 27), 4) == [
        "03-27 09:00+0100", "03-28 09:00+0100", "03-29 09:00+0200", "03-30 09:00+0200",
    ]  # fmt: skip
    _, half_hourly = parse_schedule("*/30 * * * *", zone=PARIS)  # no instant twice, none lost
    assert _walk(half_hourly, _paris(2026, 3, 29, 1, 0), 4) == [
        "03-29 01:30+0100", "03-29 03:00+0200", "03-29 03:30+0200", "03-29 04:00+0200",
    ]  # fmt: skip
    _, three = parse_schedule("0 3 * * *", zone=PARIS)
    assert _walk(three, _paris(2026, 3, 29, 1, 0), 1) == ["03-29 03:00+0200"]


def test_cron_in_a_zone_is_dst_correct_on_fall_back() -> None:
    """25 October 2026, Paris: 03:00 CEST becomes 02:00 CET, so 02:30 happens twice: it fires
    once (the first time) -- APScheduler's own CronTrigger fires twice and then repeats forever."""
    _, half_past_two = parse_schedule("30 2 * * *", zone=PARIS)
    assert _walk(half_past_two, _paris(2026, 10, 23), 4) == [
        "10-23 02:30+0200", "10-24 02:30+0200", "10-25 02:30+0200", "10-26 02:30+0100",
    ]  # fmt: skip
    _, nine = parse_schedule("0 9 * * *", zone=PARIS)
    assert _walk(nine, _paris(2026, 10, 23), 4) == [
        "10-23 09:00+0200", "10-24 09:00+0200", "10-25 09:00+0100", "10-26 09:00+0100",
    ]  # fmt: skip
    # From inside the repeated hour (02:10 CET, the second time round) the next is 03:00 CET.
    second_pass = _paris(2026, 10, 25, 1, 10) + 2 * 3600 * S  # 01:10 CEST + 2 h = 02:10 CET
    _, half_hourly = parse_schedule("*/30 * * * *", zone=PARIS)
    assert _walk(half_hourly, second_pass, 2) == ["10-25 03:00+0100", "10-25 03:30+0100"]


def test_due_firings_across_a_dst_change_count_each_local_time_once() -> None:
    _, spec = parse_schedule("30 2 * * *", zone=PARIS)
    first = next_after("cron", spec, _paris(2026, 10, 20))
    last, count = due_firings(_timer("cron", spec, first), _paris(2026, 10, 27, 12, 0))
    assert count == 8 and last == _paris(2026, 10, 27, 2, 30)  # 20th to 27th, the 25th once


def test_a_zoned_cron_trigger_survives_the_job_store_pickle() -> None:
    trigger = ZonedCron("CRON_TZ=Europe/Paris 30 2 * * *")
    copy = pickle.loads(pickle.dumps(trigger))
    after = datetime(2026, 3, 28, 12, tzinfo=UTC)
    assert copy.get_next_fire_time(None, after) == trigger.get_next_fire_time(None, after)
    assert copy.get_next_fire_time(None, after) == datetime(2026, 3, 29, 1, 30, tzinfo=UTC)


def test_timer_event_records_the_zone_and_a_utc_instant() -> None:
    made = timer_event("@daily", now_us=_paris(2030, 3, 4, 12, 0), zone=PARIS)
    assert (made.kind, made.spec) == ("cron", "CRON_TZ=Europe/Paris 0 0 * * *")
    assert made.next_fire_us == _paris(2030, 3, 5, 0, 0)
    assert format_local(made.next_fire_us, PARIS) == "2030-03-05 00:00:00 CET (Europe/Paris)"
    assert describe("cron", made.spec) == "cron '0 0 * * *' (Europe/Paris)"


@pytest.mark.parametrize("zone", ["Europe/Paris", "not/a zone", "", "../../etc/passwd", "UTC"])
def test_runtime_timezone_is_checked_at_config_load(tmp_path: Path, zone: str) -> None:
    home = resolve_home(tmp_path / "home")
    home.root.mkdir()
    home.config.write_text(f'[runtime]\ntimezone = "{zone}"\n')
    if zone_problem(zone) is None or zone == "":
        assert load_settings(home).runtime.zone() == (zone or local_zone_name())
        return
    with pytest.raises(ConfigError) as raised:
        load_settings(home)
    assert "runtime.timezone" in str(raised.value) and "IANA time zone" in str(raised.value)


_ZONES = st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"])


@given(text=st.text(max_size=60) | st.builds(" ".join, st.lists(_FIELD, min_size=5, max_size=5))
       | st.sampled_from(["@daily", "@hourly ", "every 5 minutes", "every  h", "CRON_TZ=", "@"]), zone=_ZONES)  # fmt: skip
@example(text="CRON_TZ=Europe/Paris 30 2 * * *", zone="UTC")
@example(text="every 12 hrs", zone="UTC")
def test_junk_schedules_in_any_zone_never_crash(text: str, zone: str) -> None:
    try:
        kind, spec = parse_schedule(text, zone=zone)
    except UsageError as e:
        assert str(e).startswith("schedule ")
        return
    if kind != "once":
        due = next_after(kind, spec, T0)
        assert due is not None and due > T0


@given(zone=_ZONES, spec=st.sampled_from(["30 2 * * *", "*/20 * * * *", "0 9 * * 1-5", "15 1,2,3 * * *"]),
       start=st.integers(0, 3 * 365 * 86_400))  # fmt: skip
def test_zoned_due_times_strictly_increase(zone: str, spec: str, start: int) -> None:
    """Wherever it starts, even next to a DST change, the sequence of due times rises."""
    _, stored = parse_schedule(spec, zone=zone)
    t = T0 + start * S
    for _ in range(12):
        nxt = next_after("cron", stored, t)
        assert nxt is not None and nxt > t
        t = nxt


# --- the daemon firing timers -----------------------------------------------------------------------


def _daemon(store: Store, provider: ScriptedProvider) -> Daemon:
    return Daemon(store, resolver=lambda agent: (provider, SCRIPTED), poll_s=0.01)


def _schedule(store: Store, agent: str, kind: str, spec: str, due_us: int, prompt: str) -> str:
    timer_id = new_id("tmr")
    store.append(
        NewEvent(
            store.agent(agent).agent_id,
            ev.TimerScheduled(timer_id=timer_id, kind=kind, spec=spec, next_fire_us=due_us, prompt=prompt),  # type: ignore[arg-type]
            origin="operator:test",
            authority="operator",
        )
    )
    return timer_id


def _fired(store: Store, timer_id: str) -> list[ev.TimerFired]:
    return [
        e.payload
        for e in store.ledger.read(0)
        if isinstance(e.payload, ev.TimerFired) and e.payload.timer_id == timer_id
    ]  # type: ignore[misc]


def _jobs(daemon: Daemon) -> set[str]:
    """The timers the running daemon's scheduler holds (in memory: the ledger is the only store)."""
    return {job.id for job in daemon.timers.scheduler.get_jobs()}


@pytest.mark.slow  # waits on real time: 1.2 s, or up to 11 s when the next minute is too close
@pytest.mark.parametrize("spec", ["* * * * *", "CRON_TZ=Europe/Paris * * * * *"])
def test_a_cron_timer_fires_and_its_next_due_time_comes_from_the_cron(store: Store, spec: str) -> None:
    """In UTC and in a zone: the zoned trigger fires the same way."""
    provider = ScriptedProvider([reply("Checked the build: green.")])

    async def scenario() -> None:
        async with _daemon(store, provider).running(grace_s=1) as daemon:
            daemon.create_agent("watcher", settings={"background": True})
            due = SystemClock().now_us() + 1_200_000
            if MIN - due % MIN < 10 * S:  # the cron's next minute would be due before a loaded machine fires
                due += MIN - due % MIN + 1_200_000  # (and the firing would count it missed)
            timer_id = _schedule(store, "watcher", "cron", spec, due, "Check the build.")
            await await_for("the scheduler to hold the job", lambda: timer_id in _jobs(daemon))
            await await_for("_fired(store, timer_id)", lambda: _fired(store, timer_id))
            await daemon.until_idle()
            [fired] = _fired(store, timer_id)
            assert fired.scheduled_for_us == due and fired.missed == 0
            assert fired.next_fire_us == next_after("cron", spec, due)
            assert fired.next_fire_us is not None and fired.next_fire_us % MIN == 0 and fired.next_fire_us > due
            timer = store.state("timer", timer_id)
            assert isinstance(timer, TimerProjection)
            assert (timer.status, timer.fired, timer.next_fire_us) == ("scheduled", 1, fired.next_fire_us)
            job = daemon.timers.scheduler.get_job(timer_id)
            assert job is not None and int(job.next_run_time.timestamp() * S) == fired.next_fire_us
        assert provider.remaining == 0, "the firing ran one turn"
        prompts = [e for e in store.ledger.read(0) if e.type == "message.received"]
        assert [(e.origin, e.payload.text) for e in prompts] == [(f"timer:{timer_id}", "Check the build.")]

    asyncio.run(scenario())


@pytest.mark.slow  # waits on real time (a daemon's timers, a collector's timeout, a client's disconnect)
def test_a_one_shot_timer_fires_once_and_is_done(store: Store) -> None:
    provider = ScriptedProvider([reply("Reminder delivered.")])

    async def scenario() -> None:
        async with _daemon(store, provider).running(grace_s=1) as daemon:
            daemon.create_agent("ada")
            when = datetime.now(UTC) + timedelta(seconds=1)
            event = timer_event(when.isoformat(), now_us=SystemClock().now_us(), prompt="Stand-up now.")
            store.append(NewEvent(store.agent("ada").agent_id, event, origin="operator:test", authority="operator"))
            await await_for("_fired(store, event.timer_id)", lambda: _fired(store, event.timer_id))
            await daemon.until_idle()
            # Nothing can fire again: the scheduler holds no job for the timer and it is done (checked
            # below), which is what a wait "long enough to see no second firing" would only sample.
            [fired] = _fired(store, event.timer_id)
            assert fired.next_fire_us is None and fired.scheduled_for_us == event.next_fire_us
            timer = store.state("timer", event.timer_id)
            assert isinstance(timer, TimerProjection) and (timer.status, timer.fired) == ("done", 1)
            assert daemon.timers.scheduler.get_job(event.timer_id) is None
            assert event.timer_id not in _jobs(daemon)
        assert provider.remaining == 0

    asyncio.run(scenario())


def test_a_restart_makes_jobs_from_the_projection_without_a_timer_cancelled_while_down(store: Store) -> None:
    far = SystemClock().now_us() + 3600 * S

    async def first() -> tuple[str, str]:
        async with _daemon(store, ScriptedProvider()).running(grace_s=1) as daemon:
            daemon.create_agent("ada")
            keep = _schedule(store, "ada", "interval", "3600", far, "hourly")
            drop = _schedule(store, "ada", "cron", "0 * * * *", far, "on the hour")
            await await_for("{keep, drop} <= _jobs(daemon)", lambda: {keep, drop} <= _jobs(daemon))
        return keep, drop

    keep, drop = asyncio.run(first())
    store.append(NewEvent(store.agent("ada").agent_id, ev.TimerCancelled(timer_id=drop), origin="operator:test", authority="operator"))  # fmt: skip

    async def second() -> None:
        async with _daemon(store, ScriptedProvider()).running(grace_s=1) as daemon:
            assert _jobs(daemon) == {keep}  # made from the projection, not kept from the last run
            [job] = daemon.timers.scheduler.get_jobs()
            assert int(job.next_run_time.timestamp() * S) == far

    asyncio.run(second())


@pytest.mark.slow  # waits on real time (a daemon's timers, a collector's timeout, a client's disconnect)
def test_firings_while_paused_coalesce_into_the_one_queued_input(store: Store) -> None:
    provider = ScriptedProvider([reply("Checked once, as asked.")])

    async def scenario() -> None:
        async with _daemon(store, provider).running(grace_s=1) as daemon:
            daemon.create_agent("watcher", settings={"background": True})
            daemon.pause("watcher")
            timer_id = _schedule(store, "watcher", "interval", "1", SystemClock().now_us() + 300_000, "Check.")
            await await_for("len(_fired(store, timer_id)) >= 4", lambda: len(_fired(store, timer_id)) >= 4)
            agent_id = store.agent("watcher").agent_id
            store.append(NewEvent(agent_id, ev.TimerCancelled(timer_id=timer_id), origin="operator:test", authority="operator"))  # fmt: skip
            assert len(store.agent("watcher").pending_inputs) == 1, "one input however many firings"
            daemon.resume("watcher")
            await daemon.until_idle()
            fired = _fired(store, timer_id)
            assert fired[0].missed == 0 and all(f.missed >= 1 for f in fired[1:4]), [f.missed for f in fired]
            timer = store.state("timer", timer_id)
            assert isinstance(timer, TimerProjection) and timer.missed == sum(f.missed for f in fired)
        assert provider.remaining == 0, "one turn for the whole pause"
        inputs = [e for e in store.ledger.read(0) if e.type == "message.received" and e.origin == f"timer:{timer_id}"]
        taken = [e for e in store.ledger.read(0) if e.type == "turn.started"]
        assert len(taken) == 1 and taken[0].payload.inputs == [inputs[0].seq]

    asyncio.run(scenario())
