"""Scenario variants: the same conversation told another way, to show what continuity depends on.

A scenario passes for the right reasons only if it also passes when the wording changes. Each
scenario runs under named variants:

* ``plain``: the texts as written;
* ``paraphrase``: authored alternative texts with other wording and no marker words (nothing
  ``holon.projections.episodes`` recognises as a decision or a change of subject);
* ``zh``: authored Chinese texts (no spaces between words);
* ``long_filler``: every generated filler text three times longer (automatic);
* ``prefix30``: thirty earlier operator/assistant turn pairs about unrelated subjects before the
  scenario's events (automatic, from the fixed pool below: a realistic conversation, not noise).

An authored variant falls back to the plain text for an event with no alternative.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["AUTHORED", "AUTOMATIC", "FILLER_SCALE", "PREFIX_PAIRS", "VARIANTS", "Variant"]

Variant = Literal["plain", "paraphrase", "zh", "long_filler", "prefix30"]
VARIANTS: tuple[Variant, ...] = ("plain", "paraphrase", "zh", "long_filler", "prefix30")
AUTHORED: tuple[Variant, ...] = ("paraphrase", "zh")
AUTOMATIC: tuple[Variant, ...] = ("long_filler", "prefix30")
FILLER_SCALE = {"long_filler": 3}
"""How many times longer generated filler is under a variant (1 when absent)."""

#: Thirty (operator, assistant) pairs, five each on six subjects none of the scenarios is about:
#: an earlier stretch of the same conversation. No marker words, so it adds no decisions.
PREFIX_PAIRS: tuple[tuple[str, str], ...] = (
    (
        "My tomato plants on the balcony have yellow leaves at the bottom. What could cause that?",
        "Lower leaves yellowing is often a nitrogen shortage or uneven watering. Check whether the soil stays soggy.",
    ),
    (
        "The soil is damp most days; I water every morning.",
        "That is likely too much for pots with little drainage. Water when the top two centimetres are dry.",
    ),
    (
        "Should I remove the yellow leaves?",
        "Yes, pinch them off at the stem; they no longer feed the plant and can invite fungus.",
    ),
    (
        "What about fertiliser? I have a general-purpose liquid one.",
        "Use it at half strength every two weeks once the first fruits set.",
    ),
    (
        "Thanks, I will try that this weekend.",
        "Good luck with the tomatoes; the new growth should look greener within a couple of weeks.",
    ),
    (
        "I am planning a train trip from Vienna to Kraków in late spring. How long does it take?",
        "The direct daytime train takes about seven hours; there is also a night train that arrives early morning.",
    ),
    (
        "Is the night train comfortable?",
        "Couchettes are basic but fine; a sleeper compartment with a washbasin costs more and is much quieter.",
    ),
    (
        "How early should I book?",
        "Tickets open about six months ahead and the cheap sleeper berths go first, so a couple of months is wise.",
    ),
    (
        "Can I bring a bicycle on board?",
        "Most night trains take bicycles with a reservation; the number of places is small.",
    ),
    (
        "Okay, I will look at the sleeper prices tonight.",
        "Sounds like a plan. Compare the price of two couchettes with one sleeper; sometimes they are close.",
    ),
    (
        "I want to bake sourdough bread but my starter smells like nail polish remover.",
        "That smell means it is hungry. Feed it twice a day for a few days and keep it somewhere warm.",
    ),
    (
        "What ratio of flour and water should I feed it?",
        "Equal weights of flour and water, with about the same weight of starter, works for most kitchens.",
    ),
    (
        "How do I know it is ready to bake with?",
        "It should double within four to six hours after a feed and smell pleasantly sour.",
    ),
    (
        "My first loaf came out dense and flat.",
        "Dense loaves usually mean under-proofing. Let the dough rise longer, until it is airy and jiggles.",
    ),
    (
        "I will give it another go on Sunday.",
        "Enjoy the baking; take a photo of the crumb so we can compare.",
    ),
    (
        "In my spreadsheet I need the sum of column C only where column A says 'paid'.",
        "Use SUMIF: =SUMIF(A:A, \"paid\", C:C) adds every C value whose row has 'paid' in column A.",
    ),
    (
        "And if there are two conditions, paid and month equals March?",
        'SUMIFS takes several: =SUMIFS(C:C, A:A, "paid", B:B, "March").',
    ),
    (
        "The result shows zero even though there are paid rows.",
        'Check for trailing spaces in column A; TRIM in a helper column or a wildcard like "paid*" helps.',
    ),
    (
        "That was it, there were spaces after the word.",
        "Glad it works. Data validation on column A stops that from coming back.",
    ),
    (
        "How do I add that validation?",
        "Select the column, open Data validation, choose a list and enter paid, open and cancelled.",
    ),
    (
        "Can you recommend a novel for a long flight? I liked The Remains of the Day.",
        "You might enjoy Klara and the Sun by the same author, or Stoner by John Williams for a quiet, moving read.",
    ),
    (
        "I read Stoner last year. Something lighter maybe?",
        "A Gentleman in Moscow is warm and witty, and long enough for a flight.",
    ),
    (
        "Is it available as an audiobook?",
        "Yes, the unabridged audiobook runs about seventeen hours.",
    ),
    (
        "Perfect, that covers the flight there and back.",
        "It does. Download it before you leave; airport wifi is unreliable.",
    ),
    (
        "Good tip, thanks.",
        "Have a good trip and enjoy the book.",
    ),
    (
        "My car is due for its annual service. What should I ask the garage to check?",
        "Ask for brakes, tyres, the battery, coolant and wiper blades besides the oil change.",
    ),
    (
        "The brakes squeal a little when it is cold.",
        "Light squealing on cold mornings is common; if it stays after a few stops, ask them to look at the pads.",
    ),
    (
        "How often should the brake fluid be replaced?",
        "Every two years is the usual interval; it absorbs water over time.",
    ),
    (
        "The quote for the service is 340 euros. Does that sound fair?",
        "For an annual service with fluids that is in the normal range; ask what is included before they start.",
    ),
    (
        "Okay, I booked it for Thursday morning.",
        "Great. Leave the locking wheel nut key in the glovebox in case they need to take the wheels off.",
    ),
)
