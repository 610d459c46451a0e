"""Configuration: defaults < file < environment, and every problem is a ConfigError naming the key."""

from __future__ import annotations

import datetime as dt
import math
import os
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from helpers.props import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from holon.config import HomePaths, Settings, load_settings, resolve_home
from holon.errors import ConfigError


@pytest.fixture
def cfg_home(tmp_path: Path) -> HomePaths:
    paths = resolve_home(tmp_path / "home")
    paths.root.mkdir(parents=True)
    return paths


def write(paths: HomePaths, text: str) -> Path:
    paths.config.write_text(text, encoding="utf-8")
    return paths.config


def test_defaults(cfg_home: HomePaths) -> None:
    s = load_settings(cfg_home)
    assert s == Settings()
    assert s.ledger.synchronous == "FULL"
    assert s.ledger.blob_threshold_bytes == 16_384
    assert s.ledger.blob_preview_chars == 400
    assert s.ledger.busy_timeout_ms == 30_000
    assert s.logging.level == "info"
    assert s.logging.file is True


def test_shipped_config_file_states_the_defaults(cfg_home: HomePaths) -> None:
    shipped = Path(__file__).parents[1] / "config" / "holon.toml"
    if not shipped.is_file():
        pytest.skip("no config/holon.toml in this checkout")
    assert load_settings(cfg_home, config_file=shipped) == Settings()


def test_file_overrides_defaults(cfg_home: HomePaths) -> None:
    write(cfg_home, '[ledger]\nblob_threshold_bytes = 4096\nsynchronous = "NORMAL"\n[logging]\nlevel = "debug"\n')
    s = load_settings(cfg_home)
    assert (s.ledger.blob_threshold_bytes, s.ledger.synchronous, s.logging.level) == (4096, "NORMAL", "debug")
    assert s.ledger.blob_preview_chars == 400  # untouched keys keep their defaults


def test_environment_overrides_file(cfg_home: HomePaths, monkeypatch: pytest.MonkeyPatch) -> None:
    write(cfg_home, '[ledger]\nblob_threshold_bytes = 4096\nsynchronous = "NORMAL"\n')
    monkeypatch.setenv("HOLON_LEDGER_BLOB_THRESHOLD_BYTES", "65536")
    s = load_settings(cfg_home)
    assert s.ledger.blob_threshold_bytes == 65536
    assert s.ledger.synchronous == "NORMAL"  # the rest of the file's section still applies
    monkeypatch.setenv("HOLON_LOGGING_CONSOLE", "json")
    assert load_settings(cfg_home).logging.console == "json"


def test_environment_without_file(cfg_home: HomePaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOLON_LEDGER_SYNCHRONOUS", "EXTRA")
    assert load_settings(cfg_home).ledger.synchronous == "EXTRA"


def test_holon_config_names_another_file(cfg_home: HomePaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(cfg_home, "[ledger]\nblob_preview_chars = 1\n")
    other = tmp_path / "elsewhere.toml"
    other.write_text("[ledger]\nblob_preview_chars = 2\n")
    monkeypatch.setenv("HOLON_CONFIG", str(other))
    assert load_settings(cfg_home).ledger.blob_preview_chars == 2
    third = tmp_path / "third.toml"
    third.write_text("[ledger]\nblob_preview_chars = 3\n")
    assert load_settings(cfg_home, config_file=third).ledger.blob_preview_chars == 3


def test_missing_holon_config_file(cfg_home: HomePaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOLON_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match=r"missing\.toml"):
        load_settings(cfg_home)
    monkeypatch.delenv("HOLON_CONFIG")
    with pytest.raises(ConfigError, match=r"nowhere\.toml"):
        load_settings(cfg_home, config_file=tmp_path / "nowhere.toml")


def _one_line(err: pytest.ExceptionInfo[ConfigError]) -> str:
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("config:")
    assert err.value.exit_code == 2
    return message


def test_unknown_key_in_file(cfg_home: HomePaths) -> None:
    path = write(cfg_home, "[ledger]\nnope = 1\n")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg_home)
    message = _one_line(err)
    assert "ledger.nope" in message
    assert str(path) in message


def test_unknown_section_in_file(cfg_home: HomePaths) -> None:
    write(cfg_home, "[ledgre]\nsynchronous = 'FULL'\n")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg_home)
    assert "ledgre" in _one_line(err)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[ledger]\nblob_threshold_bytes = 'big'\n", "ledger.blob_threshold_bytes"),
        ("[ledger]\nblob_threshold_bytes = 10\n", "ledger.blob_threshold_bytes"),  # below the minimum
        ("[ledger]\nsynchronous = 'SOMETIMES'\n", "ledger.synchronous"),
        ("[ledger]\nbusy_timeout_ms = -1\n", "ledger.busy_timeout_ms"),
        ("[logging]\nlevel = 'loud'\n", "logging.level"),
        ("ledger = 5\n", "ledger"),
    ],
)
def test_bad_value_in_file(cfg_home: HomePaths, text: str, key: str) -> None:
    write(cfg_home, text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg_home)
    message = _one_line(err)
    assert f"'{key}'" in message
    assert "bad value" in message


