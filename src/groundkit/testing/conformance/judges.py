"""A conformance suite any ``ClaimJudge`` implementation must pass.

Subclass it with a ``Test*`` class that provides a ``judge_factory`` fixture
returning a zero-argument callable that builds a fresh, identically configured
judge, and optionally ``sample_pairs`` with pairs it really judges::

    class TestMyJudge(ClaimJudgeConformance):
        @pytest.fixture
        def judge_factory(self):
            return lambda: MyJudge(...)

``verify_answer`` hands a judge one batch per answer and turns each
``contradiction`` into the verdict ``contradicted``, showing its reason; so the
suite pins what makes that safe: one judgement per pair, in order, whatever
the batch; the same judgement on every call and every fresh instance; a reason
with every contradiction; a stable name; and nothing but groundkit errors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from groundkit.errors import GroundkitError
from groundkit.verification.claims import ClaimJudge, ClaimJudgement, ClaimPair

__all__ = ["DEFAULT_PAIRS", "ClaimJudgeConformance"]

Factory = Callable[[], ClaimJudge]

DEFAULT_PAIRS = (
    ClaimPair("The tea is steeped at 100 degrees.", ("Green tea is brewed at about 80 degrees.",)),
    ClaimPair("The tea is steeped at 80 degrees.", ("Green tea is brewed at about 80 degrees.",)),
    ClaimPair("Caffeine does not raise alertness.", ("Caffeine raises alertness in adults.",)),
    ClaimPair(
        "Exercise lowers blood pressure.",
        ("Regular exercise increased blood pressure in the trial.", "Adults walked daily."),
    ),
    ClaimPair("The sky is blue.", ("Air scatters blue light more than red light.",)),
    ClaimPair("Straße ÉCOLE naïve café – 東京 の 天気 🌊", ("مرحبا بالعالم e\u0301",)),
    ClaimPair("A claim with no evidence at all.", ()),
)
_LABELS = frozenset({"entailment", "neutral", "contradiction"})


class ClaimJudgeConformance:
    """Behaviour shared by every claim judge."""

    def sample_pairs(self) -> Sequence[ClaimPair]:
        """Pairs to judge; override with ones the judge really reads."""
        return DEFAULT_PAIRS

    @pytest.fixture
    def judge(self, judge_factory: Factory) -> ClaimJudge:
        """One instance from the implementer's factory."""
        return judge_factory()

    async def test_satisfies_the_protocol(self, judge: ClaimJudge) -> None:
        assert isinstance(judge, ClaimJudge)
        assert isinstance(judge.name, str) and judge.name.strip()

    async def test_an_empty_batch_is_an_empty_list(self, judge: ClaimJudge) -> None:
        assert await judge.judge([]) == []

    async def test_one_judgement_per_pair_in_order(self, judge: ClaimJudge) -> None:
        pairs = list(self.sample_pairs())
        got = await judge.judge(pairs)
        assert isinstance(got, list) and len(got) == len(pairs)
        for judgement in got:
            assert isinstance(judgement, ClaimJudgement)
            assert judgement.label in _LABELS
            assert isinstance(judgement.reason, str)

    async def test_every_contradiction_says_why(self, judge: ClaimJudge) -> None:
        for judgement in await judge.judge(list(self.sample_pairs())):
            if judgement.contradicted:
                assert judgement.reason.strip(), judgement

    async def test_a_batch_reads_as_its_pairs_one_by_one(self, judge: ClaimJudge) -> None:
        pairs = list(self.sample_pairs())
        together = await judge.judge(pairs)
        alone = [(await judge.judge([p]))[0] for p in pairs]
        assert [j.label for j in together] == [j.label for j in alone]
        reordered = await judge.judge(pairs[::-1])
        assert [j.label for j in reordered] == [j.label for j in together][::-1]

    async def test_deterministic_across_calls_and_instances(
        self, judge: ClaimJudge, judge_factory: Factory
    ) -> None:
        pairs = list(self.sample_pairs())
        first = await judge.judge(pairs)
        assert await judge.judge(pairs) == first
        assert await judge_factory().judge(pairs) == first

    async def test_name_is_stable(self, judge: ClaimJudge, judge_factory: Factory) -> None:
        name = judge.name
        await judge.judge(list(self.sample_pairs())[:1])
        assert judge.name == name
        assert judge_factory().name == name

    @pytest.mark.parametrize("bad", ["a claim", [("claim", ("evidence",))], [None], 3])
    async def test_refuses_what_is_not_pairs_with_a_groundkit_error(
        self, judge: ClaimJudge, bad: object
    ) -> None:
        with pytest.raises(GroundkitError):
            await judge.judge(bad)  # type: ignore[arg-type]
