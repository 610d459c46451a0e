"""``holon bench locomo``: MemorySearch recall on LoCoMo conversations (real data, not guessed).

For each ``*.json`` conversation in the data directory: a fresh home and agent; every turn
appended in order as an inbound message (``message.received`` through ``input_events``, the path
``AgentHost.submit`` takes) with the speaker as sender and the session's date as the event time;
the index catches up; then every question is run through ``search`` and its hits mapped back to
turn ids. Only the turns (speaker, text, shared-photo caption, session date) and the questions are
given to holon. The evidence lists are read by the scorer only, and the dataset's generated
annotations (``observation``, ``session_summary``, ``event_summary``, ``events_session_*``) are
never opened.

recall@k of a question is the fraction of its evidence turns among the first k hits; the score is
the mean over questions that have evidence. It is reported overall, per category and per
conversation (``conversations``: questions and recall@5/10/20 of each), so a change that helps one
conversation and hurts the others shows. ``leave_one_out`` is the guard against tuning to these
questions: a setting chosen from data is chosen on four conversations and scored on the fifth.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from holon.bench.progress import step
from holon.config import HomePaths, LedgerSettings, Settings
from holon.errors import UsageError
from holon.memory.index import SearchIndex
from holon.memory.search import RankParams, search
from holon.memory.vectors import Embedder, embed_pending
from holon.projections import Store
from holon.runtime.agents import create_agent
from holon.runtime.inputs import input_events

__all__ = ["Conversation", "leave_one_out", "load_conversation", "run_locomo_bench"]

CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}
KS = (5, 10, 20)
_SESSION = re.compile(r"^session_(\d+)$")
_DIA = re.compile(r"^D:?(\d+):(\d+)$")
_WHEN = re.compile(r"(\d{1,2}):(\d{2})\s*(am|pm)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    ts_us: int


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Conversation:
    name: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


def _session_time(text: str, fallback_us: int) -> int:
    m = _WHEN.search(text or "")
    if m is None:
        return fallback_us
    hour, minute, half, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    try:
        when = dt.datetime.strptime(f"{day} {month} {year} {h}:{minute}", "%d %B %Y %H:%M").replace(tzinfo=dt.UTC)
    except ValueError:
        return fallback_us
    return int(when.timestamp() * 1_000_000)


def _evidence(raw: list[Any], known: set[str]) -> tuple[str, ...]:
    """Evidence ids, normalised (``D:11:26`` -> ``D11:26``; ``"D8:6; D9:17"`` split); unknown dropped."""
    out: list[str] = []
    for item in raw:
        for part in re.split(r"[;,\s]+", str(item)):
            m = _DIA.match(part)
            if m and (dia := f"D{m.group(1)}:{m.group(2)}") in known:
                out.append(dia)
    return tuple(dict.fromkeys(out))


def load_conversation(path: Path) -> Conversation:
    """Read the turns and questions of one LoCoMo file (nothing else)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        conv = data.get("conversation", data)
        sessions = sorted(int(m.group(1)) for k in conv if (m := _SESSION.match(k)))
        turns: list[Turn] = []
        last = 1_600_000_000_000_000
        for n in sessions:
            start = max(_session_time(conv.get(f"session_{n}_date_time", ""), last), last)
            for i, t in enumerate(conv[f"session_{n}"]):
                text = str(t["text"])
                if t.get("blip_caption"):
                    text += f" [shares a photo: {t['blip_caption']}]"
                turns.append(Turn(str(t["dia_id"]), str(t["speaker"]), text, start + i * 1_000_000))
            last = start + len(conv[f"session_{n}"]) * 1_000_000
        known = {t.dia_id for t in turns}
        questions = tuple(
            Question(str(q["question"]), int(q.get("category", 0)), ev)
            for q in data["qa"]
            if (ev := _evidence(q.get("evidence") or [], known))
        )
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"{path}: not a LoCoMo conversation file ({e})") from e
    return Conversation(path.stem, tuple(turns), questions)


class _SessionClock:
    """The clock of a replayed conversation: set to each turn's time by the loader."""

    def __init__(self) -> None:
        self.now = 0

    def now_us(self) -> int:
        return self.now


