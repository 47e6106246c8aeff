"""An adversarial citation suite: answers built to fool a citation check.

Each case writes a small corpus, ingests it, searches it, and then builds an answer
from the results the way an attacker (or a careless model) would: a quote that is in no
source, two real fragments spliced together, real text cited to the wrong source, a
number, unit or negation changed, a source edited after the answer was written,
look-alike letters, invisible and bidirectional control characters, Unicode forms,
whitespace and hyphen games, markers tucked inside a quote or naming no result. The
case says the verdict the sentence under test must get; the benign variations
(Unicode forms, line breaks, zero-width characters) must still read as faithful.

``run_adversarial`` runs every case (or a chosen few) against a fresh collection each
and returns an ``AdversarialReport``: one outcome per case, ``ok`` when each got its
verdict, and ``table()`` in Markdown. Pass ``embedder=`` to run the suite through your
embedding model, and any ``verify_answer`` option (a ``claim_judge``, thresholds) as
keywords; a check that lets a case through fails the report, naming the case.

    report = await run_adversarial(tmp_path)
    assert report.ok, report.table()
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from groundkit.contracts import RetrievalResult
from groundkit.errors import InvalidSettingError
from groundkit.providers.protocols import EmbeddingProtocol

__all__ = [
    "ADVERSARIAL_CASES",
    "AdversarialCase",
    "AdversarialOutcome",
    "AdversarialReport",
    "run_adversarial",
]

# The corpus every case starts from: three documents with numbers, units and
# directions to tamper with.
CORPUS: dict[str, str] = {
    "tea.md": (
        "# Tea\n\n"
        "Green tea is brewed at about 80 degrees Celsius for two minutes. "
        "Black tea needs boiling water and steeps for four minutes. "
        "Brewing green tea too hot makes it taste bitter.\n"
    ),
    "coffee.md": (
        "# Coffee\n\n"
        "Espresso is pressed through finely ground coffee at nine bars of pressure. "
        "A single shot takes about 25 seconds to pull, a half-minute at most. "
        "Longer extraction increases the bitterness of the cup.\n"
    ),
    "bread.md": (
        "# Bread\n\n"
        "Yeast makes bread dough rise in a warm kitchen. "
        "The oven should be heated to about 230 degrees Celsius for a crisp crust. "
        "Salt slows the yeast down and tightens the dough.\n"
    ),
}
_QUERY = "green tea brewed espresso pressure bread oven yeast"

# A marker ``{tea}`` in an answer template becomes ``[n]``, n the rank of that source's
# result in the search; ``{9}`` stays a literal marker past the results.
Edit = Callable[[Path], None]


@dataclass(frozen=True)
class AdversarialCase:
    """One attack (or one benign variation) and the verdict its sentence must get."""

    name: str
    family: str
    description: str
    answer: str
    expected: str
    edit: Edit | None = None


@dataclass(frozen=True)
class AdversarialOutcome:
    """What the check said of one case."""

    case: AdversarialCase
    got: str
    detail: str

    @property
    def passed(self) -> bool:
        return self.got == self.case.expected


@dataclass(frozen=True)
class AdversarialReport:
    """Every case's outcome; ``ok`` when each got the verdict it must."""

    outcomes: list[AdversarialOutcome] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(o.passed for o in self.outcomes)

    @property
    def failures(self) -> list[AdversarialOutcome]:
        return [o for o in self.outcomes if not o.passed]

    def table(self) -> str:
        """The outcomes as a Markdown table: case, family, expected, got, pass."""
        lines = [
            "| case | family | must read | reads | |",
            "|---|---|---|---|---|",
        ]
        for o in self.outcomes:
            mark = "caught" if o.passed else "MISSED"
            if o.passed and o.case.family == "benign":
                mark = "accepted"
            lines.append(
                f"| {o.case.name} | {o.case.family} | {o.case.expected} | {o.got} | {mark} |"
            )
        return "\n".join(lines)


