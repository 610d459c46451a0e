"""Finding 9 of issue 14: ``run_command`` is confined.

A command gets a scrubbed environment (an explicit pass-list, never the daemon's own: a secret
whose name has no KEY or TOKEN in it does not leak through ``env``, ``/proc/$PPID/environ`` or the
daemon's ``/proc/PID/environ``), runs only in the agent's workspace or home, and (where the
kernel allows namespaces) cannot write the operator's memory file, other agents' homes or the
ledger. Every test runs real commands through the real ``TaskManager``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.props import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from holon.clock import FakeClock
from holon.config import ToolsSettings
from holon.memory.files import ensure_operator_file
from holon.projections import Store
from holon.runtime import sandbox as sandbox_mod
from holon.runtime.agents import create_agent
from holon.runtime.host import AgentHost
from holon.runtime.sandbox import Sandbox, command_env
from holon.runtime.tasks import CommandOutcome, TaskManager
from holon.runtime.tools.base import ToolContext, ToolRetry
from holon.runtime.tools.commands import RunParams, _confined_cwd, run_command
from holon.runtime.views import StoreViews

CANARY = "postgres://app:canary-5f1e9c@db.internal/prod"

namespaces = pytest.mark.skipif(not sandbox_mod.namespaces_available(), reason="this machine refuses user namespaces")


def _manager(store: Store, *, isolation: str = "auto", pass_env: tuple[str, ...] = ()) -> TaskManager:
    sandbox = Sandbox(store.paths.root, isolation, "")  # type: ignore[arg-type]
    return TaskManager(
        store.append, FakeClock(), tasks_dir=store.paths.root / "tasks", sandbox=sandbox, pass_env=pass_env
    )


def _run(manager: TaskManager, home: Path, command: str, *, cwd: Path | None = None) -> CommandOutcome:
    async def go() -> CommandOutcome:
        out = await manager.run_command("agt_x", home, home, cwd or home, command, wait_s=30, timeout_s=60)
        assert out.finished, out
        return out

    return asyncio.run(go())


def _leak_probe() -> str:
    return f"env; echo; cat /proc/$PPID/environ; echo; cat /proc/{os.getpid()}/environ; echo; cat /proc/1/environ; true"


@namespaces
def test_no_daemon_secret_reaches_a_confined_command(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", CANARY)  # no KEY/TOKEN in the name: the old filter passed it
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    home = Path(create_agent(store, "ada").home)
    out = _run(_manager(store, isolation="namespaces"), home, _leak_probe())
    assert "canary-5f1e9c" not in out.output
    assert f"HOME={home}" in out.output and "LC_ALL=C.UTF-8" in out.output and "PATH=" in out.output


def test_no_daemon_secret_in_env_or_parent_environ_unconfined(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without namespaces (``isolation = "none"``) the command's own and its parent's environment
    are still scrubbed. (The daemon's own ``/proc/PID/environ`` is then protected only by
    ``PR_SET_DUMPABLE``, which root ignores: see RFC 0002.)"""
    monkeypatch.setenv("DATABASE_URL", CANARY)
    home = Path(create_agent(store, "ada").home)
    out = _run(_manager(store, isolation="none"), home, "env; echo; cat /proc/$PPID/environ")
    assert "canary-5f1e9c" not in out.output and f"HOME={home}" in out.output


def test_pass_env_names_what_the_operator_adds() -> None:
    environ = {"PATH": "/bin", "DATABASE_URL": CANARY, "MY_TOOL_OPTS": "-v", "LC_TIME": "C", "HOME": "/root"}
    env = command_env("/agents/ada", ["MY_TOOL_OPTS"], environ)
    assert env == {"PATH": "/bin", "MY_TOOL_OPTS": "-v", "LC_TIME": "C", "HOME": "/agents/ada"}
    with pytest.raises(ValueError, match="not an environment variable name"):
        ToolsSettings(pass_env=("BAD NAME",))


@namespaces
def test_a_confined_command_cannot_write_the_operator_file_or_other_homes(store: Store) -> None:
    operator = ensure_operator_file(store.paths)
    before = operator.read_bytes()
    ada, bob = Path(create_agent(store, "ada").home), Path(create_agent(store, "bob").home)
    command = (
        f"echo injected >> {operator}; mv {operator} {operator}.x; echo x > {bob}/stolen; "
        f"echo x > {store.paths.root}/planted; umount {store.paths.root}; mount -o remount,rw {store.paths.root}; "
        f"echo mine > {ada}/own.txt; true"
    )
    _run(_manager(store), ada, command)
    assert operator.read_bytes() == before
    assert not (bob / "stolen").exists() and not (store.paths.root / "planted").exists()
    assert (ada / "own.txt").read_text() == "mine\n", "the agent's own home stays writable"


