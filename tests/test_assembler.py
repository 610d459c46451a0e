"""The budgeted assembler as a pure function: hand-made sections in, messages and a manifest out.

Properties (hypothesis) cover the budget, refusal only when the pinned minimum cannot fit, the
fixed degradation sequences and their monotonicity, the stable tier chosen from the budget alone,
and determinism; example tests cover the layout of the request and the manifest.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any

import pytest
from helpers.props import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from holon.context.assembler import STABLE_SHARE, Assembly, Budget, ContextOverflow, Rendering, Section, assemble

LEVEL = {"full": 0, "compact": 1, "omitted": 2}
TIERS = ("stable", "agent", "turn")
SLOTS = ("system", "context", "history", "input", "rounds")
TEXT_SLOTS = ("system", "context")


def budget_for(limit: int, reserve: int = 100, frame: int = 8) -> Budget:
    """A budget whose ``limit`` is exactly ``limit``."""
    return Budget(context_window=limit + reserve + frame, output_reserve=reserve, frame_tokens=frame)


def rendering(form: str, tokens: int, slot: str, key: str, refs: tuple[str, ...] = ()) -> Rendering:
    body = f"{key}/{form}/{tokens}"
    if slot == "system" and tokens % 3 == 0:  # some system sections carry tool schemas (and no text)
        tool = {"type": "function", "function": {"name": key, "description": body}}
        return Rendering(form, tokens, tools=(tool,), refs=refs)  # type: ignore[arg-type]
    if slot in TEXT_SLOTS:
        return Rendering(form, tokens, text=body, refs=refs)  # type: ignore[arg-type]
    return Rendering(form, tokens, messages=({"role": "user", "content": body},), refs=refs)  # type: ignore[arg-type]


def pinned_minimum(sections: list[Section]) -> int:
    return sum(s.renderings[-1].tokens for s in sections if s.pinned and not s.excluded)


def levels(a: Assembly) -> dict[str, int]:
    """Section key -> full (0), compact (1), omitted (2)."""
    return {m["key"]: LEVEL[m["representation"]] for m in a.manifest.to_json()["sections"]}


def indexes(a: Assembly, sections: list[Section]) -> dict[str, int]:
    """Section key -> index of the chosen rendering (``len(renderings)`` when omitted). Tokens
    decrease strictly along a section's renderings, so the allocated tokens name the rendering."""
    by_key = {s.key: s for s in sections}
    out = {}
    for m in a.manifest.to_json()["sections"]:
        s = by_key[m["key"]]
        if m["representation"] == "omitted":
            out[s.key] = len(s.renderings)
            continue
        out[s.key] = next(i for i, r in enumerate(s.renderings) if r.tokens == m["allocated_tokens"])
        assert s.renderings[out[s.key]].form == m["representation"]
    return out


def try_assemble(sections: list[Section], limit: int) -> Assembly | None:
    try:
        return assemble(sections, budget_for(limit))
    except ContextOverflow:
        return None


# --- strategies --------------------------------------------------------------------------------


@st.composite
def section_sets(draw: st.DrawFn, max_size: int = 9, prefix: str = "s") -> list[Section]:
    n = draw(st.integers(0, max_size))
    out = []
    for i in range(n):
        key = f"{prefix}{i:02d}"
        slot = draw(st.sampled_from(SLOTS))
        refs = tuple(draw(st.lists(st.sampled_from([f"event:{i}", f"file:{key}", "event:99"]), unique=True)))
        renderings = [rendering("full", draw(st.integers(1, 300)), slot, key, refs)]
        # Up to two compact forms (the tools section has two), each strictly leaner than the last.
        for _ in range(draw(st.integers(0, 2))):
            if renderings[-1].tokens == 0:
                break
            tokens = draw(st.integers(0, renderings[-1].tokens - 1))
            kept = tuple(r for r in renderings[-1].refs if draw(st.booleans()))
            renderings.append(rendering("compact", tokens, slot, key, kept))
        out.append(
            Section(
                key=key,
                tier=draw(st.sampled_from(TIERS)),
                slot=slot,  # type: ignore[arg-type]
                order=draw(st.integers(-2, 5)),
                priority=draw(st.integers(0, 12)),  # a small range, so ties (broken on key) happen
                renderings=tuple(renderings),
                pinned=draw(st.booleans()),
                excluded=draw(st.integers(0, 9)) == 0,
                reason=draw(st.sampled_from(["", "relevance 0.40", "not relevant to this input"])),
            )
        )
    # The caller's list order must not matter: shuffle it.
    return draw(st.permutations(out))


