"""What the text path costs (RFC 0004, "The text path"): ``index_terms`` against the same words
computed the way it was computed before (``words(fold(text))``, word by word), on the texts of
``holon.bench.chatter``'s first ``--docs`` documents and, with ``--locomo DIR``, every string of
the LoCoMo files there. Checks that both give the same terms, then reports CPU microseconds per
ASCII text for each, median of ``--rounds``. Prints JSON.

    PYTHONPATH=$PWD python rfcs/0004/text_path.py --docs 20000 --locomo ../shared/datasets/locomo
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Any

from holon.bench.chatter import Chatter
from holon.memory.text import IRREGULAR, MAX_TERM_CHARS, fold, index_terms, is_unsegmented, words


def before(text: str) -> str:
    out: list[str] = []
    for w in words(fold(text)):
        if is_unsegmented(w):
            out.extend([w, w[0]] if len(w) == 2 else [w])
        else:
            out.append(IRREGULAR.get(w, w)[:MAX_TERM_CHARS])
    return " ".join(out)


def _strings(value: Any, out: list[str]) -> None:  # Any: parsed JSON
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=20_000)
    ap.add_argument("--locomo", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    texts = [d.text for d in itertools.islice(Chatter(seed=7).docs(), a.docs)]
    if a.locomo is not None:
        for f in sorted(a.locomo.glob("*.json")):
            _strings(json.loads(f.read_text()), texts)
    ascii_texts = [t for t in texts if t.isascii()]
    same = all(index_terms(t) == before(t) for t in texts)
    timings: dict[str, list[float]] = {"before_us": [], "index_terms_us": []}
    for _ in range(a.rounds):
        for name, fn in (("before_us", before), ("index_terms_us", index_terms)):
            c = time.process_time()
            for t in ascii_texts:
                fn(t)
            timings[name].append((time.process_time() - c) / len(ascii_texts) * 1e6)
    res = {k: round(statistics.median(v), 2) for k, v in timings.items()}
    print(json.dumps({"texts": len(texts), "ascii_texts": len(ascii_texts), "same_terms": same, **res,
                      "speedup": round(res["before_us"] / res["index_terms_us"], 2)}))  # fmt: skip


if __name__ == "__main__":
    main()