def test_namespaces_refused_where_unavailable(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox_mod, "namespaces_available", lambda: False)
    auto = Sandbox(store.paths.root, "auto")
    assert auto.mode == "none" and auto.warning is not None and "unconfined" in auto.warning
    assert auto.refusal is None
    strict = Sandbox(store.paths.root, "namespaces")
    assert strict.refusal is not None and strict.warning is None
    assert Sandbox(store.paths.root, "none").warning is None  # the operator chose it
    wrapped = Sandbox(store.paths.root, "auto", "bwrap --ro-bind / / --")
    assert wrapped.mode == "wrapper" and wrapped.prefix([]) == ["bwrap", "--ro-bind", "/", "/", "--"]


def _ctx(store: Store, host: AgentHost, name: str) -> ToolContext:
    agent = store.agent(name)
    return ToolContext(
        agent_id=agent.agent_id,
        agent_name=name,
        turn_id="turn_x",
        clock=store.ledger.clock,
        home=Path(agent.home),
        workspace=Path(agent.home),
        views=StoreViews(store, agent.agent_id),
        services=host.services,
    )


def test_cwd_outside_home_and_workspace_is_refused(store: Store, tmp_path: Path) -> None:
    create_agent(store, "ada")
    create_agent(store, "bob")
    host = AgentHost(store, lambda agent: (None, None), clock=FakeClock())  # type: ignore[arg-type,return-value]
    ctx = _ctx(store, host, "ada")
    for bad in ("/", "..", "../bob", str(store.paths.root), "/etc", "../../memory"):
        with pytest.raises(ToolRetry, match="outside your workspace"):
            asyncio.run(run_command(ctx, RunParams(command="pwd", cwd=bad)))
    (ctx.home / "sub").mkdir()
    out = asyncio.run(run_command(ctx, RunParams(command="pwd", cwd="sub")))
    assert str(ctx.home / "sub") in out.text
    link = ctx.home / "escape"
    link.symlink_to(tmp_path)
    with pytest.raises(ToolRetry, match="outside your workspace"):
        asyncio.run(run_command(ctx, RunParams(command="pwd", cwd="escape")))


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cwd=st.one_of(st.text(max_size=40), st.sampled_from(["..", "../..", "/", "a/../../..", "./.", "~"])))
def test_any_cwd_is_refused_or_confined(store: Store, cwd: str) -> None:
    home = Path(store.paths.agent_home("fuzz"))
    home.mkdir(parents=True, exist_ok=True)
    ctx = SimpleNamespace(home=home, workspace=home)
    try:
        target = _confined_cwd(ctx, cwd)  # type: ignore[arg-type]
    except ToolRetry:
        return
    assert target == home.resolve() or target.is_relative_to(home.resolve())


def test_daemon_status_names_the_sandbox_and_warns_when_unconfined(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from holon.cli.daemon_cmd import _describe
    from holon.daemon import Daemon

    monkeypatch.setattr(sandbox_mod, "namespaces_available", lambda: False)
    daemon = Daemon(store, resolver=lambda agent: (None, None), poll_s=0.01)  # type: ignore[arg-type,return-value]
    commands = daemon.status()["commands"]
    assert commands["sandbox"] == "none" and "unconfined" in commands["warning"]
    text = _describe({"running": True, "state": "running", "pid": 1, "status": daemon.status()})
    assert "WARNING: run_command runs unconfined" in text


def test_a_command_keeps_the_operators_umask_not_holons_private_one(store: Store) -> None:
    """holon makes its own files private (``private_umask`` at CLI start, issue 14 finding 8), but
    files an agent's command makes in the operator's workspace keep the umask holon started with."""
    from holon import paths

    home = Path(create_agent(store, "ada").home)
    before = os.umask(0o022)
    try:
        paths._STARTED_WITH.pop("umask", None)
        paths.private_umask()  # what holon.cli.main does; started with 022
        _run(_manager(store, isolation="none"), home, "echo hi > made-by-agent.txt")
    finally:
        os.umask(before)
        paths._STARTED_WITH.pop("umask", None)
    assert (home / "made-by-agent.txt").stat().st_mode & 0o777 == 0o644