def full_total(sections: list[Section]) -> int:
    return sum(s.renderings[0].tokens for s in sections if not s.excluded)


limits = st.integers(-20, 2_800)


# --- budget, refusal, degradation sequences ----------------------------------------------------


@pytest.mark.slow  # a long property run (fuzzing)
@settings(max_examples=examples(200), deadline=None)
@given(section_sets(), limits)
def test_fits_the_budget_or_refuses_only_when_the_pinned_minimum_cannot_fit(sections, limit) -> None:
    minimum = pinned_minimum(sections)
    try:
        a = assemble(sections, budget_for(limit))
    except ContextOverflow as e:
        assert minimum > limit, f"refused although the pinned minimum {minimum} fits {limit}"
        assert str(minimum) in str(e) and str(limit) in str(e)
        return
    assert minimum <= limit
    manifest = a.manifest.to_json()
    allocated = sum(m["allocated_tokens"] for m in manifest["sections"])
    assert a.used_tokens == manifest["used_tokens"] == allocated
    assert a.used_tokens <= limit == manifest["budget"]["limit"]
    by_key = {s.key: s for s in sections}
    assert sorted(m["key"] for m in manifest["sections"]) == sorted(by_key)
    for m in manifest["sections"]:
        s = by_key[m["key"]]
        assert m["requested_tokens"] == s.renderings[0].tokens
        if s.excluded:
            assert m["representation"] == "omitted" and m["excluded"] and m["allocated_tokens"] == 0
        if s.pinned and not s.excluded:
            assert m["representation"] != "omitted"
    # Tools come from the chosen renderings, in prompt order.
    chosen = indexes(a, sections)
    expected_tools = [
        t
        for m in manifest["sections"]
        if chosen[m["key"]] < len(by_key[m["key"]].renderings)
        for t in by_key[m["key"]].renderings[chosen[m["key"]]].tools
    ]
    assert a.tools == expected_tools
    # Nothing is degraded when everything fits in full with the stable tier within its share.
    stable_full = sum(s.renderings[0].tokens for s in sections if s.tier == "stable" and not s.excluded)
    if full_total(sections) <= limit and stable_full <= STABLE_SHARE * limit:
        assert all(m["representation"] == "full" for m in manifest["sections"] if not by_key[m["key"]].excluded)


def sequence(sections: list[Section]) -> list[tuple[str, int]]:
    """The docstring's fixed degradation sequence of a group of sections, written out
    independently: compact (lowest priority first, ties on key), then omit the non-pinned ones."""
    candidates = sorted((s for s in sections if not s.excluded), key=lambda s: (s.priority, s.key))
    steps = [(s.key, i) for s in candidates for i in range(1, len(s.renderings))]
    steps += [(s.key, len(s.renderings)) for s in candidates if not s.pinned]
    return steps


def prefixes(sections: list[Section]) -> list[dict[str, int]]:
    """A group's rendering indexes after each prefix of its sequence, the empty prefix first."""
    level = {s.key: len(s.renderings) if s.excluded else 0 for s in sections}
    out = [dict(level)]
    for key, new in sequence(sections):
        level[key] = new
        out.append(dict(level))
    return out


def tokens_at(sections: list[Section], level: dict[str, int]) -> int:
    return sum(s.renderings[level[s.key]].tokens for s in sections if level[s.key] < len(s.renderings))


@pytest.mark.slow  # a long property run (fuzzing)
@settings(max_examples=examples(200), deadline=None)
@given(section_sets(), limits)
def test_each_tier_group_degrades_along_its_fixed_sequence(sections, limit) -> None:
    a = try_assemble(sections, limit)
    if a is None:
        return
    chosen = indexes(a, sections)
    stable = [s for s in sections if s.tier == "stable"]
    rest = [s for s in sections if s.tier != "stable"]
    for group in (stable, rest):
        assert {s.key: chosen[s.key] for s in group} in prefixes(group), "not a prefix of the group's sequence"
    # The stable tier keeps within its share of the budget, unless it is as lean as it gets ...
    mine = {s.key: chosen[s.key] for s in stable}
    stable_prefixes = prefixes(stable)
    if tokens_at(stable, mine) > STABLE_SHARE * limit:
        assert mine == stable_prefixes[-1]
    # ... and takes the first prefix within that share, unless the rest's pinned minimum needed
    # more room (then it may only be leaner).
    first = next((i for i, p in enumerate(stable_prefixes) if tokens_at(stable, p) <= STABLE_SHARE * limit), None)
    taken = stable_prefixes.index(mine)
    if first is not None:
        assert taken >= first
        if not any(s.pinned and not s.excluded for s in rest):
            assert taken == first


