"""Does a claim contradict the sentences it cites? A deterministic, explained check.

Similarity says a cited sentence is about what a claim says, not that it
agrees: "steeped at 100 degrees" and "brewed at about 80 degrees" share their
topic. ``RuleClaimJudge`` compares a claim with its best evidence sentences on
three things a reader can check by eye, and names what disagrees:

- **quantities**: a number with a unit (``%``, degrees, mg, bp, years, fold
  ...) whose unit the evidence also measures, at no agreeing value ("claim 100
  degrees, source 80 degrees"). A range agrees with a value inside it, ranges
  agree when they overlap, "about" allows 10%, "more than"/"less than" are
  bounds, and a value agrees at the precision it is written with.
- **negation**: the claim is negated ("does not", "no", "never") and its
  evidence is not, or the other way round ("claim negated, source not").
- **direction**: the claim says up (increases, higher, promotes, positively)
  and the evidence says down (decreases, lower, inhibits, negatively) about
  the same words, or the other way round ("claim increases, source decreases").

It can only find a contradiction, never establish support: a claim it passes
may still be wrong in ways these cues do not show. The thresholds (how many
evidence sentences are read, how close a sentence must be to count) were fitted
on claim-verification training pairs (``python -m evals.evidence``;
docs/quality.md). ``ClaimJudge`` is the seam for other judges: a local
entailment model or a chat endpoint (``groundkit.verification.judges``).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from groundkit.errors import RetrievalError
from groundkit.lexical.analyzer import Analyzer
from groundkit.utils.text import describe_unencodable

__all__ = [
    "EVIDENCE_SENTENCES",
    "ClaimJudge",
    "ClaimJudgement",
    "ClaimPair",
    "Quantity",
    "RuleClaimJudge",
    "check_claim",
    "direction_cues",
    "is_negated",
    "quantities",
]

ClaimLabel = Literal["entailment", "neutral", "contradiction"]

# How many of a claim's closest cited sentences a judge reads (fitted on the
# training pairs: one misses the rationale that is second closest, three let in
# sentences about something else).
EVIDENCE_SENTENCES = 2


@dataclass(frozen=True)
class ClaimPair:
    """A claim and the evidence sentences it is checked against, best first."""

    claim: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class ClaimJudgement:
    """What a judge found: a label and, for a contradiction, why in a few words."""

    label: ClaimLabel
    reason: str = ""

    @property
    def contradicted(self) -> bool:
        return self.label == "contradiction"


@runtime_checkable
class ClaimJudge(Protocol):
    """Judges claims against their evidence; ``verify_answer`` reports a
    ``contradiction`` as the verdict ``contradicted`` with its ``reason``.

    ``judge`` takes a batch and returns one judgement per pair, in order. It
    must be deterministic for the same input and raise only
    ``groundkit.errors`` types.
    """

    name: str

    async def judge(self, pairs: Sequence[ClaimPair]) -> list[ClaimJudgement]: ...


def check_pairs(pairs: object) -> list[ClaimPair]:
    """``pairs`` as a list of ``ClaimPair``, or a typed error saying what is wrong."""
    if not isinstance(pairs, Sequence) or isinstance(pairs, str | bytes):
        raise RetrievalError(
            f"a claim judge takes a sequence of ClaimPair, not {type(pairs).__name__}"
        )
    out = list(pairs)
    for p in out:
        if not isinstance(p, ClaimPair):
            raise RetrievalError(f"a claim judge takes ClaimPair objects, found {type(p).__name__}")
        if not isinstance(p.claim, str) or not all(isinstance(e, str) for e in p.evidence):
            raise RetrievalError("a ClaimPair holds a str claim and a tuple of str evidence")
        # No UTF-8 for a lone surrogate: a chat judge's request body or a tokenizer
        # would fail on it with their own exception.
        for what, text in (("a claim", p.claim), *(("evidence", e) for e in p.evidence)):
            problem = describe_unencodable(text, what)
            if problem is not None:
                raise RetrievalError(problem)
    return out


# -- words ---------------------------------------------------------------------------


def _words_in_order(text: str) -> list[str]:
    return text.split()


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_TOKEN = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)?|[<>\u2264\u2265~\u2248%\u00b0]")

_NEGATIONS = frozenset(
    {"not", "no", "never", "neither", "nor", "none", "nothing", "nobody", "cannot", "unable"}
)
# Words that state a null or negative result on their own.
_NULL_WORDS = frozenset(
    {"incapable", "unrelated", "ineffective", "unaffected", "unchanged", "nonsignificant"}
)
# "fail to", "failed to": a negated verb.
_FAIL = frozenset({"fail", "fails", "failed", "failing"})
# Negation words that do not negate the statement: "not only", "whether or not",
# "no more than" (a bound), "if not".
_NOT_NEGATION_AFTER = frozenset({"only", "more", "less", "fewer", "later", "earlier"})
# "but not naive cells", "and not from monocytes": a contrast inside the
# statement, not its negation.
_NOT_NEGATION_BEFORE = frozenset({"whether", "if", "but", "and", "or"})
# "is not known", "has not been fully explored": what is unknown, not what is false.
_HEDGES = _words(
    """known clear clearly understood explored established elucidated determined studied
    investigated examined addressed fully yet well"""
)

_UP = _words(
    """increase increases increased increasing rise rises rose risen rising elevate elevates
    elevated elevating raise raises raised raising higher greater more enhance enhances enhanced
    enhancing promote promotes promoted promoting upregulate upregulates upregulated
    upregulation stimulate stimulates stimulated stimulating activate activates activated
    accelerate accelerates accelerated augment augments augmented improve improves improved
    improving improvement positively longer larger faster gain gains gained exacerbate
    exacerbates exacerbated facilitate facilitates facilitated amplify amplifies amplified
    induces induced boost boosts boosted encourage encourages encouraged positive"""
)
_DOWN = _words(
    """decrease decreases decreased decreasing reduce reduces reduced reducing reduction
    reductions decline declines declined declining lower lowers lowered lowering less fewer
    diminish diminishes diminished diminishing downregulate downregulates downregulated
    downregulation inhibit inhibits inhibited inhibiting inhibition suppress suppresses
    suppressed suppressing impede impedes impeded impair impairs impaired impairing attenuate
    attenuates attenuated attenuating decelerate decelerates decelerated worsen worsens
    worsened negatively inversely shorter smaller slower loss lose loses lost block blocks
    blocked blocking prevent prevents prevented preventing repress represses repressed
    deactivate deactivates deactivated inactivate inactivates inactivated negative inverse
    dampen dampens dampened"""
)
# The word a direction word names, in the reason: "increases", "decreases".
_DIRECTION_NAME = {1: "increases", -1: "decreases"}
# Opposed qualities, each pair an axis of its own: (this side, the other side).
_ANTONYMS: tuple[tuple[str, str], ...] = (
    ("effective efficacious", "ineffective"),
    ("accurate", "inaccurate"),
    ("sufficient", "insufficient"),
    ("necessary required essential", "dispensable unnecessary"),
    ("safe", "unsafe"),
    ("beneficial protective", "harmful detrimental deleterious"),
    ("resistant immune", "susceptible hypersensitive vulnerable"),
    ("associated related linked correlated", "unrelated unassociated uncorrelated"),
    ("stable", "unstable"),
    ("capable able", "incapable unable"),
    ("likely", "unlikely"),
    ("common frequent", "rare uncommon infrequent"),
    ("present", "absent"),
    ("significant", "nonsignificant insignificant"),
    ("early earlier", "late later"),
)


def _axes() -> dict[str, tuple[str, int]]:
    """Each direction word's axis and side."""
    out = {w: ("amount", 1) for w in _UP} | {w: ("amount", -1) for w in _DOWN}
    for first, second in _ANTONYMS:
        axis = first.split()[0]
        out |= {w: (axis, 1) for w in first.split()} | {w: (axis, -1) for w in second.split()}
    return out