def test_bad_value_in_environment_names_the_variable(cfg_home: HomePaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOLON_LEDGER_BLOB_THRESHOLD_BYTES", "lots")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg_home)
    message = _one_line(err)
    assert "ledger.blob_threshold_bytes" in message
    assert "HOLON_LEDGER_BLOB_THRESHOLD_BYTES" in message


@pytest.mark.parametrize("text", ["[ledger\n", "ledger = \n", "a = 1\na = 2\n", "x = 'unterminated\n"])
def test_broken_toml(cfg_home: HomePaths, text: str) -> None:
    path = write(cfg_home, text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg_home)
    message = _one_line(err)
    assert "TOML" in message and str(path) in message


def test_config_file_that_is_not_utf8(cfg_home: HomePaths) -> None:
    cfg_home.config.write_bytes(b"[ledger]\nsynchronous = '\xff\xfe'\n")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg_home)
    assert str(cfg_home.config) in _one_line(err)


@pytest.mark.parametrize("var", ["HOLON_LEDGER_FOO", "HOLON_LOGGING_COLOUR", "HOLON_LEDGER_"])
def test_unknown_environment_setting(cfg_home: HomePaths, monkeypatch: pytest.MonkeyPatch, var: str) -> None:
    monkeypatch.setenv(var, "1")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg_home)
    message = _one_line(err)
    assert var in message
    if var == "HOLON_LEDGER_FOO":
        assert "ledger.foo" in message


