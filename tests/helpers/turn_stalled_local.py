"""``holon`` with a stalled server standing in for the embedded local model's.

    STALLED_PID_FILE=FILE python tests/helpers/turn_stalled_local.py [holon arguments...]

The model resolver starts ``LocalModelServer`` as usual (its child process, its readiness wait,
its stop), but the child is ``stalled_model.py``: ready at once, and never answering a completion.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from holon.runtime import models
from holon.runtime.providers import local

STALLED = Path(__file__).resolve().with_name("stalled_model.py")


def main() -> int:
    local.local_model_missing = lambda: None
    local.local_model_available = lambda: True
    local.find_local_gguf = lambda: Path("stalled.gguf")
    models.local_model_available = lambda: True

    def argv(self: local.LocalModelServer, gguf: Path, port: int) -> list[str]:
        extra = ["--pid-file", os.environ["STALLED_PID_FILE"]] if os.environ.get("STALLED_PID_FILE") else []
        return [sys.executable, str(STALLED), "--port", str(port), *extra]

    local.LocalModelServer.argv = argv  # type: ignore[method-assign]
    from holon.cli.main import main as holon_main

    return holon_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