_AXIS = _axes()


def _tokens(text: str) -> list[str]:
    return [t.casefold().replace("\u2019", "'") for t in _TOKEN.findall(text)]


def _negation_at(tokens: list[str], i: int) -> bool:
    t = tokens[i]
    nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
    prev = tokens[i - 1] if i > 0 else ""
    if t in _NULL_WORDS:
        return True
    if t in _NEGATIONS or t.endswith("n't"):
        if nxt in _NOT_NEGATION_AFTER or prev in _NOT_NEGATION_BEFORE:
            return False
        if t != "no" and any(w in _HEDGES for w in tokens[i + 1 : i + 4]):
            return False
        return not (t == "no" and nxt in {"more", "less"})
    return t in _FAIL and nxt == "to"


def negation_cues(text: str) -> list[str]:
    """The words of ``text`` that negate its statement, in order."""
    tokens = _tokens(text)
    return [tokens[i] for i in range(len(tokens)) if _negation_at(tokens, i)]


def is_negated(text: str) -> bool:
    """Whether ``text`` states something as not so ("does not", "no", "never")."""
    return bool(negation_cues(text))


@dataclass(frozen=True)
class DirectionCue:
    word: str
    axis: str  # "amount" (up or down), or the first word of an antonym pair
    sign: int  # +1 up (or the pair's first side), -1 down (or its second)
    context: frozenset[str]  # the content terms around it