@pytest.mark.slow  # a long property run (fuzzing)
@settings(max_examples=examples(150), deadline=None)
@given(section_sets(max_size=6), section_sets(max_size=6, prefix="r"), limits)
def test_the_stable_tier_is_chosen_from_the_budget_alone(sections, others, limit) -> None:
    """Same stable sections with a different rest (nothing pinned in it): the same stable levels,
    hence the same stable prefix and the same stable tools."""
    stable = [s for s in sections if s.tier == "stable"]
    # Only stable sections go in the system slot (as the section builder does): the first system
    # message is the stable prefix.
    rest = [
        dataclasses.replace(
            s,
            pinned=False,
            tier="agent" if s.tier == "stable" else s.tier,
            slot="context" if s.slot == "system" else s.slot,
            renderings=tuple(dataclasses.replace(r, tools=()) for r in s.renderings),
        )
        for s in others
    ]
    alone = try_assemble(stable, limit)
    together = try_assemble([*stable, *rest], limit)
    assert (alone is None) == (together is None)
    if alone is None or together is None:
        return
    assert together.stable_prefix == alone.stable_prefix
    assert {k: v for k, v in levels(together).items() if not k.startswith("r")} == levels(alone)
    assert together.tools[: len(alone.tools)] == alone.tools


def interesting_limits(sections: list[Section]) -> st.SearchStrategy[int]:
    """Limits around where these sections start to degrade (up to the stable tier's share)."""
    high = int(full_total(sections) / STABLE_SHARE) + 10
    return st.integers(min(pinned_minimum(sections), high) - 5, high)


@pytest.mark.slow  # a long property run (fuzzing)
@settings(max_examples=examples(200), deadline=None)
@given(section_sets(), st.data())
def test_a_smaller_budget_never_includes_what_a_larger_one_dropped(sections, data) -> None:
    budgets = data.draw(st.lists(interesting_limits(sections), min_size=2, max_size=8, unique=True))
    results = [(b, a) for b in sorted(budgets, reverse=True) if (a := try_assemble(sections, b)) is not None]
    # Success is monotone too: once a budget fails, every smaller one fails.
    succeeded = [b for b, _ in results]
    assert succeeded == sorted(budgets, reverse=True)[: len(succeeded)]
    for (b1, big), (b2, small) in itertools.pairwise(results):
        lv1, lv2 = indexes(big, sections), indexes(small, sections)
        for key in lv1:
            assert lv2[key] >= lv1[key], f"{key}: rendering {lv1[key]} at {b1} but {lv2[key]} at {b2}"
        # In manifest terms: nothing included at b2 was omitted at b1, nothing full was compact.
        r1, r2 = levels(big), levels(small)
        assert all(r2[k] >= r1[k] for k in r1)
        assert small.used_tokens <= big.used_tokens


@settings(max_examples=examples(200), deadline=None)
@given(section_sets(), limits, st.randoms(use_true_random=False))
def test_the_same_inputs_give_the_same_bytes(sections, limit, rnd: random.Random) -> None:
    a = try_assemble(sections, limit)
    shuffled = list(sections)
    rnd.shuffle(shuffled)
    for again in (try_assemble(list(sections), limit), try_assemble(shuffled, limit)):
        if a is None:
            assert again is None
            continue
        assert again is not None
        assert again.messages == a.messages
        assert again.tools == a.tools
        assert again.manifest == a.manifest
        assert again.digest == a.digest
        assert again.stable_prefix == a.stable_prefix


