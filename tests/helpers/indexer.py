"""A worker for tests/test_search_index.py: catches the search index up in small batches.

    python tests/helpers/indexer.py HOME BATCH SLOW_MS

Each batch is one transaction (rows and cursor together), so many commits happen while the parent
waits to SIGKILL this process somewhere in the middle. Every document written sleeps ``SLOW_MS``
first, inside its transaction, so the kill most likely lands between a batch's first row and its
commit (the case that matters), and the backlog outlasts the parent's reaction time.
"""

from __future__ import annotations

import sys
import time

from holon.config import load_settings, resolve_home
from holon.memory import index as search_index
from holon.projections import Store


def main() -> int:
    home, batch, slow_ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    paths = resolve_home(home)
    search_index.BATCH = batch
    upsert = search_index._Writer.upsert

    def slow_upsert(self: search_index._Writer, doc: search_index.Doc, *, version: bool = False) -> int:
        time.sleep(slow_ms / 1000)
        return upsert(self, doc, version=version)

    search_index._Writer.upsert = slow_upsert  # type: ignore[method-assign]
    with Store.open(paths, load_settings(paths)) as store:
        search_index.SearchIndex(store).catch_up()
    return 0


if __name__ == "__main__":
    sys.exit(main())
