"""Citation recall and precision of a checked answer, counted the way ALCE counts them.

ALCE (Gao et al. 2023, "Enabling Large Language Models to Generate Text with
Citations"; princeton-nlp/ALCE ``eval.py``) judges each statement of an answer
against the concatenation of the passages it cites:

- recall: the share of statements their cited passages support. A statement
  with no citation, or one naming no passage, counts as unsupported;
- precision: the share of citations that are relevant. Every citation of a
  statement counts (statements naming a missing passage excepted); one of an
  unsupported statement is never relevant; one of a supported statement is
  irrelevant when its passage alone does not support the statement and the
  other citations still do without it.

The support judgement here is the answer check's own (``answers.py``): a
sentence is supported when its verdict is ``quoted`` or ``supported``, and a
subset of its citations supports it when the same check, run as if the
sentence cited only that subset, says so. Where groundkit departs from the
script: sentences the check reads as ``no_claim`` are not statements;
a result cited twice in one sentence (or the same passage given as two results)
counts once; a sentence's first 20 distinct citations are weighed (the script
keeps the first three by default), any more count and are never relevant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from groundkit.contracts import AnswerSentence

__all__ = [
    "SUPPORTING",
    "citation_scores",
    "first_relevance",
    "relevance",
    "relevance_of",
    "subsets_to_judge",
]

# The verdicts that mean "the cited passages support this sentence".
SUPPORTING: frozenset[str] = frozenset({"quoted", "supported"})
# Sentences whose citations precision does not count: none, or one naming nothing.
_UNCOUNTED: frozenset[str] = frozenset({"no_claim", "uncited", "dangling"})


def subsets_to_judge(usable: Sequence[int]) -> list[tuple[int, ...]]:
    """The citation subsets precision needs judged for a sentence whose intact cited
    results are ``usable`` (in marker order): each alone, and the rest without each.
    None for a single citation: it alone is the whole set, already judged."""
    if len(usable) < 2:
        return []
    wanted = [(u,) for u in usable] + [tuple(v for v in usable if v != u) for u in usable]
    return list(dict.fromkeys(wanted))


def first_relevance(verdict: str, count: int) -> list[bool]:
    """``relevance`` of a sentence with ``count`` distinct citations as far as its
    verdict settles it: final unless it is supported with several citations, whose
    subsets ``relevance`` must weigh."""
    if verdict in _UNCOUNTED:
        return []
    return [verdict in SUPPORTING] * count


def relevance(
    verdict: str,
    cited: Sequence[int],
    usable: Sequence[int],
    supports: Mapping[tuple[int, ...], bool],
) -> list[bool]:
    """Per result in ``cited``, whether ALCE counts it relevant; ``[]`` where the
    sentence's citations are not counted. ``supports`` holds the verdict of each
    subset ``subsets_to_judge(usable)`` named (True: the subset supports)."""
    if verdict not in SUPPORTING or len(cited) < 2:
        return first_relevance(verdict, len(cited))
    whole = tuple(usable)
    alone = {u: (u,) == whole or supports[(u,)] for u in whole}
    rest = {u: tuple(v for v in whole if v != u) for u in whole}
    without = {u: bool(r) and (r == whole or supports[r]) for u, r in rest.items()}
    return relevance_of(verdict, cited, usable, alone, without)


def relevance_of(
    verdict: str,
    cited: Sequence[int],
    usable: Sequence[int],
    alone: Mapping[int, bool],
    without: Mapping[int, bool],
) -> list[bool]:
    """``relevance`` from each usable result's two subsets: whether it ``alone``
    supports the sentence, and whether the others do ``without`` it. Linear in the
    citations, where keys of whole subsets cost their length each."""
    if verdict not in SUPPORTING or len(cited) < 2:
        return first_relevance(verdict, len(cited))
    held = set(usable)
    # A result the sentence cites that is not usable (its span drifted) takes nothing away.
    return [(c in held and alone[c]) or not (without[c] if c in held else True) for c in cited]


def citation_scores(sentences: Sequence[AnswerSentence]) -> tuple[float | None, float | None]:
    """``(recall, precision)`` over the answer's sentences (their ``relevant`` filled
    in); None for recall without a statement, for precision without a counted citation."""
    statements = [s for s in sentences if s.verdict != "no_claim"]
    recall = (
        sum(s.verdict in SUPPORTING for s in statements) / len(statements) if statements else None
    )
    counted = sum(len(s.relevant) for s in statements)
    precision = sum(sum(s.relevant) for s in statements) / counted if counted else None
    return recall, precision