_WINDOW = 4
# Words that are a direction only before a relation: "positive correlation".
_RELATION_ONLY = frozenset({"positive", "negative", "inverse"})
_RELATIONS = _words(
    """correlation correlations association associations relationship relation link
    effect effects impact influence outcome outcomes trend"""
)


def direction_cues(text: str, analyzer: Analyzer | None = None) -> list[DirectionCue]:
    """Each up or down word of ``text`` not under a negation, with the terms near it."""
    analyzer = analyzer or _ANALYZER
    tokens = _tokens(text)
    out: list[DirectionCue] = []
    for i, t in enumerate(tokens):
        if t not in _AXIS:
            continue
        axis, sign = _AXIS[t]
        if t in _RELATION_ONLY and (i + 1 >= len(tokens) or tokens[i + 1] not in _RELATIONS):
            continue  # "HIV-positive", "negative control": not a direction
        if any(_negation_at(tokens, j) for j in range(max(0, i - 3), i)):
            continue  # "did not increase" says no change, not the opposite
        near = tokens[max(0, i - _WINDOW) : i] + tokens[i + 1 : i + 1 + _WINDOW]
        context = frozenset(analyzer.terms(" ".join(w for w in near if w not in _AXIS)))
        out.append(DirectionCue(t, axis, sign, context))
    return out


_ANALYZER = Analyzer()


# -- quantities ----------------------------------------------------------------------

_WORD_NUMBERS = {
    w: float(i)
    for i, w in enumerate(
        _words_in_order(
            "zero one two three four five six seven eight nine ten eleven twelve thirteen "
            "fourteen fifteen sixteen seventeen eighteen nineteen twenty"
        )
    )
} | {"thirty": 30.0, "forty": 40.0, "fifty": 50.0, "sixty": 60.0, "seventy": 70.0}
_SCALES = {"hundred": 1e2, "thousand": 1e3, "million": 1e6, "billion": 1e9}