@settings(max_examples=examples(200), deadline=None)
@given(section_sets(), limits)
def test_the_kept_encodings_are_the_plain_ones(sections, limit) -> None:
    """The manifest's JSON joined from kept section entries, the messages' JSON and the digest are
    the bytes a plain encoding of the whole gives (issue 18: encoded once, not per record)."""
    import hashlib

    import orjson

    from holon.ledger.codec import canonical_json

    for _ in range(2):  # the second time from the kept entries
        a = try_assemble(list(sections), limit)
        if a is None:
            return
        assert a.manifest.json_bytes() == canonical_json(a.manifest.to_json())
        assert a.messages_json == canonical_json(a.messages)
        assert a.tools_json == canonical_json(a.tools)
        plain = orjson.dumps([a.messages, a.tools], option=orjson.OPT_SORT_KEYS)
        assert a.digest == hashlib.sha256(plain).hexdigest()


def _stable_history_input() -> list[Section]:
    """A stable memory section that compacts to 10, a history turn that compacts to 60, a pinned input."""
    return [
        Section("memory", "stable", "system", 0, 500, (rendering("full", 100, "system", "m"),
                                                       rendering("compact", 10, "system", "m"))),
        Section("turn:a", "turn", "history", 0, 400, (rendering("full", 100, "history", "a"),
                                                      rendering("compact", 60, "history", "a"))),
        Section("input", "turn", "input", 0, 1000, (rendering("full", 5, "input", "i"),), pinned=True),
    ]  # fmt: skip


def test_a_leaner_stable_tier_does_not_give_the_rest_more_room() -> None:
    """Just below the budget where the stable tier must compact, the room it frees does not let
    the rest grow back: every section stays at least as degraded as at any larger budget."""
    sections = _stable_history_input()
    at = {limit: indexes(assemble(sections, budget_for(limit)), sections) for limit in range(70, 400)}
    assert at[170] == {"memory": 0, "turn:a": 1, "input": 0}
    assert at[160] == {"memory": 1, "turn:a": 1, "input": 0}
    for limit in range(71, 400):
        assert all(at[limit - 1][k] >= at[limit][k] for k in at[limit]), limit


def test_a_tier_that_fits_whole_builds_no_degradation_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    """Most prompts fit whole: their degradation sequences are not built (issue 18, step 6); a
    tier that does not fit still walks its own, with the same choices as before."""
    from holon.context import assembler

    built: list[list[str]] = []
    steps = assembler._steps
    monkeypatch.setattr(assembler, "_steps", lambda ss: built.append([s.key for s in ss]) or steps(ss))
    sections = _stable_history_input()
    assert indexes(assemble(sections, budget_for(400)), sections) == {"memory": 0, "turn:a": 0, "input": 0}
    assert built == []
    assert indexes(assemble(sections, budget_for(170)), sections) == {"memory": 0, "turn:a": 1, "input": 0}
    assert built == [["turn:a", "input"]]  # the stable tier fits: only the rest's sequence
    built.clear()
    assert indexes(assemble(sections, budget_for(160)), sections) == {"memory": 1, "turn:a": 1, "input": 0}
    assert built == [["memory"], ["turn:a", "input"]]


def test_duplicate_keys_are_refused() -> None:
    s = Section("x", "turn", "context", 0, 1, (Rendering("full", 1, text="x"),))
    with pytest.raises(ValueError, match="unique"):
        assemble([s, s], budget_for(100))


def test_budget_limit_is_the_window_minus_reserve_and_frame() -> None:
    assert Budget(context_window=8_192, output_reserve=1_024).limit == 8_192 - 1_024 - 8
    assert Budget(context_window=1_000, output_reserve=100, frame_tokens=0).limit == 900


def test_overflow_reports_the_shortfall_and_the_window() -> None:
    s = [Section("input", "turn", "input", 0, 1000, (rendering("full", 50, "input", "input"),), pinned=True)]
    with pytest.raises(ContextOverflow) as info:
        assemble(s, Budget(context_window=150, output_reserve=100))
    message = str(info.value)
    assert "50 tokens" in message and "allows 42" in message and "150" in message and "100 reserved" in message
    assert ContextOverflow.exit_code == 7
    assert assemble(s, Budget(context_window=158, output_reserve=100)).used_tokens == 50


# --- layout and manifest -----------------------------------------------------------------------


TOOL_A = {"type": "function", "function": {"name": "alpha", "description": "Alpha. Example: alpha()"}}
TOOL_A_COMPACT = {"type": "function", "function": {"name": "alpha", "description": "Alpha"}}
TOOL_B = {"type": "function", "function": {"name": "beta", "description": "Beta"}}


