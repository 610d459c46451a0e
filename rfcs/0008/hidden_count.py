"""What counting hidden documents in the engine would cost (RFC 0008 step 13, "(3) Deleted documents").

A search's total leaves out the superseded versions that match it. Asked of tantivy, that is the
scoring query AND a term set over their ids; this times that count at 40,000 documents of 20 random
words (10 commits) for 100 to 7,500 hidden ids, beside a plain top 265 with its count, and beside
``holon.memory.engine.Hidden.matching`` (what holon does: the postings of the query's terms over
the versions' own terms, in Python). CPU milliseconds per query, 50 runs each. Prints JSON.

    PYTHONPATH=$PWD python rfcs/0008/hidden_count.py
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import tantivy

from holon.memory.engine import Engine, Filters, Hidden, Row


def _ms(f: Any, runs: int = 50) -> float:
    t = time.process_time()
    for _ in range(runs):
        f()
    return round((time.process_time() - t) / runs * 1000, 3)


def main() -> None:
    rng = random.Random(1)
    words = [f"w{i}" for i in range(300)]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        e = Engine(Path(d) / "e")
        rows = [Row(i, f"agent:{i % 3}", "message", i, "", " ".join(rng.choice(words) for _ in range(20)), "")
                for i in range(1, 40_001)]  # fmt: skip
        for at in range(0, len(rows), 4_000):
            e.write(rows[at : at + 4_000])
        s = e.searcher()
        terms, owners = ["w1", "w2"], ["agent:0"]
        q = e._scoring(terms, owners, Filters(), (1.0, 0.2))
        out["plain_top265_count_ms"] = _ms(lambda: s.search(q, 265, count=True))
        for n in (100, 1_000, 2_500, 7_500):
            ids = sorted(rng.sample(range(3, 40_001, 3), n))  # agent:0's documents
            t = tantivy.Query
            both = t.boolean_query([(tantivy.Occur.Must, q), (tantivy.Occur.Must,
                                    t.const_score_query(t.term_set_query(e.schema, "id", ids), 0.0))])  # fmt: skip
            hidden = Hidden.of(e.hidden_docs(rows[i - 1] for i in ids))
            engine_n = int(s.search(both, 1, count=True).count or 0)
            assert hidden.matching(terms, Filters(), (1.0, 0.2)) == engine_n
            out[str(n)] = {
                "term_set_count_ms": _ms(lambda both=both: s.search(both, 1, count=True)),
                "python_matching_ms": _ms(lambda hidden=hidden: hidden.matching(terms, Filters(), (1.0, 0.2))),
                "matching": engine_n,
            }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