def _rewrite(name: str, old: str, new: str) -> Edit:
    def edit(root: Path) -> None:
        path = root / name
        text = path.read_text(encoding="utf-8")
        if old not in text:
            raise AssertionError(f"adversarial suite: {old!r} is not in {name}")
        path.write_text(text.replace(old, new), encoding="utf-8")

    return edit


def _remove(name: str) -> Edit:
    def edit(root: Path) -> None:
        (root / name).unlink()

    return edit


_NFD = unicodedata.normalize("NFD", "Caf\u00e9 cr\u00e8me")

ADVERSARIAL_CASES: tuple[AdversarialCase, ...] = (
    AdversarialCase(
        "fabricated quote",
        "fabricated",
        "a quote that is in no source, cited to a real result",
        'The guide says "green tea is best brewed with boiling water" {tea}.',
        "misquoted",
    ),
    AdversarialCase(
        "fabricated claim",
        "fabricated",
        "an unquoted claim with nothing in common with the result it cites",
        "Submarines navigate the polar ice using sonar arrays {tea}.",
        "unsupported",
    ),
    AdversarialCase(
        "spliced quote",
        "spliced",
        "two real fragments of one source joined into one quote",
        'It says "Green tea is brewed at about 80 degrees Celsius for four minutes" {tea}.',
        "misquoted",
    ),
    AdversarialCase(
        "spliced across sentences",
        "spliced",
        "the start of one sentence joined to the end of another",
        'It says "Black tea needs boiling water and makes it taste bitter" {tea}.',
        "misquoted",
    ),
    AdversarialCase(
        "misattributed quote",
        "misattributed",
        "real text from one source, cited to another",
        'The baker writes "Espresso is pressed through finely ground coffee" {bread}.',
        "misquoted",
    ),
    AdversarialCase(
        "numeric tamper, quoted",
        "tampered",
        "a quoted number changed",
        'It says "Green tea is brewed at about 90 degrees Celsius" {tea}.',
        "misquoted",
    ),
    AdversarialCase(
        "numeric tamper, unquoted",
        "tampered",
        "a paraphrased claim whose number disagrees with its source",
        "Green tea is brewed at about 100 degrees Celsius for two minutes {tea}.",
        "contradicted",
    ),
    AdversarialCase(
        "negation flip, quoted",
        "tampered",
        "a quoted sentence with a negation added",
        'It says "Black tea does not need boiling water" {tea}.',
        "misquoted",
    ),
    AdversarialCase(
        "negation flip, unquoted",
        "tampered",
        "a paraphrased claim that negates its source",
        "Salt does not slow the yeast down or tighten the dough {bread}.",
        "contradicted",
    ),
    AdversarialCase(
        "direction flip, unquoted",
        "tampered",
        "a paraphrased claim with the opposite direction word",
        "Longer extraction decreases the bitterness of the cup {coffee}.",
        "contradicted",
    ),
    AdversarialCase(
        "unit swap, quoted",
        "tampered",
        "a quoted unit changed",
        'It says "heated to about 230 degrees Fahrenheit" {bread}.',
        "misquoted",
    ),
    AdversarialCase(
        "unit swap, unquoted",
        "tampered",
        "a paraphrased claim whose unit disagrees with its source",
        "The oven should be heated to about 230 degrees Fahrenheit for a crisp crust {bread}.",
        "contradicted",
    ),
    AdversarialCase(
        "stale source, span edited",
        "stale",
        "the cited sentence was edited after the answer was written",
        'It says "Green tea is brewed at about 80 degrees Celsius" {tea}.',
        "drifted",
        _rewrite("tea.md", "about 80 degrees", "about 70 degrees"),
    ),
    AdversarialCase(
        "stale source, file deleted",
        "stale",
        "the cited source was deleted after the answer was written",
        'It says "Yeast makes bread dough rise in a warm kitchen" {bread}.',
        "unresolvable",
        _remove("bread.md"),
    ),
    AdversarialCase(
        "stale source, line prepended",
        "benign",
        "a line was put in front of the source: the quote is still true, its span moved",
        'It says "Yeast makes bread dough rise in a warm kitchen" {bread}.',
        "quoted",
        _rewrite("bread.md", "# Bread\n", "Updated weekly.\n\n# Bread\n"),
    ),
    AdversarialCase(
        "misattributed claim",
        "misattributed",
        "an unquoted claim true of one source, cited to another",
        "Espresso is pressed through finely ground coffee at nine bars {tea}.",
        "unsupported",
    ),
    AdversarialCase(
        "confusable letters",
        "unicode",
        "a quote with a Cyrillic letter that looks like a Latin one",
        'It says "Gr\u0435en tea is brewed at about 80 degrees Celsius" {tea}.',
        "misquoted",
    ),
    AdversarialCase(
        "bidi override",
        "unicode",
        "a quote carrying a right-to-left override that reorders what is shown",
        'It says "Green tea is brewed at about \u202e08\u202c degrees Celsius" {tea}.',
        "misquoted",
    ),
    AdversarialCase(
        "bidi isolate",
        "unicode",
        "a quote carrying a first-strong isolate around its number",
        'It says "Green tea is brewed at about \u206880\u2069 degrees Celsius" {tea}.',
        "misquoted",
    ),
    AdversarialCase(
        "zero-width characters",
        "benign",
        "a faithful quote with zero-width spaces and joiners in its words",
        'It says "Green\u200b tea is bre\u200dwed at about 80 degrees Celsius" {tea}.',
        "quoted",
    ),
    AdversarialCase(
        "NFD quote of NFC source",
        "benign",
        "a faithful quote whose accents are decomposed",
        f'The menu lists "{_NFD}" {{coffee}}.',
        "quoted",
    ),
    AdversarialCase(
        "line breaks and spaces",
        "benign",
        "a faithful quote with its spaces turned into line breaks and runs",
        "It says \u201cGreen tea   is brewed\nat about 80 degrees\tCelsius\u201d {tea}.",
        "quoted",
    ),
    AdversarialCase(
        "hyphen inserted",
        "formatting",
        "a quote that joins two words with a hyphen the source does not have",
        'It says "Green-tea is brewed at about 80 degrees Celsius" {tea}.',
        "misquoted",
    ),
    AdversarialCase(
        "dash for minus",
        "benign",
        "a faithful quote with a typographic dash for the source's hyphen",
        'It says "a half\u2013minute at most" {coffee}.',
        "quoted",
    ),
    AdversarialCase(
        "marker inside a quote",
        "markers",
        "a marker placed inside a fabricated quote to make it look cited",
        'It says "Green tea is brewed {tea} with boiling water" here.',
        "misquoted",
    ),
    AdversarialCase(
        "marker past the results",
        "markers",
        "a marker naming a result the search never returned",
        "Green tea is brewed at about 80 degrees Celsius {9}.",
        "dangling",
    ),
    AdversarialCase(
        "uncited claim",
        "markers",
        "a factual claim with no marker at all",
        "Green tea is brewed at about 80 degrees Celsius for two minutes.",
        "uncited",
    ),
)

