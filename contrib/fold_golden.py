"""A golden dump of the projections and derived events (RFC 0001, "The append path", step 4).

    PYTHONHASHSEED=0 PYTHONPATH=<tree> python contrib/fold_golden.py OUT N

Appends N events of ``bench ledger``'s workload (chunks of 1, 3 or 10) and then N/2 events of a
conversational stream (operator messages with decision, rule, acceptance, rejection, topic and
question cues, English and Chinese, work items opened now and then, idle gaps) to a fresh home
with a fake clock, and writes to OUT every event's (seq, type, agent, turn, episode, work item,
payload bytes) - derived ``working_memory.delta`` and ``episode.sealed`` events included - every
projection row, the cursor, and the hash of every state a pure fold of the ledger changes, after
each event. Two trees that fold alike write the same file. Any ``PYTHONHASHSEED`` gives the same file since ``dialogue._score``
sums with ``math.fsum`` (before it, a near tie between threads followed the string hashes: step 4).
"""

import glob
import hashlib
import itertools
import random
import sqlite3
import sys
import tempfile
from pathlib import Path

from holon.bench import workload
from holon.clock import FakeClock
from holon.config import HomePaths, LedgerSettings, Settings
from holon.ledger import NewEvent
from holon.ledger import events as ev
from holon.projections import Store
from holon.projections.fold import fold_event, state_json

OUT = sys.argv[1]
N = int(sys.argv[2])
settings = Settings(ledger=LedgerSettings.model_validate({"synchronous": "NORMAL"}))
tmp = Path(tempfile.mkdtemp(prefix="golden-"))

VOCAB = [
    "ledger",
    "projection",
    "agent",
    "episode",
    "budget",
    "release",
    "monday",
    "friday",
    "palette",
    "blue",
    "invoice",
    "report",
    "deploy",
    "staging",
    "cache",
    "query",
    "newsletter",
    "salary",
    "remote",
    "hiring",
    "offsite",
    "venue",
]
CUES = [
    "yes",
    "ok",
    "sounds good",
    "no",
    "actually",
    "instead",
    "always",
    "never",
    "we will use",
    "let's go with",
    "decided",
    "from now on",
    "new topic:",
    "back to",
    "I suggest",
    "shall I",
    "or",
    "which",
    "noted",
    "done",
    "moved",
    "updated",
    "好的",
    "决定",
    "换个话题",
    "回到",
    "必须",
    "we could",
    "how about",
    "i'll",
    "make sure",
    "now",
    "next",
    "help me",
    "add",
    "change",
    "?",
    ".",
]


def sentence(rng):
    parts = [rng.choice(VOCAB) for _ in range(rng.randint(0, 9))]
    for _ in range(rng.randint(0, 3)):
        parts.insert(rng.randint(0, len(parts)), rng.choice(CUES))
    s = " ".join(parts)
    if rng.random() < 0.2:
        s = "".join(rng.choice("发布周一预算团队报告缓存部署的了") for _ in range(rng.randint(2, 12))) + s
    return s + rng.choice(["", ".", "?", "!", "。", "？", "吗"])  # noqa: RUF001 (Chinese punctuation on purpose)


def text(rng):
    return " ".join(sentence(rng) for _ in range(rng.randint(1, 4)))


def conversation(rng, agents, n):
    out = []
    t = 0
    while len(out) < n:
        a = rng.choice(agents)
        t += 1
        tid = f"turn_c{t}"
        for _ in range(rng.choice([1, 1, 1, 2])):
            out.append(NewEvent(a, ev.MessageReceived(text=text(rng)), origin="operator:cli", authority="operator"))
        wi = f"wi_{a}_{t % 7}" if rng.random() < 0.15 else None
        out.append(NewEvent(a, ev.TurnStarted(turn_id=tid), turn_id=tid, work_item_id=wi))
        r = rng.random()
        if r < 0.1:
            out.append(
                NewEvent(
                    a,
                    ev.WorkItemOpened(
                        work_item_id=f"wi_{a}_{t}", title=text(rng)[:40], objective="x", activate=rng.random() < 0.5
                    ),
                    authority="agent",
                    origin=f"agent:{a}",
                    turn_id=tid,
                )
            )
        elif r < 0.3:
            out.append(NewEvent(a, ev.DecisionRecorded(text=text(rng)), turn_id=tid))
        outcome = rng.choice(["completed"] * 8 + ["interrupted"])
        out.append(
            NewEvent(
                a,
                ev.TurnSettled(
                    turn_id=tid, outcome=outcome, rounds=1, tool_calls=0, reply=text(rng), requeue=rng.random() < 0.05
                ),
                turn_id=tid,
            )
        )
        if rng.random() < 0.3:
            out.append(("advance", rng.choice([5, 60, 3600])))
    return out


clock = FakeClock(step_us=0)
s = Store.open(HomePaths(tmp / "h"), settings, clock=clock)
s.append(*workload.creation_events(10))
stream = workload.stream(10)
waiting = {}
rng = random.Random(11)
n = 0
while n < N:
    size = rng.choice([1, 1, 3, 10])
    chunk = list(itertools.islice(stream, size))
    s.append(*workload.take_inputs(chunk, s.ledger.head(), waiting))
    n += size
    clock.advance(us=1000 * size)
conv = conversation(random.Random(5), workload.agent_ids(10)[:4], N // 2)
chunk = []


def flush():
    if chunk:
        s.append(*workload.take_inputs(chunk, s.ledger.head(), waiting))
        chunk.clear()


for item in conv:
    if isinstance(item, tuple):
        flush()
        clock.advance(seconds=item[1])
    else:
        chunk.append(item)
        if len(chunk) == 3:
            flush()
    clock.advance(us=1000)
flush()
s.write_projections()

con = sqlite3.connect(glob.glob(str(tmp / "h" / "**" / "*.db"), recursive=True)[0])
with open(OUT, "w") as f:
    for row in con.execute(
        "select seq, type, agent_id, turn_id, episode_id, work_item_id, payload from events order by seq"
    ):
        f.write(repr(row) + "\n")
    for row in con.execute("select * from projection_rows order by 1, 2"):
        f.write(repr(row) + "\n")
    for row in con.execute("select * from projection_cursors where name='projections'"):
        f.write(repr(row[:3]) + "\n")
    states = {}
    for e in s.ledger.read(0):
        for key in fold_event(states, e):
            st = states[key]
            f.write(
                f"{e.seq} {key} {hashlib.sha256(state_json(st).encode()).hexdigest() if st is not None else None}\n"
            )
print("tmp", tmp, "events", s.ledger.head())
