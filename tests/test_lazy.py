"""``holon.lazy``: packages that export their submodules' names on first use (PEP 562)."""

from __future__ import annotations

import sys
import types

import pytest

from holon import lazy


def test_a_name_is_imported_when_asked_for_and_then_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    package = types.ModuleType("holon_lazy_probe")
    monkeypatch.setitem(sys.modules, package.__name__, package)
    package.__getattr__ = lazy.exports(package.__name__, {"dumps": "json", "JSONDecodeError": "json"})  # type: ignore[attr-defined]
    assert "dumps" not in vars(package)
    import json

    assert package.dumps is json.dumps  # type: ignore[attr-defined]
    assert vars(package)["dumps"] is json.dumps  # kept: the next lookup never reaches __getattr__
    with pytest.raises(AttributeError, match="module 'holon_lazy_probe' has no attribute 'loads'"):
        package.loads  # type: ignore[attr-defined]  # noqa: B018


def test_a_name_its_own_submodule_would_shadow_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\['fold'\] would be shadowed"):
        lazy.exports("holon.projections", {"fold": "holon.projections.fold"})


def test_every_lazy_package_exports_what_it_lists() -> None:
    import holon.daemon
    import holon.ledger
    import holon.projections
    import holon.runtime.turn

    for package in (holon.daemon, holon.ledger, holon.projections, holon.runtime.turn):
        for name in package.__all__:
            assert getattr(package, name) is not None, (package.__name__, name)