# Unit spellings, longest first where one is a prefix of another, to one name each.
_UNITS: dict[str, str] = {
    "%": "%",
    "percent": "%",
    "per cent": "%",
    "percentage points": "percentage points",
    "°c": "degrees",
    "° c": "degrees",
    "°f": "degrees F",
    "°": "degrees",
    "degrees celsius": "degrees",
    "degrees centigrade": "degrees",
    "degrees fahrenheit": "degrees F",
    "degrees": "degrees",
    "degree": "degrees",
    "fold": "fold",
    "-fold": "fold",
    "times": "fold",
    "mg": "mg",
    "milligrams": "mg",
    "µg": "µg",
    "μg": "µg",
    "ug": "µg",
    "mcg": "µg",
    "micrograms": "µg",
    "ng": "ng",
    "g": "g",
    "grams": "g",
    "kg": "kg",
    "kilograms": "kg",
    "ml": "ml",
    "millilitres": "ml",
    "milliliters": "ml",
    "l": "l",
    "litres": "l",
    "liters": "l",
    "mmol": "mmol",
    "µmol": "µmol",
    "nmol": "nmol",
    "nm": "nm",
    "mm": "mm",
    "cm": "cm",
    "km": "km",
    "bp": "bp",
    "base pairs": "bp",
    "base-pairs": "bp",
    "kb": "kb",
    "kbp": "kb",
    "mb": "mb",
    "kda": "kDa",
    "years": "years",
    "year": "years",
    "yr": "years",
    "yrs": "years",
    "months": "months",
    "month": "months",
    "weeks": "weeks",
    "week": "weeks",
    "days": "days",
    "day": "days",
    "hours": "hours",
    "hour": "hours",
    "h": "hours",
    "hrs": "hours",
    "minutes": "minutes",
    "minute": "minutes",
    "min": "minutes",
    "seconds": "seconds",
    "second": "seconds",
    "mmhg": "mmHg",
    "mm hg": "mmHg",
    "kcal": "kcal",
    "calories": "kcal",
    "hz": "Hz",
    "khz": "kHz",
    "mhz": "MHz",
    "ghz": "GHz",
    "km/h": "km/h",
    "mph": "mph",
    "metres": "m",
    "meters": "m",
    "m": "m",
    "kw": "kW",
    "w": "W",
    "watts": "W",
    "volts": "V",
    "v": "V",
    "dollars": "dollars",
    "euros": "euros",
}
_UNIT_ALT = "|".join(
    re.escape(u) for u in sorted(_UNITS, key=lambda u: (-len(u), u)) if u not in {"-fold"}
)
_NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+"
_WORDNUM = "|".join(sorted(_WORD_NUMBERS, key=len, reverse=True))
_VALUE = rf"(?:{_NUM}|{_WORDNUM})(?:\s+(?:hundred|thousand|million|billion))?"
_RANGE_TO = r"(?:-|\u2013|\u2014|to)"
_QUANTITY = re.compile(
    rf"(?<![\w.,/-])(?:(?P<between>between)\s+)?"
    rf"(?P<cmp>(?:about|approximately|around|roughly|nearly|almost|some|over|"
    rf"above|more than|greater than|at least|under|below|less than|fewer than|up to|at most|"
    rf"[~\u2248<>\u2264\u2265])\s*)?"
    rf"(?P<lo>-?{_VALUE})"
    rf"(?:\s*(?P<lounit>%|percent|per cent))?"
    # A unit written on both ends of a range ("10 mg to 20 mg", "10 mg-20 mg"): the low
    # end's is taken only before a range's second number, and must be the high end's.
    rf"(?:\s*(?P<lowunit>{_UNIT_ALT})(?=\s*(?:{_RANGE_TO}|(?(between)and|(?!)))\s*-?\.?\d))?"
    # "between 10 and 20 mg" is a range; "10 and 20 mg" two amounts.
    rf"(?:\s*(?:{_RANGE_TO}|(?(between)and|(?!)))\s*(?P<hi>-?{_VALUE}))?"
    rf"(?:\s*(?:-\s*)?(?P<unit>{_UNIT_ALT})(?![\w/]))?",
    re.IGNORECASE,
)
_CONFIDENCE = re.compile(r"\s*(?:CI\b|confidence|credible)", re.IGNORECASE)
_MIDDLE_DOT = re.compile(r"(?<=\d)[\u00b7\u2219](?=\d)")
# MINUS SIGN, SMALL HYPHEN-MINUS, FULLWIDTH HYPHEN-MINUS: read as "-" (one character each).
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\ufe63": "-", "\uff0d": "-"})
_APPROX = frozenset({"about", "approximately", "around", "roughly", "nearly", "almost", "some"})
_APPROX_SYMBOLS = frozenset({"~", "\u2248"})
_LOWER_BOUND = frozenset({"over", "above", "more than", "greater than", "at least", ">", "\u2265"})
_UPPER_BOUND = frozenset(
    {"under", "below", "less than", "fewer than", "up to", "at most", "<", "\u2264"}
)
# Tolerance of a value written "about N".
_APPROX_TOLERANCE = 0.10


@dataclass(frozen=True)
class Quantity:
    """A number (or range) with its unit, as written: ``text`` for the reason."""

    low: float
    high: float
    unit: str
    text: str
    decimals: int = 0
    approximate: bool = False
    bound: Literal["", "lower", "upper"] = ""

    def agrees(self, other: Quantity) -> bool:
        """Whether the two can describe the same amount (same unit assumed)."""
        lo, hi = self._interval()
        olo, ohi = other._interval()
        return lo <= ohi and olo <= hi

    def _interval(self) -> tuple[float, float]:
        lo, hi = self.low, self.high
        if self.low == self.high and not self.bound:
            # A value agrees at the precision it is written with: 50% is [49.5, 50.5).
            half = 0.5 * 10.0 ** (-self.decimals)
            lo, hi = lo - half, hi + half
        if self.approximate:
            spread = _APPROX_TOLERANCE * max(abs(self.low), abs(self.high))
            lo, hi = lo - spread, hi + spread
        if self.bound == "lower":
            hi = math.inf
        elif self.bound == "upper":
            lo = -math.inf
        return lo, hi


