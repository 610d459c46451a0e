"""``KeyLookup`` and ``api_key_for``: a key from the environment first, then the home's secrets file,
looked up at each call; a missing or unreadable key is ``ModelKeyMissing`` naming the variable,
whose environment was searched and the fix, never a value."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from holon.config import ModelDefaults
from holon.errors import ModelKeyMissing, UsageError
from holon.runtime.providers.base import ModelSettings
from holon.runtime.providers.litellm_provider import api_key_for
from holon.runtime.secrets import KeyLookup, check_secret_name, list_secrets, set_secret, unset_secret

SETTINGS = ModelSettings(model="openai/x", api_key_env="OPENAI_API_KEY")


def test_the_environment_wins_then_the_secrets_file_read_at_each_call(tmp_path: Path) -> None:
    keys = KeyLookup(tmp_path, environ={}, who="the daemon")
    with pytest.raises(ModelKeyMissing) as missing:
        api_key_for(SETTINGS, keys)
    message = str(missing.value)
    assert f"OPENAI_API_KEY is not set in the daemon's environment (pid {os.getpid()})" in message
    assert "nor in holon secrets: run `holon secrets set OPENAI_API_KEY`" in message
    set_secret(tmp_path, "OPENAI_API_KEY", "sk-from-file\n")
    assert api_key_for(SETTINGS, keys) == "sk-from-file"  # no new lookup object: read at call time
    env_first = KeyLookup(tmp_path, environ={"OPENAI_API_KEY": "sk-from-env"})
    assert api_key_for(SETTINGS, env_first) == "sk-from-env"
    assert unset_secret(tmp_path, "OPENAI_API_KEY") and list_secrets(tmp_path) == []
    with pytest.raises(ModelKeyMissing):
        api_key_for(SETTINGS, keys)


def test_a_damaged_secrets_file_is_a_missing_key_that_names_the_file_not_its_content(tmp_path: Path) -> None:
    (tmp_path / "secrets.json").write_text('{"secrets": {"OPENAI_API_KEY": "sk-half-writ')
    with pytest.raises(ModelKeyMissing) as damaged:
        api_key_for(SETTINGS, KeyLookup(tmp_path, environ={}))
    assert "secrets.json is damaged" in str(damaged.value) and "sk-half" not in str(damaged.value)


def test_only_names_agents_may_use_can_be_stored() -> None:
    defaults = ModelDefaults()
    assert check_secret_name("OPENAI_API_KEY", defaults) == "OPENAI_API_KEY"
    assert check_secret_name("MY_KEY", ModelDefaults(api_key_env="MY_KEY")) == "MY_KEY"
    for bad in ("PGPASSWORD", "not a name", "sk-abc"):
        with pytest.raises(UsageError):
            check_secret_name(bad, defaults)