def msg(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "content": content}


def layout_sections() -> list[Section]:
    """A prompt shaped like the section builder's, listed out of order on purpose."""
    return [
        Section(
            "round:1",
            "turn",
            "rounds",
            1,
            900,
            (Rendering("full", 10, messages=(msg("assistant", "round one"),), refs=("event:31",)),),
            pinned=True,
        ),
        Section(
            "input",
            "turn",
            "input",
            0,
            1000,
            (Rendering("full", 10, messages=(msg("user", "the input"),), refs=("event:30",)),),
            pinned=True,
        ),
        Section(
            "turn:b",
            "turn",
            "history",
            20,
            401,
            (
                Rendering(
                    "full", 30, messages=(msg("user", "q2"), msg("assistant", "a2 long")), refs=("event:20", "event:21")
                ),
                Rendering("compact", 12, messages=(msg("user", "q2"), msg("assistant", "a2")), refs=("event:20",)),
            ),
        ),
        Section(
            "turn:a",
            "turn",
            "history",
            10,
            400,
            (
                Rendering(
                    "full", 20, messages=(msg("user", "q1"), msg("assistant", "a1")), refs=("event:10", "event:11")
                ),
            ),
        ),
        Section(
            "working_memory", "turn", "context", 3, 700, (Rendering("full", 10, text="# Working memory"),), reason="wm"
        ),
        Section(
            "work_item",
            "turn",
            "context",
            0,
            850,
            (
                Rendering("full", 25, text="# Current work item: full", refs=("work_item:wi_1",)),
                Rendering("compact", 10, text="# Current work item: compact", refs=("work_item:wi_1",)),
            ),
        ),
        Section(
            "episode:ep_5",
            "turn",
            "context",
            15,
            0,
            (Rendering("full", 0, text="# Episode ep_5", refs=("episode:ep_5",)),),
            reason="belongs to paused work item wi_0",
            excluded=True,
        ),
        Section(
            "tools",
            "stable",
            "system",
            50,
            960,
            (Rendering("full", 40, tools=(TOOL_A, TOOL_B)), Rendering("compact", 20, tools=(TOOL_A_COMPACT, TOOL_B))),
            pinned=True,
        ),
        Section(
            "file:memory/self.md",
            "stable",
            "system",
            10,
            500,
            (
                Rendering("full", 30, text="# File memory/self.md full", refs=("file:memory/self.md",)),
                Rendering("compact", 10, text="# File memory/self.md headings", refs=("file:memory/self.md",)),
            ),
        ),
        Section("agents_md", "stable", "system", 1, 920, (Rendering("full", 15, text="AGENTS"),), pinned=True),
        Section("system", "stable", "system", 0, 1000, (Rendering("full", 20, text="PREAMBLE"),), pinned=True),
    ]


def manifest_of(a: Assembly) -> dict[str, dict[str, Any]]:
    return {m["key"]: m for m in a.manifest.to_json()["sections"]}


def test_recorded_manifest_layout_is_stable() -> None:
    """``context.assembled`` stores ``Manifest.to_json()``: its layout is ledger data."""
    from holon.ledger.codec import canonical_json

    a = assemble(layout_sections(), budget_for(10_000))
    recorded = a.manifest.to_json()
    assert sorted(recorded) == ["budget", "digest", "sections", "used_tokens"]
    assert sorted(recorded["budget"]) == ["context_window", "limit", "output_reserve"]
    assert recorded["digest"] == a.digest and recorded["used_tokens"] == a.used_tokens
    section_keys = ["allocated_tokens", "excluded", "key", "reason", "refs_included", "refs_omitted"]
    section_keys += ["representation", "requested_tokens", "tier"]
    for s in recorded["sections"]:
        assert sorted(s) == section_keys
        assert isinstance(s["refs_included"], list) and isinstance(s["refs_omitted"], list)
    assert canonical_json(recorded) == canonical_json(a.manifest.to_json())  # a pure function of the manifest


