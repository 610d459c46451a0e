"""A worker for the turn-loop crash tests: start an AgentHost on a home, recover, run until idle.

    python tests/helpers/turn_host.py HOME [--submit AGENT TEXT] [--timeout SECONDS]

Does what a restarted holon does: takes the home's host lock, runs recovery (interrupted turns,
in-flight tool calls, orphaned tasks), optionally records an operator input, then runs every agent
with pending inputs (and whatever they start) until all is quiet. Models are resolved as the CLI
does (agent settings, ``[model]`` defaults, else the local model). Prints one JSON document:
``{"recovered": {"turns", "tool_calls", "tasks"}, "submitted": seq | null, "turns": [TurnResult...]}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from holon.clock import SystemClock
from holon.config import resolve_home
from holon.logs import configure_logging
from holon.runtime.home import open_home
from holon.runtime.host import AgentHost
from holon.runtime.models import ModelResolver
from holon.runtime.run import limits_from


async def run(home: str, submit: tuple[str, str] | None, timeout_s: float) -> dict[str, Any]:
    paths = resolve_home(home)
    configure_logging(log_file=paths.logs / "holon.log", console="off")  # stdout is for the report
    store = open_home(paths, log=False)
    resolver = ModelResolver(store.settings.model, paths.logs)
    limits, retry = limits_from(store)
    host = AgentHost(store, resolver, clock=SystemClock(), limits=limits, retry=retry)
    try:
        report = host.start()
        submitted = host.submit(*submit).seq if submit else None
        await host.run_until_idle(timeout_s=timeout_s)
        return {
            "recovered": {"turns": report.turns, "tool_calls": report.tool_calls, "tasks": report.tasks},
            "submitted": submitted,
            "turns": [r.as_json() for r in host.finished],
        }
    finally:
        await host.close()
        resolver.close()
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("home")
    parser.add_argument("--submit", nargs=2, metavar=("AGENT", "TEXT"))
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    result = asyncio.run(run(args.home, tuple(args.submit) if args.submit else None, args.timeout))
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
