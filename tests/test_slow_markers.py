"""Every test that starts a process or runs a benchmark is marked ``slow``, so ``pytest -m "not slow"``
stays the fast inner loop.

The rule: a test is ``slow`` when it starts an OS process, runs a benchmark, or waits on real time
(a daemon's real-clock timers, a collector's timeout, a client's disconnect). An in-process
``Daemon`` on a ``FakeClock`` that waits only on barriers (``until_idle``, ``await_for`` of a state)
is not slow: those tests (lifespan, idle back-off, status, wakes, pause/abort) are the fast loop's
coverage of the daemon and stay in it.

Read from the source (no test runs): a test starts a process or a benchmark when it, a fixture it
takes from its own file, or a function of its file that it calls names one of the starters below
(the ``holon`` CLI helpers, ``serve_home``, ``subprocess``, ``pexpect``, a model
``ProcessProvider``, a benchmark's entry point: a ``run_*_bench`` function of ``holon.bench``,
imported or reached as an attribute of a ``holon.bench`` module). Tools' commands that an
in-process agent runs are the subject of their tests, not counted. Waiting on real time cannot be
read from the source; those tests are marked by hand.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent

STARTERS_FROM = {
    "helpers.turn_cli": {"holon", "spawn_holon", "spawn", "run_host", "make_home", "holon_argv"},
    "tests.helpers.turn_cli": {"holon", "spawn_holon", "spawn", "run_host", "make_home", "holon_argv"},
    "helpers.served": {"serve_home"},
    "tests.helpers.served": {"serve_home"},
    "test_cli": {"holon"},
    "holon.runtime.providers.model_process": {"ProcessProvider"},
}
STARTER_MODULES = {"subprocess", "pexpect", "multiprocessing", "pty"}
BENCH_RUN = re.compile(r"run_\w*bench$|run_inputs$")
"""A benchmark's entry point in ``holon.bench`` (``run_ledger_bench``, ``run_turn_bench``, ...)."""
Function = ast.FunctionDef | ast.AsyncFunctionDef


def _starters(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in STARTERS_FROM:
            names |= {a.asname or a.name for a in node.names if a.name in STARTERS_FROM[node.module]}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("holon.bench"):
            names |= {a.asname or a.name for a in node.names if BENCH_RUN.match(a.name)}
        elif isinstance(node, ast.ImportFrom) and node.module in STARTER_MODULES:
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in STARTER_MODULES}
    return names


def _bench_modules(tree: ast.Module) -> set[str]:
    """Names bound to ``holon.bench`` modules (``from holon.bench import ledger as bench``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "holon.bench":
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.asname for a in node.names if a.name.startswith("holon.bench.") and a.asname}
    return names


def _is_slow(decorators: list[ast.expr]) -> bool:
    return any("mark.slow" in ast.unparse(d) for d in decorators)


def unmarked_process_tests(path: Path) -> list[str]:
    """The tests of ``path`` that start a process and are not marked ``slow``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    starters = _starters(tree)
    benches = _bench_modules(tree)
    if not starters and not benches:
        return []
    module_slow = any(
        isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)
        and "mark.slow" in ast.unparse(n.value)
        for n in tree.body
    )  # fmt: skip
    if module_slow:
        return []
    defs: dict[str, ast.AST] = {}
    tests: list[tuple[str, Function, ast.ClassDef | None]] = []
    for node in tree.body:
        if isinstance(node, Function):
            defs[node.name] = node
            if node.name.startswith("test"):
                tests.append((node.name, node, None))
        elif isinstance(node, ast.ClassDef):
            defs[node.name] = node
            for sub in node.body:
                if isinstance(sub, Function):
                    defs.setdefault(sub.name, sub)
                    if sub.name.startswith("test") and node.name.startswith("Test"):
                        tests.append((f"{node.name}::{sub.name}", sub, node))
    memo: dict[str, bool] = {}

    def starts(name: str, stack: tuple[str, ...] = ()) -> bool:
        if name in memo or name in stack:
            return memo.get(name, False)
        node = defs[name]
        found = False
        for sub in ast.walk(node):
            if (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Name)
                and sub.value.id in benches
                and BENCH_RUN.match(sub.attr)
            ) or (
                isinstance(sub, ast.Name)
                and (sub.id in starters or (sub.id in defs and sub.id != name and starts(sub.id, (*stack, name))))
            ):
                found = True
                break
        if not found and isinstance(node, Function):
            found = any(a.arg in defs and a.arg != name and starts(a.arg, (*stack, name)) for a in node.args.args)
        memo[name] = found
        return found

    autouse = any(
        starts(n) for n, f in defs.items() if isinstance(f, Function) and "autouse=True" in str([ast.unparse(d) for d in f.decorator_list])
    )  # fmt: skip
    return [
        name
        for name, node, cls in tests
        if (autouse or starts(node.name))
        and not _is_slow(node.decorator_list)
        and not (cls and _is_slow(cls.decorator_list))
    ]


def test_every_test_that_starts_a_process_is_marked_slow() -> None:
    found = {p.name: bad for p in sorted(TESTS.glob("test_*.py")) if (bad := unmarked_process_tests(p))}
    assert not found, f"mark these slow (pytestmark = pytest.mark.slow, or @pytest.mark.slow): {found}"


def test_the_check_sees_a_cli_test(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "import pytest\nfrom helpers.turn_cli import holon\n\n"
        "@pytest.fixture\ndef home(tmp_path):\n    holon(tmp_path, 'init')\n    return tmp_path\n\n"
        "def test_uses_the_fixture(home):\n    pass\n\n"
        "@pytest.mark.slow\ndef test_marked(home):\n    pass\n\n"
        "def test_pure():\n    assert 1\n"
    )
    assert unmarked_process_tests(sample) == ["test_uses_the_fixture"]


def test_the_check_sees_a_benchmark_run(tmp_path: Path) -> None:
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "import pytest\nfrom holon.bench import ledger as bench\nfrom holon.bench.turn import run_turn_bench\n\n"
        "def test_attribute():\n    bench.run_ledger_bench(rounds=1)\n\n"
        "def test_imported():\n    run_turn_bench(turns=1)\n\n"
        "def test_a_helper_of_the_bench_module():\n    bench.raw_rows()\n\n"
        "@pytest.mark.slow\ndef test_marked():\n    run_turn_bench(turns=1)\n"
    )
    assert unmarked_process_tests(sample) == ["test_attribute", "test_imported"]