def test_layout_stable_prefix_then_context_then_history_input_rounds() -> None:
    sections = layout_sections()
    a = assemble(sections, budget_for(10_000))
    assert a.stable_prefix == "PREAMBLE\n\nAGENTS\n\n# File memory/self.md full"
    assert a.messages == [
        {"role": "system", "content": a.stable_prefix},
        {"role": "system", "content": "# Current work item: full\n\n# Working memory"},
        msg("user", "q1"),
        msg("assistant", "a1"),
        msg("user", "q2"),
        msg("assistant", "a2 long"),
        msg("user", "the input"),
        msg("assistant", "round one"),
    ]
    assert a.tools == [TOOL_A, TOOL_B]
    assert a.used_tokens == 20 + 15 + 30 + 40 + 25 + 10 + 30 + 20 + 10 + 10
    m = manifest_of(a)
    # The manifest lists sections in prompt order, the excluded one included.
    assert list(m) == [
        "system",
        "agents_md",
        "file:memory/self.md",
        "tools",
        "work_item",
        "working_memory",
        "episode:ep_5",
        "turn:a",
        "turn:b",
        "input",
        "round:1",
    ]
    assert m["system"]["reason"] == "pinned" and m["working_memory"]["reason"] == "wm"
    assert m["turn:a"]["reason"] == "fits"
    ep = m["episode:ep_5"]
    assert ep["excluded"] and ep["representation"] == "omitted" and ep["allocated_tokens"] == 0
    assert ep["reason"] == "belongs to paused work item wi_0"
    assert ep["refs_included"] == [] and ep["refs_omitted"] == ["episode:ep_5"]
    assert "Episode ep_5" not in str(a.messages)
    assert m["turn:b"]["refs_included"] == ["event:20", "event:21"] and m["turn:b"]["refs_omitted"] == []
    assert m["file:memory/self.md"]["refs_included"] == ["file:memory/self.md"]
    assert {k: v["tier"] for k, v in m.items()}["tools"] == "stable"


def test_degraded_layout_uses_the_chosen_renderings_and_records_refs() -> None:
    sections = layout_sections()
    full = assemble(sections, budget_for(10_000)).used_tokens
    # Compaction alone saves 18 (turn:b) + 20 (file) + 15 (work item) + 20 (tools) = 73 tokens;
    # 10 more than that forces omitting the lowest-priority non-pinned section (turn:a, 400).
    a = assemble(sections, budget_for(full - 73 - 10))
    m = manifest_of(a)
    assert {k: v["representation"] for k, v in m.items()} == {
        "system": "full",
        "agents_md": "full",
        "file:memory/self.md": "compact",
        "tools": "compact",
        "work_item": "compact",
        "working_memory": "full",
        "episode:ep_5": "omitted",
        "turn:a": "omitted",
        "turn:b": "compact",
        "input": "full",
        "round:1": "full",
    }
    assert m["turn:a"]["reason"] == "omitted to fit the budget"
    assert m["turn:a"]["refs_included"] == [] and m["turn:a"]["refs_omitted"] == ["event:10", "event:11"]
    assert m["turn:b"]["reason"] == "compacted to fit the budget"
    assert m["turn:b"]["refs_included"] == ["event:20"] and m["turn:b"]["refs_omitted"] == ["event:21"]
    assert m["turn:b"]["requested_tokens"] == 30 and m["turn:b"]["allocated_tokens"] == 12
    assert a.tools == [TOOL_A_COMPACT, TOOL_B]
    assert a.stable_prefix == "PREAMBLE\n\nAGENTS\n\n# File memory/self.md headings"
    assert a.messages[1]["content"] == "# Current work item: compact\n\n# Working memory"
    assert a.messages[2:] == [
        msg("user", "q2"),
        msg("assistant", "a2"),
        msg("user", "the input"),
        msg("assistant", "round one"),
    ]
    assert a.used_tokens == full - 73 - 20 <= a.manifest.to_json()["budget"]["limit"]


def test_no_system_message_without_system_text_and_no_context_message_without_context() -> None:
    sections = [
        Section("tools", "stable", "system", 0, 960, (Rendering("full", 5, tools=(TOOL_B,)),), pinned=True),
        Section("input", "turn", "input", 0, 1000, (Rendering("full", 5, messages=(msg("user", "hi"),)),), pinned=True),
    ]
    a = assemble(sections, budget_for(100))
    assert a.messages == [msg("user", "hi")]
    assert a.stable_prefix == ""
    assert a.tools == [TOOL_B]
    # Context alone: a single system message that is not the stable prefix.
    a = assemble(
        [*sections, Section("wm", "turn", "context", 0, 700, (Rendering("full", 5, text="# WM"),))], budget_for(100)
    )
    assert a.messages == [{"role": "system", "content": "# WM"}, msg("user", "hi")]
    assert a.stable_prefix == ""