def test_non_setting_environment_is_ignored(cfg_home: HomePaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOLON_HOME", str(cfg_home.root))
    monkeypatch.setenv("PATH_LIKE_HOLON_THING", "x")
    assert load_settings(cfg_home) == Settings()


@pytest.mark.parametrize(
    "text",
    [
        "_env_file = 5\n",
        "_env_prefix = 3\n",
        "_env_prefix = 'OTHER_'\n",
        "_case_sensitive = true\n",
        "_cli_parse_args = true\n",
        "_secrets_dir = '/'\n",
        "__class__ = 1\n",
        "model_config = 1\n",
    ],
)
def test_settings_machinery_cannot_be_reached_from_the_file(cfg_home: HomePaths, text: str) -> None:
    """Top-level keys are settings sections only: pydantic-settings' own init options are unknown keys."""
    write(cfg_home, text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg_home)
    assert "unknown key" in _one_line(err)


def test_resolve_home(tmp_path: Path) -> None:
    assert resolve_home(tmp_path).root == tmp_path
    assert resolve_home(None, {"HOLON_HOME": str(tmp_path / "h")}).root == tmp_path / "h"
    assert resolve_home(tmp_path / "x", {"HOLON_HOME": "/elsewhere"}).root == tmp_path / "x"
    assert resolve_home(None, {}).root == Path("~/.holon").expanduser()
    paths = resolve_home(tmp_path)
    assert paths.db == tmp_path / "holon.db"
    assert paths.config == tmp_path / "holon.toml"
    assert paths.agent_home("a") == tmp_path / "agents" / "a"


# --- junk never escapes as anything but ConfigError ------------------------------------------

REAL_KEYS = [
    "ledger",
    "logging",
    "synchronous",
    "busy_timeout_ms",
    "blob_threshold_bytes",
    "blob_preview_chars",
    "blob_retention_days",
    "level",
    "console",
    "file",
]
TRICKY_KEYS = ["_env_file", "_env_prefix", "_case_sensitive", "_cli_parse_args", "_secrets_dir", "__init__", "self"]
keys = st.one_of(st.sampled_from(REAL_KEYS + TRICKY_KEYS), st.text(min_size=1, max_size=8))
scalars = st.one_of(
    st.integers(),
    st.integers(-10, 70_000_000),
    st.floats(),
    st.booleans(),
    st.text(max_size=10),
    st.sampled_from(["NORMAL", "FULL", "debug", "json", "off", "yes", "1"]),
    st.dates(),
    st.datetimes(),
)
toml_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=10,
)


def _toml_str(s: str) -> str:
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return repr(v) if math.isfinite(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, dt.datetime | dt.date):
        return v.isoformat()
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_toml_str(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


def to_toml(doc: dict[str, Any]) -> str:
    return "".join(f"{_toml_str(k)} = {_toml_value(v)}\n" for k, v in doc.items())


def _load_only_config_errors(paths: HomePaths) -> Settings | None:
    try:
        return load_settings(paths)
    except ConfigError as e:
        assert str(e).startswith("config:")
        return None


@pytest.mark.slow  # a long property run (fuzzing)
@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.dictionaries(keys, toml_values, max_size=4))
def test_junk_config_only_raises_config_error(doc: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(os.environ, {}, clear=False):
        for var in [v for v in os.environ if v.startswith("HOLON_")]:
            del os.environ[var]
        paths = resolve_home(tmp)
        paths.config.write_text(to_toml(doc), encoding="utf-8")
        result = _load_only_config_errors(paths)
        if result is not None:
            assert isinstance(result, Settings)
            assert set(doc) <= set(Settings.model_fields)  # only real sections load (a random key may be one)


@settings(max_examples=examples(50))
@given(doc=st.fixed_dictionaries({"ledger": st.dictionaries(st.sampled_from(REAL_KEYS), toml_values, max_size=3)}))
def test_junk_in_real_sections_only_raises_config_error(doc: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = resolve_home(tmp)
        paths.config.write_text(to_toml(doc), encoding="utf-8")
        _load_only_config_errors(paths)


@settings(max_examples=examples(100))
@given(raw=st.one_of(st.binary(max_size=60), st.text(max_size=60).map(str.encode)))
def test_junk_bytes_only_raise_config_error(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = resolve_home(tmp)
        paths.config.write_bytes(raw)
        _load_only_config_errors(paths)


env_names = st.one_of(
    st.sampled_from(
        [
            "HOLON_LEDGER_SYNCHRONOUS",
            "HOLON_LEDGER_BLOB_THRESHOLD_BYTES",
            "HOLON_LOGGING_FILE",
            "HOLON_LEDGER",
            "HOLON_LOGGING",
        ]
    ),
    st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=12).map(lambda s: "HOLON_LEDGER_" + s),
)
env_values = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=12)


@settings(max_examples=examples(100))
@given(env=st.dictionaries(env_names, env_values, max_size=3))
def test_junk_environment_only_raises_config_error(env: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(os.environ, env):
        _load_only_config_errors(resolve_home(tmp))