#: LoCoMo's ten conversations: the five of the shared development split (what weights were chosen
#: on) and the other five, held out (never used to choose anything; not on every machine).
DEVELOPMENT = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43")
HELD_OUT = ("conv-44", "conv-47", "conv-48", "conv-49", "conv-50")


def _files(data_dir: Path, conversations: str = "all") -> list[Path]:
    """The conversation files to run: ``all`` in ``data_dir``, ``development``, ``held-out``, or
    names separated by commas (``conv-42,conv-43``). A named conversation must be there."""
    if not data_dir.is_dir():
        raise UsageError(f"LoCoMo data directory {data_dir} does not exist")
    files = sorted(p for p in data_dir.glob("*.json"))
    if conversations != "all":
        names = {"development": DEVELOPMENT, "held-out": HELD_OUT}.get(conversations)
        wanted = names or tuple(n.strip().removesuffix(".json") for n in conversations.split(",") if n.strip())
        missing = sorted(set(wanted) - {p.stem for p in files})
        if missing:
            raise UsageError(f"LoCoMo conversations not in {data_dir}: {', '.join(missing)}")
        files = [p for p in files if p.stem in wanted]
    if not files:
        raise UsageError(f"no LoCoMo *.json files in {data_dir}")
    return files


def _replay(conv: Conversation, root: Path) -> tuple[Store, str]:
    clock = _SessionClock()
    clock.now = conv.turns[0].ts_us if conv.turns else 0
    settings = Settings(ledger=LedgerSettings(synchronous="NORMAL"))
    store = Store.open(HomePaths(root), settings, clock=clock)
    agent = create_agent(store, "reader", origin="bench:locomo")
    batch = []
    for turn in conv.turns:
        clock.now = turn.ts_us
        batch = input_events(
            store, agent.agent_id, turn.text, origin="external:locomo", authority="external",
            sender=turn.speaker, channel="locomo",
        )  # fmt: skip
        store.append(*batch)
    return store, agent.agent_id


def _score(
    conv: Conversation, store: Store, agent_id: str, k_max: int, params: RankParams, embedder: Embedder | None
) -> Iterator[tuple[Question, list[str], float]]:
    index = SearchIndex(store)
    index.catch_up()
    if embedder is not None:  # embedding the turns is indexing work, not search time
        embed_pending(index, embedder)
    by_seq = {e.seq: e for e in store.ledger.read(0, agent_id=agent_id) if e.type == "message.received"}
    dia_of = {seq: conv.turns[i].dia_id for i, seq in enumerate(sorted(by_seq))}
    owners = [f"agent:{agent_id}"]
    for q in conv.questions:
        t0 = time.perf_counter()
        result = search(index, owners, q.text, limit=k_max, params=params, embedder=embedder)
        ms = (time.perf_counter() - t0) * 1000
        found = [dia_of[h.seq] for h in result.hits if h.seq in dia_of]
        yield q, found, ms


