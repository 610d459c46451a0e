"""Scenario variants: the same conversation told another way (holon.runtime.scenario_variants)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from holon.errors import UsageError
from holon.projections import episodes
from holon.runtime import scenarios as sc
from holon.runtime.scenario_variants import AUTOMATIC, PREFIX_PAIRS, VARIANTS
from holon.runtime.scenarios import Scenario, ScenarioEvent, applicable_variants, load_scenario, variant_events

SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("*.json"))

# The marker words of holon.projections.episodes when the suite was written: the lead may change
# those regexes, and the paraphrases must stay free of the markers they were written against too.
_KEY_THEN = re.compile(
    r"(\b(decid\w*|decision|we('ll| will) (use|go with)|let'?s (use|go with)|always|never|must|"
    r"do not|don'?t ever|from now on|the rule is|i prefer|make sure)\b|决定|必须|不要|总是|永远|以后都|规则|我更喜欢)",
    re.IGNORECASE,
)
_TOPIC_THEN = re.compile(
    r"^\s*(new topic|different topic|change of topic|another (topic|question|thing)|switching (topics?|gears)|"
    r"unrelated|back to|going back to|returning to|换个话题|另一个问题|换个问题|新话题|说点别的|回到)",
    re.IGNORECASE,
)


def markers() -> list[re.Pattern[str]]:
    live = [
        getattr(episodes, name) for name in ("_KEY", "_TOPIC") if isinstance(getattr(episodes, name, None), re.Pattern)
    ]
    return [_KEY_THEN, _TOPIC_THEN, *live]


def test_paraphrase_and_chinese_texts_carry_no_marker_words() -> None:
    found = []
    for path in SCENARIOS:
        for i, e in enumerate(load_scenario(path).events):
            for variant, text in e.variants.items():
                if any(p.search(text) for p in markers()):
                    found.append(f"{path.stem} event {i} ({variant}): {text}")
    assert not found, "\n".join(found)


def test_the_suite_has_paraphrase_and_chinese_variants() -> None:
    with_both = [p for p in SCENARIOS if {"paraphrase", "zh"} <= set(applicable_variants(load_scenario(p)))]
    assert len(with_both) >= 40


def test_chinese_texts_have_no_spaces_between_chinese_words() -> None:
    cjk_space = re.compile(r"[\u4e00-\u9fff] [\u4e00-\u9fff]")
    bad = [
        (p.stem, e.variants["zh"])
        for p in SCENARIOS
        for e in load_scenario(p).events
        if "zh" in e.variants and cjk_space.search(e.variants["zh"])
    ]
    assert not bad


def test_the_prefix_pool_is_thirty_unrelated_pairs_without_markers() -> None:
    assert len(PREFIX_PAIRS) == 30 and len({a for a, _b in PREFIX_PAIRS}) == 30
    texts = [t for pair in PREFIX_PAIRS for t in pair]
    assert not [t for t in texts if any(p.search(t) for p in markers())]


def scenario() -> Scenario:
    return Scenario(
        id="v",
        budgets=[4096],
        events=[
            ScenarioEvent(
                kind="operator", text="Ship it on Friday.", variants={"paraphrase": "Friday works.", "zh": "周五上线。"}
            ),
            ScenarioEvent(kind="assistant", text="Okay."),
            ScenarioEvent(kind="operator"),
            ScenarioEvent(kind="assistant"),
            ScenarioEvent(kind="operator", ref="message:now", text="When do we ship?"),
        ],
    )


def test_an_authored_variant_falls_back_to_the_plain_text() -> None:
    s = scenario()
    assert [e.text for e in variant_events(s, "paraphrase")] == [
        "Friday works.",
        "Okay.",
        None,
        None,
        "When do we ship?",
    ]
    assert variant_events(s, "zh")[0].text == "周五上线。"
    assert variant_events(s, "plain") == s.events
    assert variant_events(s, "long_filler") == s.events  # its change is in the generated filler


def test_prefix30_adds_sixty_events_before_the_scenario() -> None:
    s = scenario()
    events = variant_events(s, "prefix30")
    assert len(events) == len(s.events) + 60
    assert [e.kind for e in events[:4]] == ["operator", "assistant", "operator", "assistant"]
    assert events[0].text == PREFIX_PAIRS[0][0] and events[59].text == PREFIX_PAIRS[29][1]
    assert events[60:] == s.events


def test_long_filler_makes_every_generated_filler_three_times_longer(tmp_path: Path) -> None:
    s = scenario()
    plain = sc._Driver(s, tmp_path / "plain", "plain")
    long = sc._Driver(s, tmp_path / "long", "long_filler")
    try:
        for i in range(5):
            a, b = plain.filler("operator", i), long.filler("operator", i)
            assert len(b.split()[2:]) == 3 * len(a.split()[2:])
            assert b.startswith(a)  # the same base text, then more
    finally:
        plain.store.close()
        long.store.close()


def test_which_variants_apply() -> None:
    s = scenario()
    assert applicable_variants(s) == ["plain", "paraphrase", "zh", *AUTOMATIC]
    bare = Scenario(id="b", events=[ScenarioEvent(kind="operator", text="hi")])
    assert applicable_variants(bare) == ["plain", *AUTOMATIC]
    declared = Scenario(id="d", events=[ScenarioEvent(kind="operator", text="hi")], variants=["plain", "prefix30"])
    assert applicable_variants(declared) == ["plain", "prefix30"]
    assert set(VARIANTS) == {"plain", "paraphrase", "zh", "long_filler", "prefix30"}


def test_the_format_rejects_unknown_variants(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"id": "x", "events": [{"kind": "operator", "text": "a", "variants": {"pirate": "arr"}}]}')
    with pytest.raises(UsageError, match=r"events\.0\.variants"):
        load_scenario(bad)
    bad.write_text('{"id": "x", "variants": ["klingon"], "events": [{"kind": "operator", "text": "a"}]}')
    with pytest.raises(UsageError, match="variants"):
        load_scenario(bad)


def test_a_variant_run_reports_its_variant() -> None:
    result = sc.run_scenario(scenario(), variant="zh", fresh_check=False)
    assert result["variant"] == "zh" and result["passed"], result
    (b,) = result["budgets"]
    assert b["observed"]["message:now"] == {"shown": True, "how": "text", "section": "input"}
