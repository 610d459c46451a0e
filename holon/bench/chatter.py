"""Synthetic but realistic memory documents for search benchmarks: chat turns, tool output, episodes.

Text is built from a bundled corpus of conversational sentences (``SENTENCES``) whose slots are
filled from one ranked vocabulary with a Zipf distribution (exponent ``ZIPF_S``): about 300 real
English words at the head (what people talk about), then a long tail of generated pronounceable
words (names of things, places, projects). Term document frequencies therefore span the range of
real text: stop words and sentence words in most documents, head words in a few percent, and a
tail of words found in a handful. Nothing is read from outside the package, and everything is
deterministic for a seed.

Documents come in conversation segments of 20-40 turns, a person and the agent alternating a
minute or so apart, with segments hours apart; tool results (longer, with paths and identifiers)
fall between turns, and a sealed episode summarises a segment now and then.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from holon.memory.index import Doc

__all__ = ["SENTENCES", "Chatter"]

ZIPF_S = 1.0
TAIL_WORDS = 150_000
START_US = 1_600_000_000_000_000

SENTENCES = """Hey! I just got back from {} and it was honestly amazing.
Did you ever try the {} place near the {}?
I've been thinking a lot about {} lately, especially since {name} brought it up.
That reminds me, we still need to sort out the {} before next week.
Ugh, the {} broke again this morning so I spent an hour fixing it.
My sister keeps telling me to get into {} but I'm not sure it's for me.
We went hiking up by the {} on Saturday, the view was incredible.
Can you remind me what we decided about the {} last time?
Honestly I think {} is overrated, but {} is worth it.
I finally finished that book about {} you recommended, loved the ending.
The kids were so excited about the {} at school today.
{name} said the {} meeting got moved to Thursday afternoon.
I'm trying to cook more at home, last night I made {} with {}.
Work has been crazy, we're launching the {} project next month.
Do you remember the name of that {} we saw in {}?
I signed up for a {} class, first session is on Monday.
It rained the whole weekend so we stayed in and watched {} movies.
My dog found a {} in the garden and wouldn't let go of it.
I'm so proud of how the {} turned out, it took weeks.
Let me know if you want to come to the {} festival with us.
Sure, I can help you look into the {} issue tomorrow.
That sounds great, what time should we meet at the {}?
I'm not sure, maybe ask {name}, she knows more about {} than I do.
We're planning a trip to {} in the summer, any tips?
Thanks so much, that really means a lot to me.
I've been painting again, mostly {} and {} scenes.
The new {} at the office is way better than the old one.
Good question, I think it was the second week of {}.
I keep forgetting to call the {} about the appointment.
Last year we volunteered at the {} shelter and it changed my perspective.
What do you think about switching to {} for the {}?
I ran into {name} at the {} yesterday, she says hi.
Okay, I added {} to the list for the weekend.
My grandmother used to make the best {} every winter.
It's been a tough week, but talking about {} helps.
I just adopted a cat, her name is {} and she's tiny.
We should really plan something for {name}'s birthday.
The concert last night was loud but the {} set was worth it.
I'm learning to play the {} and my fingers hurt so much.
Yeah, the {} deadline got pushed, so we have some breathing room.
I'll send you the photos from the {} trip tonight.
Have you heard anything back about the {} application?
I think the problem is the {} config, not the {} itself.
Let's keep it simple and go with the {} option for now.
I was nervous about the {} interview but it went really well.
Remember when we got lost on the way to {}? Good times.
I started running in the mornings, already did five kilometres by the {}.
Could you check whether the {} report is ready?
My partner and I finally repainted the {} room, it looks so fresh.
I'm so tired, the baby was up all night again.
We tried that new {} restaurant, the {} was incredible.
I've decided to take a break from {} for a while.
That's a good point, I hadn't thought about the {} side of it.
Next month I'm giving a talk about {} at the community centre.
Sorry I missed your call, I was at the {} with {name}.
The garden is full of {} this year, we can't eat them fast enough.
I'm really into {} podcasts lately, any recommendations?
Did the {} package ever arrive?
It was my first time at a {} and I loved every minute.
I'll think about it and get back to you about the {}.
Sounds like a plan, see you at {} then!
Honestly the best part of the trip was the {} market.
My brother moved to {} for a job in {}.
I feel like I'm finally getting the hang of {}.
We had a long talk about {} and {} over dinner.
What was the name of the {} you mentioned last week?
The team agreed to drop the {} feature until after the release.
I just want a quiet weekend with a good book and some {}.
I bought a new {} for the kitchen, game changer.
Tomorrow I'm meeting {name} to go over the {} budget.""".splitlines()

# The head of the vocabulary, roughly most talked-about first.
_HEAD = """work family weekend music friends kids dinner coffee book movie trip garden dog cat school
project beach park painting running yoga camping hiking pizza pasta guitar piano concert museum
lake mountain city river forest bakery cafe library gym office meeting deadline report budget
presentation interview holiday birthday wedding party festival market bike car train flight
hotel camera photo poster sculpture pottery knitting baking cooking swimming dancing singing
climbing surfing skiing fishing chess football basketball tennis soccer baseball volleyball
marathon cycling gardening photography volunteering tutoring mentoring podcast documentary
novel poetry comics anime jazz blues rock classical opera theatre ballet salsa tango sushi
tacos curry noodles salad soup burger sandwich pancakes waffles croissant bagel cheesecake
brownies cookies muffins smoothie tea lemonade wine beer cocktail vegetables tomatoes
strawberries apples peaches cherries pumpkin zucchini basil rosemary lavender sunflowers roses
tulips orchids cactus fern puppy kitten parrot hamster rabbit turtle horse sister brother
mother father grandmother grandfather cousin aunt uncle neighbour colleague manager teacher
doctor nurse dentist therapist coach landlord plumber electrician mechanic laptop phone tablet
printer router keyboard monitor headphones speaker charger backpack jacket sweater boots
sneakers umbrella blanket pillow couch lamp bookshelf fridge oven dishwasher washer heater
balcony attic basement kitchen bathroom bedroom porch driveway fence shed greenhouse
apartment house cabin cottage studio workshop warehouse clinic hospital pharmacy bank
airport station harbour bridge tunnel highway downtown suburb village island desert canyon
valley glacier volcano waterfall meadow vineyard orchard farm ranch zoo aquarium stadium
arena gallery exhibition workshop seminar conference retreat reunion graduation promotion
resignation relocation renovation adoption pregnancy surgery recovery therapy meditation
journaling budgeting investing saving mortgage insurance taxes invoice receipt contract
migration database server deployment release feature bug outage dashboard pipeline backup
spreadsheet newsletter website blog app game puzzle crossword trivia karaoke""".split()  # noqa: SIM905  # a word list reads better as text

