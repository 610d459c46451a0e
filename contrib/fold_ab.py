"""The fold path old against new, in one process (RFC 0001, "The append path", step 4).

    PYTHONPATH=. nice -n 15 python contrib/fold_ab.py BASE_TREE HOME UPTO ROUNDS

Loads ``holon/projections/{dialogue,episodes,fold}.py`` of BASE_TREE (a ``git archive`` of an
earlier commit) beside this tree's, decodes HOME's events up to seq UPTO once, and in each round
(order alternating) folds them with either: the episode-drafts reducer alone, every reducer
(``fold_event``), and every reducer plus ``derive`` after each event (the projector's memo
re-keying mimicked; seals read their range from the decoded events). CPU time, caches of
``dialogue`` cleared before each pass, medians over the rounds; then checks that both give the
same states (``state_json``) and the same derived payloads.
"""

import collections
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

import holon.projections as pkg
from holon.clock import SystemClock
from holon.config import HomePaths, Settings
from holon.projections import Store

BASE = Path(sys.argv[1])
HOME = Path(sys.argv[2])
UPTO = int(sys.argv[3])
ROUNDS = int(sys.argv[4])
names = ["dialogue", "episodes", "fold"]
new = {n: sys.modules[f"holon.projections.{n}"] for n in names}
old = {}
saved = {n: getattr(pkg, n) for n in names}
for n in names:
    spec = importlib.util.spec_from_file_location(f"holon.projections.{n}", BASE / "holon/projections" / f"{n}.py")
    m = importlib.util.module_from_spec(spec)
    sys.modules[f"holon.projections.{n}"] = m
    setattr(pkg, n, m)
    spec.loader.exec_module(m)
    old[n] = m
for n in names:
    sys.modules[f"holon.projections.{n}"] = new[n]
    setattr(pkg, n, saved[n])
s = Store.open(HomePaths(HOME), Settings(), clock=SystemClock())
events = [e for e in s.ledger.read(0) if e.seq <= UPTO]
byseq = {e.seq: e for e in events}
s.close()


def read(agent, a, b):
    return [e for e in events if e.agent_id == agent and a <= e.seq <= b and e.type in CT]


CT = set(new["episodes"].CONTENT_TYPES)


def clear(mods):
    d = mods["dialogue"]
    for v in vars(d).values():
        if hasattr(v, "cache_clear"):
            v.cache_clear()
    d._ASCII_TERM.clear()


def run(mods):
    fd = mods["fold"]
    fe = fd.fold_event
    de = fd.derive
    clear(mods)
    st = {}
    c0 = time.process_time()
    for e in events:
        fe(st, e)
    fold_cpu = time.process_time() - c0
    clear(mods)
    st = {}
    out = []
    memo = {}
    c0 = time.process_time()
    for e in events:
        fe(st, e)
        if e.type == "working_memory.delta":
            seen = memo.get(e.agent_id)
            if seen is not None and seen[0] is fd.MEMO_PENDING:
                memo[e.agent_id] = (st.get(("wm_baseline", e.agent_id)), seen[1])
        out.extend(de(st, [e], memo, read))
    both = time.process_time() - c0
    ap = mods["episodes"].apply_episode_drafts
    clear(mods)
    est = {}
    c0 = time.process_time()
    for e in events:
        k = e.agent_id
        est[k] = ap(est.get(k), e)
    epi = time.process_time() - c0
    res[label_now[0], "episode"].append(epi)
    return fold_cpu, both - fold_cpu, out, st


res = collections.defaultdict(list)
label_now = [""]
outs = {}
for r in range(ROUNDS):
    order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
    for label, mods in order:
        label_now[:] = [label]
        f, d, out, st = run(mods)
        res[label, "fold"].append(f)
        res[label, "derive"].append(d)
        outs[label] = (out, st)
n = len(events)
for part in ("episode", "fold", "derive"):
    o, nn = statistics.median(res["old", part]) / n * 1e6, statistics.median(res["new", part]) / n * 1e6
    print(f"{part:7} old {o:6.2f} new {nn:6.2f} us/event  ratio {o / nn:.2f}")
# outputs identical
(o_out, o_st), (n_out, n_st) = outs["old"], outs["new"]
fj = new["fold"].state_json
same_states = o_st.keys() == n_st.keys() and all(
    (o_st[k] is None and n_st[k] is None) or fj(o_st[k]) == fj(n_st[k]) for k in o_st
)
same_out = [x.payload.model_dump_json() for x in o_out] == [x.payload.model_dump_json() for x in n_out]
print("events", n, "derived", len(n_out), "same states", same_states, "same derived", same_out)
print("load", os.getloadavg())