def test_digest_covers_messages_and_tools() -> None:
    base = layout_sections()
    a = assemble(base, budget_for(10_000))
    changed = [
        s
        if s.key != "input"
        else Section(
            s.key,
            s.tier,
            s.slot,
            s.order,
            s.priority,
            (Rendering("full", 10, messages=(msg("user", "other"),)),),
            pinned=True,
        )
        for s in base
    ]
    b = assemble(changed, budget_for(10_000))
    assert a.digest != b.digest and len(a.digest) == 64
    assert a.stable_prefix == b.stable_prefix


def test_parts_other_sections_show_are_left_out_at_layout() -> None:
    """A text rendering made of parts: a part whose refs a message section shows is left out; a
    section left with no essential part is left out whole; refs follow what is shown."""
    from holon.context.assembler import Part

    turn = Section(
        "turn:a",
        "turn",
        "history",
        1,
        500,
        (Rendering("full", 10, messages=({"role": "user", "content": "A"},), refs=("event:1",)),),
    )
    parts = (Part("# Episode", ("episode:e",), essential=False), Part("Operator: A", ("event:1",)), Part("Files: x.py"))
    text = "\n".join(p.text for p in parts)
    summary = Section(
        "episode:e",
        "turn",
        "context",
        5,
        300,
        (Rendering("full", 10, text=text, refs=("episode:e", "event:1"), parts=parts),),
    )
    a = assemble([turn, summary], Budget(context_window=1_000, output_reserve=100))
    m = {s.key: s for s in a.manifest.sections}
    assert "Operator: A" not in str(a.messages) and "Files: x.py" in str(a.messages)
    assert m["episode:e"].refs_included == ("episode:e",) and m["episode:e"].refs_omitted == ("event:1",)
    only_quotes = Section(
        "episode:f", "turn", "context", 6, 300, (Rendering("full", 10, text="x", refs=("event:1",), parts=parts[:2]),)
    )
    b = assemble([turn, only_quotes], Budget(context_window=1_000, output_reserve=100))
    gone = next(s for s in b.manifest.sections if s.key == "episode:f")
    assert gone.representation == "omitted" and "show its evidence" in gone.reason
    # Without the turn, every part is shown.
    c = assemble([summary], Budget(context_window=1_000, output_reserve=100))
    assert "Operator: A" in str(c.messages)


# --- a later round's layout from the last round's (issue 18, step 7) -----------------------------

PARTS_REFS = ("event:0", "event:1", "event:2", "event:99", "file:s00", "episode:e")