def _number(text: str) -> tuple[float, int] | None:
    parts = text.casefold().split()
    head = parts[0].replace(",", "")
    if head in _WORD_NUMBERS:
        value, decimals = _WORD_NUMBERS[head], 0
    else:
        try:
            value = float(head)
        except ValueError:
            return None
        decimals = len(head.split(".")[1]) if "." in head else 0
    if len(parts) > 1 and parts[-1] in _SCALES:
        value *= _SCALES[parts[-1]]
        decimals = 0
    return value, decimals


def _unit_name(unit: str) -> str:
    return _UNITS.get(" ".join(unit.casefold().split()), unit.casefold())


def _quantity(
    text: str, lo_text: str, hi_text: str | None, unit: str, start: int, end: int, cmp: str
) -> Quantity | None:
    """The amount ``text[start:end]`` states, or None when it is no measurement."""
    if _CONFIDENCE.match(text, end):
        return None  # "95% CI": a confidence level, not a measurement
    lo = _number(lo_text)
    hi = _number(hi_text) if hi_text else None
    if lo is None or (hi_text and hi is None):
        return None
    if lo_text.strip().isalpha() and lo_text.casefold() not in _WORD_NUMBERS:
        return None
    low, high = (lo[0], hi[0]) if hi is not None else (lo[0], lo[0])
    if not (math.isfinite(low) and math.isfinite(high)):
        return None  # too many digits for a float: nothing to compare
    if low > high:
        low, high = high, low
    return Quantity(
        low=low,
        high=high,
        unit=_unit_name(unit),
        text=" ".join(text[start:end].split()),
        decimals=max(lo[1], hi[1] if hi is not None else 0),
        approximate=cmp in _APPROX or cmp in _APPROX_SYMBOLS,
        bound="lower" if cmp in _LOWER_BOUND else "upper" if cmp in _UPPER_BOUND else "",
    )


def quantities(text: str) -> list[Quantity]:
    """The numbers of ``text`` that carry a unit, with their ranges and bounds."""
    out: list[Quantity] = []
    # A raised dot between digits is a decimal point ("1\u00b74", as some journals print it).
    text = _MIDDLE_DOT.sub(".", text)
    # Typeset text writes a negative number with the minus sign, not the hyphen-minus.
    text = text.translate(_MINUS_SIGNS)
    for m in _QUANTITY.finditer(text):
        unit = m.group("unit") or m.group("lounit")
        cmp = " ".join((m.group("cmp") or "").casefold().split())
        begin = m.start("cmp") if m.group("cmp") is not None else m.start("lo")
        if m.group("between") is not None and m.group("hi") is not None:
            begin = m.start("between")
        lowunit = m.group("lowunit")
        if lowunit is not None and (unit is None or _unit_name(lowunit) != _unit_name(unit)):
            # "5 days to 2 weeks", "10 mg to 20 patients": two amounts, not a range.
            made = _quantity(text, m.group("lo"), None, lowunit, begin, m.end("lowunit"), cmp)
            out.extend([made] if made is not None else [])
            if unit is not None and m.group("hi") is not None:
                made = _quantity(text, m.group("hi"), None, unit, m.start("hi"), m.end(), "")
                out.extend([made] if made is not None else [])
            continue
        if unit is not None:
            made = _quantity(text, m.group("lo"), m.group("hi"), unit, begin, m.end(), cmp)
            out.extend([made] if made is not None else [])
    for m in _RATIO.finditer(text):
        top = _number(m.group("top"))
        scale = _SCALES.get(m.group("bottom").casefold())
        bottom = (scale, 0) if scale is not None else _number(m.group("bottom"))
        if top is None or bottom is None or bottom[0] == 0:
            continue
        value = top[0] / bottom[0]
        out.append(Quantity(value, value, "ratio", " ".join(m.group(0).split()), 12))
    return out