_NAMES = """Caroline Melanie Jon Gina John Maria Audrey Andrew James Deborah Jolene Evan Sam Calvin
Dave Tim Nate Joanna Priya Tomas Yuki Amara Lena Omar Sofia Mateo Hana Ravi Chloe Felix Ines
Marco Aisha Noah Elena Kwame Freya Diego Mei""".split()  # noqa: SIM905

_SYLLABLES = [a + b for a in "bdfgklmnprstvz" for b in ("a", "e", "i", "o", "u", "ai", "ou", "ea")]
_CODAS = ("n", "r", "l", "m", "k", "t", "x", "nd", "rt", "lm", "")

_COMMANDS = ("grep -rn", "ls -la", "cat", "pytest -q", "git log --oneline", "du -sh", "curl -s", "make")
_EXTS = ("py", "md", "json", "toml", "log", "csv", "txt", "yaml")


def _tail_words(n: int, rng: random.Random) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        w = "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((2, 2, 3, 3, 4)))) + rng.choice(_CODAS)
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


class Chatter:
    """A deterministic stream of ``Doc`` for ``owners`` (the first owner gets most documents)."""

    def __init__(self, *, seed: int = 7, owners: tuple[tuple[str, float], ...] = (("agent:bench", 1.0),)) -> None:
        self.rng = random.Random(seed)
        head = list(dict.fromkeys(_HEAD))
        known = set(head)
        self.vocab = head + [w for w in _tail_words(TAIL_WORDS, random.Random(seed + 1)) if w not in known]
        self.cum = list(itertools.accumulate(1.0 / (r + 1) ** ZIPF_S for r in range(len(self.vocab))))
        self.slots = [s.count("{}") for s in SENTENCES]
        self.owners = owners
        self.n = 0

    def words(self, k: int) -> list[str]:
        return self.rng.choices(self.vocab, cum_weights=self.cum, k=k)

    def sentence(self, person: str) -> str:
        i = self.rng.randrange(len(SENTENCES))
        return SENTENCES[i].format(*self.words(self.slots[i]), name=person)

    def turn_text(self, person: str) -> str:
        return " ".join(self.sentence(person) for _ in range(self.rng.choice((1, 1, 2, 2, 2, 3, 3, 4))))

    def tool_text(self) -> str:
        rng = self.rng
        cmd = rng.choice(_COMMANDS)
        lines = [f"$ {cmd} {'/'.join(self.words(2))}"]
        for _ in range(rng.randint(3, 12)):
            a, b, c = self.words(3)
            lines.append(f"{a}/{b}_{c}.{rng.choice(_EXTS)}:{rng.randint(1, 900)}: {' '.join(self.words(5))}")
        return "\n".join(lines)

    def docs(self) -> Iterator[Doc]:
        """Documents forever, in time order; each owner's conversations are independent."""
        rng = self.rng
        clocks = {owner: START_US for owner, _ in self.owners}
        names, weights = zip(*self.owners, strict=True)
        while True:
            owner = rng.choices(names, weights=weights)[0]
            yield from self._segment(owner, clocks)

    def _segment(self, owner: str, clocks: dict[str, int]) -> Iterator[Doc]:
        rng = self.rng
        person = rng.choice(_NAMES)
        clocks[owner] += rng.randint(2, 30) * 3_600_000_000
        topics: list[str] = []
        for i in range(rng.randint(20, 40)):
            clocks[owner] += rng.randint(10, 150) * 1_000_000
            ts = clocks[owner]
            if i % 2 == 0:
                text = self.turn_text(person)
                yield self._doc(owner, "message", ts, f"message from {person}", text, sender=person, turn=True)
            else:
                text = self.turn_text(rng.choice(_NAMES))
                yield self._doc(owner, "reply", ts, "reply of holon", text, sender="holon", turn=True)
            topics.extend(self.words(1))
            if rng.random() < 0.12:
                clocks[owner] += 2_000_000
                status = rng.choice(("ok", "ok", "ok", "error"))
                yield self._doc(owner, "tool_result", clocks[owner], f"shell result ({status})", self.tool_text())
        if rng.random() < 0.3:
            summary = f"Talked with {person} about {', '.join(topics[:4])}. " + self.turn_text(person)
            yield self._doc(owner, "episode", clocks[owner] + 1, f"{person}: {topics[0]}", summary, episode=True)

    def _doc(
        self,
        owner: str,
        kind: str,
        ts: int,
        title: str,
        text: str,
        *,
        sender: str = "",
        turn: bool = False,
        episode: bool = False,
    ) -> Doc:
        self.n += 1
        key = f"episode:ep_{self.n}" if episode else f"event:{self.n}"
        return Doc(key, key, owner, kind, ts, title, text, seq=self.n, sender=sender, turn=turn)