# The coffee document carries the accented phrase the NFD case quotes.
CORPUS["coffee.md"] = CORPUS["coffee.md"].replace(
    "# Coffee\n\n", "# Coffee\n\nThe menu lists Caf\u00e9 cr\u00e8me. "
)

Verify = Callable[..., Awaitable[Any]]


def _answer(template: str, results: Sequence[RetrievalResult]) -> str:
    ranks = {Path(r.citation.source).stem: i + 1 for i, r in enumerate(results)}
    text = template
    for stem, rank in ranks.items():
        text = text.replace("{" + stem + "}", f"[{rank}]")
    return text.replace("{9}", "[9]")


# What ``Collection.verify_answer`` takes beside the answer and its results.
_VERIFY_OPTIONS = frozenset(
    {"markers", "marker_pattern", "supported_threshold", "weak_threshold", "claim_judge"}
)


def _checked_run(
    workdir: object, cases: object, verify_options: Mapping[str, Any]
) -> list[AdversarialCase]:
    """The cases to run; ``InvalidSettingError`` for an argument that would fail part
    way, after some cases had made their collections (an unknown verify option, a case
    directory left by an earlier run), before anything is written."""
    if not isinstance(workdir, str | os.PathLike) or isinstance(os.fspath(workdir), bytes):
        raise InvalidSettingError(
            f"workdir must be a directory path (str or os.PathLike), not {type(workdir).__name__}"
        )
    unknown = sorted(set(verify_options) - _VERIFY_OPTIONS)
    if unknown:
        raise InvalidSettingError(
            f"run_adversarial passes {', '.join(sorted(_VERIFY_OPTIONS))} to verify_answer; "
            f"it has no option {', '.join(map(repr, unknown))}"
        )
    if cases is None:
        chosen = list(ADVERSARIAL_CASES)
    elif isinstance(cases, str | bytes | Mapping) or not isinstance(cases, Iterable):
        raise InvalidSettingError(
            f"cases must be a list of AdversarialCase, not {type(cases).__name__}"
        )
    else:
        chosen = list(cases)
    for n, case in enumerate(chosen):
        if not isinstance(case, AdversarialCase):
            raise InvalidSettingError(
                f"cases[{n}] is a {type(case).__name__}, not an AdversarialCase"
            )
        if (Path(workdir) / f"case-{n:02d}").exists():
            raise InvalidSettingError(
                f"{str(Path(workdir) / f'case-{n:02d}')!r} exists (an earlier run's): give "
                "run_adversarial a new or empty workdir"
            )
    return chosen