def run_locomo_bench(
    data_dir: Path, *, k: int = 10, params: RankParams | None = None, embedder: Embedder | None = None,
    conversations: str = "all",
) -> dict[str, Any]:  # fmt: skip
    params = params or RankParams()
    ks = sorted({*KS, k})
    recalls: dict[int, list[float]] = defaultdict(list)
    by_cat: dict[str, list[float]] = defaultdict(list)
    by_conv: dict[str, list[float]] = defaultdict(list)
    conv_at: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    times: list[float] = []
    files = list(_files(data_dir, conversations))
    for n, path in enumerate(files):
        step(f"conversation {path.name}", n, len(files))
        conv = load_conversation(path)
        with tempfile.TemporaryDirectory(prefix="holon-locomo-") as tmp:
            store, agent_id = _replay(conv, Path(tmp))
            try:
                for q, found, ms in _score(conv, store, agent_id, max(ks), params, embedder):
                    times.append(ms)
                    evidence = set(q.evidence)
                    for kk in ks:
                        recalls[kk].append(len(evidence & set(found[:kk])) / len(evidence))
                        conv_at[conv.name][kk].append(recalls[kk][-1])
                    r = len(evidence & set(found[:k])) / len(evidence)
                    by_cat[CATEGORIES.get(q.category, str(q.category))].append(r)
                    by_conv[conv.name].append(r)
            finally:
                store.close()
    n = len(recalls[k])
    times.sort()
    out: dict[str, Any] = {"questions": n}
    for kk in ks:
        out[f"recall@{kk}"] = round(statistics.fmean(recalls[kk]), 4) if n else 0.0
    out["by_category"] = {
        c: {"questions": len(v), f"recall@{k}": round(statistics.fmean(v), 4)} for c, v in sorted(by_cat.items())
    }
    out["by_conversation"] = {c: round(statistics.fmean(v), 4) for c, v in sorted(by_conv.items())}
    out["conversations"] = {
        c: {"questions": len(at[k]), **{f"recall@{kk}": round(statistics.fmean(at[kk]), 4) for kk in ks}}
        for c, at in sorted(conv_at.items())
    }
    out["search_ms_p50"] = round(times[len(times) // 2], 3) if times else 0.0
    out["search_ms_p95"] = round(times[int(len(times) * 0.95)], 3) if times else 0.0
    out["k"] = k
    out["conversations_run"] = conversations
    out["embeddings"] = embedder.name if embedder is not None else None
    return out


def format_report(r: dict[str, Any]) -> str:
    k = r["k"]
    lines = [
        f"LoCoMo: {r['questions']} questions, embeddings: {r['embeddings'] or 'none'}",
        "  " + "  ".join(f"{key} {r[key]:.3f}" for key in r if key.startswith("recall@")),
    ]
    for cat, v in r["by_category"].items():
        lines.append(f"  {cat:<12} {v['questions']:>4} questions  recall@{k} {v[f'recall@{k}']:.3f}")
    for name, v in r.get("conversations", {}).items():
        at = "  ".join(f"{key} {v[key]:.3f}" for key in v if key.startswith("recall@"))
        lines.append(f"  {name:<12} {v['questions']:>4} questions  {at}")
    lines.append(f"  search p50 {r['search_ms_p50']:.1f} ms, p95 {r['search_ms_p95']:.1f} ms")
    return "\n".join(lines)


def leave_one_out(runs: dict[str, dict[str, Any]], *, baseline: str, k: int = 10) -> dict[str, Any]:
    """Choose a setting on all conversations but one, score it on that one; for each conversation.

    ``runs`` maps a setting's label to its ``run_locomo_bench`` result (all over the same files);
    ``baseline`` is the label of the current defaults. For each held-out conversation the setting
    with the best question-weighted recall@k on the other conversations is chosen, and its recall
    on the held-out one is compared with the baseline's. ``held_out`` pools the held-out questions:
    if it is not above the baseline's, the choice fitted the questions, not retrieval.
    """
    if baseline not in runs:
        raise UsageError(f"leave_one_out: no run labelled {baseline!r}")
    key = f"recall@{k}"
    names = sorted(runs[baseline]["conversations"])

    def mean(label: str, convs: list[str]) -> float:
        per = runs[label]["conversations"]
        n = sum(per[c]["questions"] for c in convs)
        return sum(per[c][key] * per[c]["questions"] for c in convs) / n if n else 0.0

    folds = []
    for held in names:
        train = [c for c in names if c != held]
        chosen = max(sorted(runs), key=lambda label: (mean(label, train), label == baseline))
        folds.append(
            {
                "held_out": held,
                "chosen": chosen,
                "train": round(mean(chosen, train), 4),
                "train_baseline": round(mean(baseline, train), 4),
                "test": round(mean(chosen, [held]), 4),
                "test_baseline": round(mean(baseline, [held]), 4),
            }
        )
    questions = {c: runs[baseline]["conversations"][c]["questions"] for c in names}
    total = sum(questions.values()) or 1
    pooled = sum(f["test"] * questions[f["held_out"]] for f in folds) / total
    pooled_base = sum(f["test_baseline"] * questions[f["held_out"]] for f in folds) / total
    return {"k": k, "folds": folds, "held_out": round(pooled, 4), "held_out_baseline": round(pooled_base, 4)}