@st.composite
def parts_sections(draw: st.DrawFn, prefix: str) -> list[Section]:
    """Text sections made of parts quoting events that other sections may show (deduplication)."""
    from holon.context.assembler import Part

    out = []
    for i in range(draw(st.integers(0, 3))):
        key = f"{prefix}p{i}"
        parts = tuple(
            Part(f"{key} line {j}", tuple(draw(st.lists(st.sampled_from(PARTS_REFS), unique=True, max_size=2))),
                 essential=draw(st.booleans()))
            for j in range(draw(st.integers(1, 4)))
        )  # fmt: skip
        refs = tuple(sorted({r for p in parts for r in p.refs}))
        forms = [
            Rendering("full", draw(st.integers(1, 200)), text="\n".join(p.text for p in parts), refs=refs, parts=parts)
        ]
        if draw(st.booleans()):
            lean = parts[:1]
            lean_refs = tuple(sorted({r for p in lean for r in p.refs}))
            forms.append(Rendering("compact", forms[0].tokens // 2, text=lean[0].text, refs=lean_refs, parts=lean))
        slot = draw(st.sampled_from(["context", "history"]))  # a history summary goes to the context message
        out.append(Section(key, "turn", slot, draw(st.integers(0, 5)), draw(st.integers(0, 12)), tuple(forms)))  # type: ignore[arg-type]
    return out


def assert_same_assembly(again: Assembly | None, whole: Assembly | None) -> None:
    """Two assemblies of the same sections are the same request, record and manifest, byte for byte."""
    if whole is None:
        assert again is None
        return
    assert again is not None
    assert again == whole
    assert again.messages_json == whole.messages_json and again.tools_json == whole.tools_json
    assert again.manifest.json_bytes() == whole.manifest.json_bytes()
    assert again.manifest.sections_json == whole.manifest.sections_json
    assert again.digest == whole.digest
    assert again.stable_prefix == whole.stable_prefix and again.tools == whole.tools
    assert dict(again.chosen) == dict(whole.chosen)


@settings(max_examples=examples(300), deadline=None)
@given(st.data())
def test_a_later_round_laid_out_from_the_last_is_the_whole_layout(data: st.DataObject) -> None:
    """``assemble(sections, budget, previous=...)`` is ``assemble(sections, budget)``, byte for byte,
    whatever changed since ``previous``: sections kept (the same objects), replaced (same key,
    another object), added or gone, with parts that deduplication leaves out or not, at the same
    budget or another (other levels, other reasons), round after round."""
    current = data.draw(section_sets(max_size=12)) + data.draw(parts_sections("s"))
    limit = data.draw(limits)
    previous = try_assemble(current, limit)
    for _round in range(data.draw(st.integers(1, 4))):
        prefix = data.draw(st.sampled_from(["s", "r"]))  # "s": the same keys (replacements); "r": new ones
        fresh = data.draw(section_sets(max_size=3, prefix=prefix)) + data.draw(parts_sections(prefix))
        fresh_keys = {s.key for s in fresh}
        kept = [s for s in current if s.key not in fresh_keys and data.draw(st.integers(0, 9)) > 0]
        current = kept + fresh
        if data.draw(st.integers(0, 3)) == 0:
            limit = data.draw(limits)
        whole = try_assemble(current, limit)
        if previous is None:
            previous = whole
            continue
        try:
            again: Assembly | None = assemble(current, budget_for(limit), previous=previous)
        except ContextOverflow:
            again = None
        assert_same_assembly(again, whole)
        previous = again if again is not None else previous


def test_a_later_round_lays_out_only_what_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A round that changed a context section and added a round: the last round's layout is
    reused (not laid out whole), and the result is the whole layout's; a previous layout of other
    sections is laid out whole, the same."""
    from holon.context import assembler

    whole_layouts: list[int] = []
    layout = assembler._layout
    monkeypatch.setattr(assembler, "_layout", lambda *a: whole_layouts.append(1) or layout(*a))
    memory = Section("file:m", "stable", "system", 10, 450, (Rendering("full", 20, text="memory", refs=("file:m",)),))
    history = [
        Section(f"turn:{i}", "turn", "history", i, 400 + i,
                (Rendering("full", 30, messages=(msg("user", f"q{i}"), msg("assistant", f"a{i}")), refs=(f"event:{i}",)),))
        for i in range(6)
    ]  # fmt: skip
    item = Section("work_item", "turn", "context", 0, 850, (Rendering("full", 15, text="todo: pending"),))
    summary = Section(
        "episode:e", "turn", "context", 5, 300, (Rendering("full", 15, text="episode", refs=("event:1",)),)
    )
    user = Section(
        "input", "turn", "input", 0, 1000, (Rendering("full", 5, messages=(msg("user", "go"),)),), pinned=True
    )
    first = [memory, item, summary, *history, user]
    a = assemble(first, budget_for(2_000))
    assert len(whole_layouts) == 1
    item2 = dataclasses.replace(item, renderings=(Rendering("full", 15, text="todo: in progress"),))
    rounds = Section("round:0", "turn", "rounds", 0, 900, (Rendering("full", 12, messages=(msg("assistant", "call"),)),), pinned=True)  # fmt: skip
    second = [memory, item2, summary, *history, user, rounds]
    for limit in (2_000, 190, 150):  # whole, then history compacted and omitted
        b = assemble(second, budget_for(limit), previous=a)
        assert_same_assembly(b, assemble(second, budget_for(limit)))
    whole_layouts.clear()
    b = assemble(second, budget_for(2_000), previous=a)
    assert whole_layouts == [] and "todo: in progress" in b.messages[1]["content"]
    c = assemble(second, budget_for(2_000), previous=assemble([user], budget_for(2_000)))
    assert whole_layouts == [1, 1]  # most of it changed: laid out whole
    assert_same_assembly(c, b)
