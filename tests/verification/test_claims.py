"""RuleClaimJudge: numbers, negation and direction words, each disagreement named."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundkit import RetrievalError, RuleClaimJudge
from groundkit.testing.conformance import ClaimJudgeConformance
from groundkit.verification import ClaimPair
from groundkit.verification.claims import (
    check_claim,
    direction_cues,
    is_negated,
    negation_cues,
    quantities,
)


class TestRuleJudgeConformance(ClaimJudgeConformance):
    @pytest.fixture
    def judge_factory(self) -> object:
        return RuleClaimJudge


# -- quantities ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claim", "evidence", "reason"),
    [
        (
            "The tea is steeped at 100 degrees.",
            "Green tea is brewed at about 80 degrees.",
            "claim 100 degrees, source about 80 degrees",
        ),
        (
            "Prices rose 9% last year.",
            "Prices rose by 3-7 percent.",
            "claim 9%, source 3-7 percent",
        ),
        (
            "The genome is 2140 bp long.",
            "The genome is 7,489 base pairs in size.",
            "claim 2140 bp, source 7,489 base pairs",
        ),
        ("It boils at 100 °C.", "Water boils at 90 degrees up here.", "claim 100 °C, source 90"),
        ("The dose was 40 mg.", "Each patient took 20 mg a day.", "claim 40 mg, source 20 mg"),
    ],
)
def test_numbers_that_disagree_are_named(claim: str, evidence: str, reason: str) -> None:
    got = check_claim(claim, [evidence])
    assert got is not None and got.startswith(reason)


@pytest.mark.parametrize(
    ("claim", "evidence"),
    [
        ("The tea is steeped at 82 degrees.", "Green tea is brewed at about 80 degrees."),
        ("Prices rose 5% last year.", "Prices rose by 3-7 percent."),
        ("Prices rose 3-7% last year.", "Prices rose by 5 percent."),
        ("Over 50% of adults drink tea.", "63% of adults drink tea daily."),
        ("Under 10% of adults drink mate.", "Only 4% drink mate."),
        ("About half drink tea: 50%.", "49.6% of them drink tea."),
        ("The trial lasted twelve weeks.", "The trial lasted 12 weeks."),
        ("The effect was 1.4-2.7 times larger.", "It was 1\u00b74\u20132\u00b77 times larger."),
        ("The dose was 40 mg.", "The trial lasted 40 weeks."),  # different units: not compared
        ("It held 95% of the water.", "95% CI 80-99; it held 95% of the water."),
        # One agreeing value is enough: the others measure something else.
        ("Weight fell by 5 kg.", "Weight fell by 5 kg in men and 3 kg in women."),
    ],
)
def test_numbers_that_agree_pass(claim: str, evidence: str) -> None:
    assert check_claim(claim, [evidence]) is None


@pytest.mark.parametrize(
    "source",
    [
        "Patients received between 10 and 20 mg daily.",
        "Patients received between 10 mg and 20 mg daily.",
        "Patients received 10 mg to 20 mg daily.",
        "Patients received 10 mg-20 mg daily.",
        "Patients received 10 mg\u201320 mg daily.",
        "The effect was between 10% and 20%.",
    ],
)
def test_a_range_in_any_of_its_written_forms_holds_a_value_inside_it(source: str) -> None:
    """A range agrees with a value inside it however it is written: "between ... and",
    and with its unit on both ends, were read as two amounts neither of which agreed."""
    unit = "%" if "%" in source else " mg"
    assert check_claim(f"The amount was 15{unit}.", [source]) is None
    got = check_claim(f"The amount was 25{unit}.", [source])
    assert got is not None and got.startswith(f"claim 25{unit}, source ")
    assert "10" in got and "20" in got


@pytest.mark.parametrize("minus", ["\u2212", "\ufe63", "\uff0d"])
def test_a_typeset_minus_sign_makes_a_negative_number(minus: str) -> None:
    """Typeset sources write "\u22125 \u00b0C": read as 5 \u00b0C, it contradicted a claim of
    -5 \u00b0C and agreed with one of 5 \u00b0C."""
    source = [f"The lake froze at {minus}5 \u00b0C overnight."]
    assert check_claim("The lake froze at -5 \u00b0C overnight.", source) is None
    assert check_claim("The lake froze at 5 \u00b0C overnight.", source) == (
        "claim 5 \u00b0C, source -5 \u00b0C"
    )
    (q,) = quantities(f"between {minus}10 and {minus}5 \u00b0C")
    assert (q.low, q.high) == (-10.0, -5.0)


def test_two_amounts_are_not_a_range() -> None:
    assert check_claim("Groups got 15 mg.", ["Groups got 10 and 20 mg."]) == (
        "claim 15 mg, source 20 mg"
    )
    assert [(q.low, q.unit) for q in quantities("from 5 days to 2 weeks")] == [
        (5.0, "days"),
        (2.0, "weeks"),
    ]
    assert [(q.low, q.high, q.unit) for q in quantities("10 mg to 20 patients")] == [
        (10.0, 10.0, "mg")
    ]


def test_proportions_compare_as_fractions() -> None:
    got = check_claim("One in two trials stop early.", ["One in five trials stop early."])
    assert got == "claim One in two, source One in five"
    got = check_claim("1 in 5 million people carry it.", ["Its prevalence is 493 per million."])
    assert got == "claim 1 in 5 million, source 493 per million"
    assert check_claim("One in five trials stop.", ["1 in 5 trials stop early."]) is None


def test_quantities_read_ranges_bounds_and_words() -> None:
    (q,) = quantities("between 3-7 percent")
    assert (q.low, q.high, q.unit) == (3.0, 7.0, "%")
    (q,) = quantities("more than 40 mg")
    assert q.bound == "lower" and q.unit == "mg"
    (q,) = quantities("twelve weeks")
    assert (q.low, q.unit) == (12.0, "weeks")
    (q,) = quantities("a twofold rise")
    assert (q.low, q.unit) == (2.0, "fold")
    assert quantities("APOE4 and Th2 cells, (95% CI, 1.04-2.22)") == []


# -- negation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "negated"),
    [
        ("Tea does not contain caffeine.", True),
        ("Tea doesn't contain caffeine.", True),
        ("There is no association with cancer.", True),
        ("The drug failed to lower pressure.", True),
        ("It never rains here.", True),
        ("Tea contains caffeine.", False),
        ("Memory, but not naive, cells respond.", False),
        ("Not only tea but coffee helps.", False),
        ("Whether it helps is not known.", False),
        ("It has not been fully explored.", False),
        ("Doses of no more than 5 mg were safe.", False),
        ("Pressure was unchanged after tea.", True),
        ("Mice are incapable of it.", True),
    ],
)
def test_negation(text: str, negated: bool) -> None:
    assert is_negated(text) is negated


def test_negation_disagreement_both_ways() -> None:
    got = check_claim("Tea does not contain caffeine.", ["Tea contains caffeine."])
    assert got == "claim negated (not), source not"
    got = check_claim("Tea contains caffeine.", ["Tea does not contain caffeine."])
    assert got == "source negated (not), claim not"
    # Only the clause that speaks of the claim counts in the source.
    evidence = ["There was no link with 8 of 10 cancers; tea use was linked with prostate cancer."]
    assert check_claim("Tea use is linked with prostate cancer.", evidence) is None
    assert check_claim("Tea use is linked with lung cancer.", ["Tea had no link with lung cancer."])
    # A negated claim is agreed with by any negated evidence sentence it reads.
    evidence = ["Tea contains tannins.", "Tea does not contain caffeine."]
    assert check_claim("Tea does not contain caffeine.", evidence) is None


# -- direction -----------------------------------------------------------------------


def test_opposed_directions_on_the_same_terms() -> None:
    got = check_claim("Caffeine increases alertness.", ["Caffeine decreased alertness in adults."])
    assert got == "claim increases (increases), source decreases (decreased)"
    got = check_claim("Statins inhibit tumour growth.", ["Statins promoted tumour growth."])
    assert got == "claim decreases (inhibit), source increases (promoted)"
    got = check_claim(
        "The test is inaccurate for children.", ["The test is accurate for children."]
    )
    assert got == "claim inaccurate, source accurate"


def test_directions_about_other_terms_or_both_ways_pass() -> None:
    # The down word is about something else.
    assert check_claim("Caffeine increases alertness.", ["Sleep decreased in the trial."]) is None
    # The source says both: nothing single to contradict.
    evidence = ["Caffeine increased alertness at first and decreased alertness later."]
    assert check_claim("Caffeine increases alertness.", evidence) is None
    # "did not increase" is no change, which the negation check reads, not a decrease.
    (cue,) = direction_cues("Caffeine increased alertness.")
    assert cue.sign == 1
    assert direction_cues("Caffeine did not increase alertness.") == []
    assert direction_cues("HIV-positive adults") == []


def test_no_evidence_is_no_contradiction() -> None:
    assert check_claim("The tea is steeped at 100 degrees.", []) is None


# -- invariants ----------------------------------------------------------------------

_WORD_TEXT = (
    "tea coffee not no never increases decreases higher lower 100 80 degrees % mg 3-7 "
    "about over under more less fold twofold but whether inhibits promotes accurate "
    "inaccurate the is at of , . 1,000 2.5 twelve weeks"
)
_WORDS = st.sampled_from(_WORD_TEXT.split())
_SENTENCES = st.lists(_WORDS, min_size=1, max_size=14).map(" ".join) | st.text(max_size=80)


@settings(max_examples=300, deadline=None)
@given(_SENTENCES)
def test_a_claim_never_contradicts_itself(claim: str) -> None:
    assert check_claim(claim, [claim]) is None


@pytest.mark.parametrize(
    "sentence",
    [
        "Rain falls, but, never heavy rain in May.",
        "Some cells respond; but, not naive memory cells in mice.",
    ],
)
def test_a_negation_in_the_clause_about_the_claim_is_read_in_its_sentence(sentence: str) -> None:
    """The clause a plain claim is compared with was cut out and read alone: "never"
    lost the "but" before it that makes it no negation, and a sentence read as its own
    evidence contradicted itself."""
    assert not is_negated(sentence)
    assert check_claim(sentence, [sentence]) is None


@settings(max_examples=200, deadline=None)
@given(_SENTENCES, _SENTENCES)
def test_a_claim_is_never_contradicted_by_evidence_that_contains_it(claim: str, other: str) -> None:
    # The claim itself among the evidence sentences agrees on every cue it carries.
    assert check_claim(claim, [claim, other]) is None or check_claim(claim, [claim]) is None
    assert _quantity_reason(claim, [other, claim]) is None


def _quantity_reason(claim: str, evidence: list[str]) -> str | None:
    from groundkit.verification.claims import _quantity_conflict

    return _quantity_conflict(claim, evidence)


@settings(max_examples=200, deadline=None)
@given(_SENTENCES, _SENTENCES)
def test_deterministic_and_every_reason_names_the_claim(claim: str, evidence: str) -> None:
    first = check_claim(claim, [evidence])
    assert check_claim(claim, [evidence]) == first
    assert first is None or first.startswith(("claim", "source"))


async def test_the_judge_batches_and_refuses_what_is_not_pairs() -> None:
    judge = RuleClaimJudge()
    got = await judge.judge(
        [
            ClaimPair("Tea is steeped at 100 degrees.", ("Tea is brewed at 80 degrees.",)),
            ClaimPair("Tea is steeped at 80 degrees.", ("Tea is brewed at 80 degrees.",)),
        ]
    )
    assert [j.label for j in got] == ["contradiction", "neutral"]
    assert got[0].reason == "claim 100 degrees, source 80 degrees"
    with pytest.raises(RetrievalError, match="ClaimPair"):
        await judge.judge([("a", ("b",))])  # type: ignore[list-item]


def test_negation_cues_in_order() -> None:
    assert negation_cues("No tea, and it does not help; never.") == ["no", "not", "never"]


def test_a_measure_in_another_unit_is_converted_before_it_is_compared() -> None:
    oven = ["The oven should be heated to about 230 degrees Celsius."]
    assert check_claim("The oven is heated to 230 °F", oven) == (
        "claim 230 °F, source about 230 degrees Celsius"
    )
    assert check_claim("The oven is heated to about 446 degrees Fahrenheit", oven) is None
    assert check_claim("A dose of 500 mg was given", ["A dose of 0.5 g was given."]) is None
    assert check_claim("A dose of 50 mg was given", ["A dose of 0.5 g was given."]) == (
        "claim 50 mg, source 0.5 g"
    )


@pytest.mark.parametrize(
    ("length", "contradicts"),
    [("5 m", True), ("5000 metres", False), ("500 cm", True)],
)
def test_metres_convert_like_every_other_length(length: str, contradicts: bool) -> None:
    """Metres sit between nanometres and kilometres: a length in metres is compared with
    one in kilometres once converted, as centimetres are, whichever side states it."""
    claim, source = f"The trail is {length} long.", "The trail is 5 km long."
    assert check_claim(claim, [source]) == (f"claim {length}, source 5 km" if contradicts else None)
    assert check_claim(source, [claim]) == (f"claim 5 km, source {length}" if contradicts else None)


def test_a_direction_word_both_share_sets_the_scene_and_the_other_is_compared() -> None:
    source = ["Longer extraction increases the bitterness of the cup."]
    reason = check_claim("Longer extraction decreases the bitterness of the cup", source)
    assert reason == "claim decreases (decreases), source increases (increases)"
    assert check_claim("Longer extraction increases the bitterness of the cup", source) is None


async def test_a_large_batch_is_judged_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pure-Python rules over a long answer's pairs must not hold the loop (a server's
    # other requests); a small batch stays inline, where a thread would cost more.
    import threading

    from groundkit.verification import claims

    seen: list[bool] = []
    judged = claims.check_claim

    def recording(*args: object, **kwargs: object) -> str | None:
        seen.append(threading.current_thread() is threading.main_thread())
        return judged(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(claims, "check_claim", recording)
    judge = RuleClaimJudge()
    small = [ClaimPair("Tea is steeped at 80 degrees.", ("Tea is steeped at 90 degrees.",))]
    assert (await judge.judge(small))[0].contradicted
    assert seen == [True]
    seen.clear()
    large = small * 400
    assert all(j.contradicted for j in await judge.judge(large))
    assert seen and not any(seen)