# "one in five", "493 per million": a proportion, compared as a fraction.
_RATIO = re.compile(
    rf"(?<![\w.,/-])(?P<top>{_VALUE})\s+(?:in|out\s+of|per)\s+"
    rf"(?P<bottom>{_VALUE}|hundred|thousand|million|billion)(?!\w|[.,]\d)",
    re.IGNORECASE,
)


# -- the check -----------------------------------------------------------------------


# Units that measure one thing on different scales: each to that measure's base unit
# (increasing, so an interval's ends convert to the converted interval's ends).
_SCALE_OF: dict[str, tuple[str, Callable[[float], float]]] = {
    "degrees": ("temperature", lambda v: v),
    "degrees F": ("temperature", lambda v: (v - 32.0) * 5.0 / 9.0),
    "ng": ("mass", lambda v: v * 1e-9),
    "µg": ("mass", lambda v: v * 1e-6),
    "mg": ("mass", lambda v: v * 1e-3),
    "g": ("mass", lambda v: v),
    "kg": ("mass", lambda v: v * 1e3),
    "ml": ("volume", lambda v: v * 1e-3),
    "l": ("volume", lambda v: v),
    "nm": ("length", lambda v: v * 1e-9),
    "mm": ("length", lambda v: v * 1e-3),
    "cm": ("length", lambda v: v * 1e-2),
    "m": ("length", lambda v: v),
    "km": ("length", lambda v: v * 1e3),
    "bp": ("sequence length", lambda v: v),
    "kb": ("sequence length", lambda v: v * 1e3),
    "mb": ("sequence length", lambda v: v * 1e6),
}


def _converted(q: Quantity) -> tuple[str, float, float] | None:
    """``q``'s interval in its measure's base unit, or None for a unit without one."""
    scale = _SCALE_OF.get(q.unit)
    if scale is None:
        return None
    measure, to_base = scale
    lo, hi = q._interval()
    return measure, to_base(lo), to_base(hi)


def _quantity_conflict(claim: str, evidence: Sequence[str]) -> str | None:
    """A claim quantity whose unit the evidence measures at no agreeing value, or whose
    measure the evidence gives in another unit at no agreeing amount ("230 degrees
    Fahrenheit" against "230 degrees Celsius")."""
    found = [q for sentence in evidence for q in quantities(sentence)]
    for q in quantities(claim):
        same = [e for e in found if e.unit == q.unit]
        if same:
            if not any(q.agrees(e) for e in same):
                return f"claim {q.text}, source {same[0].text}"
            continue
        ours = _converted(q)
        if ours is None:
            continue
        other = [(e, c) for e in found if (c := _converted(e)) is not None and c[0] == ours[0]]
        if other and not any(ours[1] <= c[2] and c[1] <= ours[2] for _, c in other):
            return f"claim {q.text}, source {other[0][0].text}"
    return None


def _direction_conflict(claim: str, evidence: Sequence[str], analyzer: Analyzer) -> str | None:
    """An up (down) word of the claim met by a down (up) word on the same terms."""
    ours = direction_cues(claim, analyzer)
    theirs = [c for sentence in evidence for c in direction_cues(sentence, analyzer)]
    # A word both say the same way sets the scene ("longer extraction ..."), it is not
    # what the claim asserts: left out on both sides, so what remains can be compared.
    shared = {(c.word, c.sign) for c in ours} & {(c.word, c.sign) for c in theirs}
    if shared and len({c.sign for c in ours if c.axis == "amount"}) > 1:
        ours = [c for c in ours if (c.word, c.sign) not in shared]
        theirs = [c for c in theirs if (c.word, c.sign) not in shared]
    for axis in dict.fromkeys(c.axis for c in ours):
        on_axis = [c for c in ours if c.axis == axis]
        signs = {c.sign for c in on_axis}
        if len(signs) != 1:
            continue  # both ways: nothing single to compare
        sign = signs.pop()
        topic = frozenset().union(*(c.context for c in on_axis))
        about = [c for c in theirs if c.axis == axis and c.context & topic]
        if not about or any(c.sign == sign for c in about):
            continue
        if axis == "amount":
            return (
                f"claim {_DIRECTION_NAME[sign]} ({on_axis[0].word}), "
                f"source {_DIRECTION_NAME[-sign]} ({about[0].word})"
            )
        return f"claim {on_axis[0].word}, source {about[0].word}"
    return None


