"""What a light command loads (issue 18, "Restart ... import lazily on start-up"): a test on
imports, not on time (``holon bench cli`` and ``holon bench daemon`` measure the time).

``holon ledger verify`` and ``holon agent list`` on a home with events run in a fresh interpreter,
which then reports the heavy libraries in ``sys.modules`` and how many event payload schemas
pydantic built: none of the libraries (rich came in through structlog's import, the web stack,
litellm and the scheduler belong to other commands), and no schema (``defer_build``: each
payload model is built the first time an event of its type is decoded or appended).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.turn_cli import REPO, cli_env

from holon.cli.main import main

pytestmark = pytest.mark.slow  # each test starts a fresh interpreter

HEAVY = ("rich", "pygments", "litellm", "tiktoken", "fastapi", "starlette", "uvicorn", "httpx", "apscheduler")

_PROBE = """
import json, sys
from holon.cli.main import main
rc = main(sys.argv[1:])
from holon.ledger.events import PAYLOAD_ADAPTER, PAYLOAD_TYPES
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.stdin.read())))
built = sorted(tag for tag, cls in PAYLOAD_TYPES.items() if cls.__pydantic_complete__)
print(json.dumps({"rc": rc, "heavy": heavy, "built": built, "union_built": PAYLOAD_ADAPTER.pydantic_complete}))
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("startup") / "home"
    assert main(["--home", str(root), "init"]) == 0
    assert main(["--home", str(root), "agent", "create", "alice"]) == 0
    return root


@pytest.mark.parametrize("argv", [("ledger", "verify"), ("agent", "list")])
def test_a_light_command_imports_nothing_heavy_and_builds_no_event_schema(home: Path, argv: tuple[str, ...]) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, "--home", str(home), *argv],
        input=json.dumps(HEAVY), capture_output=True, text=True, env=cli_env(), cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["rc"] == 0, proc.stderr[-2000:]
    assert report["heavy"] == [], f"holon {' '.join(argv)} imported {report['heavy']}"
    assert report["built"] == [] and report["union_built"] is False, report


#: What `holon serve` loads only after its API answers (RFC 0005, "Healthy before the heavy
#: imports"): the model library, the scheduler and its database layer, the turn runner with context
#: assembly and the tools. Each is a design property of the start-up, not a timing.
AFTER_HEALTH = (
    "litellm",
    "openai",
    "tiktoken",
    "apscheduler.schedulers.base",  # reads every installed package's entry points as it loads
    "sqlalchemy",
    "sqlmodel",
    "holon.runtime.turn.runner",
    "holon.runtime.turn.prompt",
    "holon.context.sections",
    "holon.runtime.tools.commands",
    "holon.runtime.tools.memory",
)

_SERVE_PROBE = """
import json, os, signal, sys
from holon.api import server

listening = server._Server.startup

async def startup(self, sockets=None):
    await listening(self, sockets=sockets)  # the API listens: health answers from here on
    if self.started:
        wanted = json.loads(os.environ["PROBE_MODULES"])
        loaded = sorted(m for m in wanted if m in sys.modules)
        print(json.dumps({"loaded": loaded}), flush=True)
        os.kill(os.getpid(), signal.SIGTERM)

server._Server.startup = startup
from holon.cli.main import run
run()
"""


def test_serve_answers_health_before_the_heavy_imports(home: Path) -> None:
    """Health, status and inputs need the ledger, the daemon's rooms and the API; the rest is
    imported once the API listens (a background thread, the timers' start), so it adds nothing to
    the time to healthy. Checked at the moment uvicorn reports it listens, in a real ``holon serve``."""
    proc = subprocess.run(
        [sys.executable, "-c", _SERVE_PROBE, "--home", str(home), "serve", "--port", "0"],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
        env=cli_env(PROBE_MODULES=json.dumps(AFTER_HEALTH), HOLON_DAEMON_WARM_MODEL="false"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["loaded"] == [], f"holon serve imported {report['loaded']} before its API answered"


def test_a_state_model_imports_neither_the_store_nor_the_reducers() -> None:
    """``holon.ledger`` and ``holon.projections`` export their names on first use (``holon.lazy``):
    a client that reads state models (the CLI through the daemon) loads those modules alone."""
    probe = (
        "import json, sys, holon.projections.state, holon.ledger.events; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('holon.ledger', 'holon.projections')))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=cli_env(), cwd=REPO, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded == ["holon.ledger", "holon.ledger.events", "holon.projections", "holon.projections.state"], loaded