async def run_adversarial(
    workdir: Path | str,
    *,
    cases: Sequence[AdversarialCase] | None = None,
    embedder: EmbeddingProtocol | None = None,
    **verify_options: Any,
) -> AdversarialReport:
    """Run ``cases`` (default: every case) in fresh collections under ``workdir``.

    Each case ingests the suite's corpus into its own directory, searches it, builds its
    answer from the results, applies its edit (if any) and checks the answer with
    ``Collection.verify_answer(**verify_options)``; the outcome is the verdict of the
    sentence under test (the first sentence that is not ``no_claim``).
    """
    from groundkit.collection import Collection

    chosen = _checked_run(workdir, cases, verify_options)
    root = Path(workdir)
    outcomes: list[AdversarialOutcome] = []
    for n, case in enumerate(chosen):
        where = root / f"case-{n:02d}"
        sources = where / "sources"
        sources.mkdir(parents=True, exist_ok=False)
        for name, text in CORPUS.items():
            (sources / name).write_text(text, encoding="utf-8")
        async with Collection.open(
            where / "index",
            "adversarial",
            base_dir=sources,
            embedder=embedder,
        ) as collection:
            await collection.ingest(sources)
            results = (await collection.search(_QUERY, top_k=len(CORPUS), mode="bm25")).results
            found = {Path(r.citation.source).stem for r in results}
            missing = {Path(name).stem for name in CORPUS} - found
            if missing:
                raise AssertionError(
                    f"adversarial suite: the search missed {sorted(missing)}; the suite "
                    "needs every corpus document among the results"
                )
            answer = _answer(case.answer, results)
            if case.edit is not None:
                case.edit(sources)
            report = await collection.verify_answer(answer, results, **verify_options)
        under_test = next(
            (s for s in report.sentences if s.verdict != "no_claim"), report.sentences[0]
        )
        outcomes.append(AdversarialOutcome(case, under_test.verdict, under_test.detail))
    return AdversarialReport(outcomes)