def _negation_conflict(claim: str, evidence: Sequence[str]) -> str | None:
    """A negated claim none of whose evidence is negated, or a plain claim whose
    best evidence sentence is negated where it speaks of the claim.

    Asymmetric on purpose (fitted on the training pairs): a negated claim is
    agreed with by any negated evidence sentence, while a plain claim is only
    contradicted by a negation in the clause of the closest sentence that shares
    the most of its terms, since other clauses and sentences often negate
    something else ("no association with 8 of 10 cancers; ... was associated").
    """
    claim_cues = negation_cues(claim)
    if claim_cues:
        if not any(is_negated(sentence) for sentence in evidence):
            return f"claim negated ({claim_cues[0]}), source not"
        return None
    best = _cues_in_clause(claim, evidence[0])
    if best:
        return f"source negated ({best[0]}), claim not"
    return None


_CLAUSE_BREAK = re.compile(
    r"[;:]|,\s*(?=(?:but|whereas|while|although|though|yet|however)\b)|,", re.IGNORECASE
)


def _clause_about(claim: str, sentence: str) -> tuple[int, int]:
    """Where in ``sentence`` the clause sharing the most terms with ``claim`` is (first
    on ties)."""
    parts: list[tuple[int, int]] = []
    at = 0
    for cut in [*_CLAUSE_BREAK.finditer(sentence), None]:
        end = len(sentence) if cut is None else cut.start()
        if sentence[at:end].strip():
            parts.append((at, end))
        at = len(sentence) if cut is None else cut.end()
    if len(parts) < 2:
        return 0, len(sentence)
    wanted = set(_ANALYZER.terms(claim))
    return max(parts, key=lambda p: len(wanted.intersection(_ANALYZER.terms(sentence[slice(*p)]))))


def _cues_in_clause(claim: str, sentence: str) -> list[str]:
    """The negation cues of ``sentence`` inside its clause about ``claim``, each read in
    the whole sentence: cut out on its own, "never" in "but, never" lost the "but" that
    makes it no negation, and a claim read as its own evidence contradicted itself."""
    start, end = _clause_about(claim, sentence)
    found = list(_TOKEN.finditer(sentence))
    tokens = [t.group(0).casefold().replace("\u2019", "'") for t in found]
    return [
        tokens[i]
        for i, t in enumerate(found)
        if start <= t.start() < end and _negation_at(tokens, i)
    ]


def check_claim(
    claim: str, evidence: Sequence[str], *, analyzer: Analyzer | None = None
) -> str | None:
    """Why ``claim`` contradicts ``evidence`` (best sentence first), or None."""
    if not evidence:
        return None
    analyzer = analyzer or _ANALYZER
    return (
        _quantity_conflict(claim, evidence)
        or _negation_conflict(claim, evidence)
        or _direction_conflict(claim, evidence, analyzer)
    )


# Up to this many characters of text, the pure-Python checks (rules here, an answer's
# scanning in ``answers``) run on the event loop: less work than handing them to a thread.
INLINE_CHARS = 4_000


class RuleClaimJudge:
    """The default ``ClaimJudge``: quantities, negation and direction words.

    Never says ``entailment``: these cues can show a disagreement, not an
    agreement. Pure Python, no model, the same answer on every run.
    """

    name = "rules"

    def __init__(self, analyzer: Analyzer | None = None) -> None:
        self._analyzer = analyzer or _ANALYZER

    async def judge(self, pairs: Sequence[ClaimPair]) -> list[ClaimJudgement]:
        checked = check_pairs(pairs)
        # Pure-Python work on every pair: past a few thousand characters it runs in a
        # worker thread, so the event loop (a server's other requests) is not held.
        size = sum(len(p.claim) + sum(map(len, p.evidence)) for p in checked)
        if size > INLINE_CHARS:
            return await asyncio.to_thread(self._judge_all, checked)
        return self._judge_all(checked)

    def _judge_all(self, pairs: Sequence[ClaimPair]) -> list[ClaimJudgement]:
        out: list[ClaimJudgement] = []
        for p in pairs:
            reason = check_claim(p.claim, p.evidence, analyzer=self._analyzer)
            if reason is None:
                out.append(ClaimJudgement("neutral"))
            else:
                out.append(ClaimJudgement("contradiction", reason))
        return out
