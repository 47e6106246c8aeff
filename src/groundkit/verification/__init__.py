"""Verification: citations, quotes and answers checked against their sources.

The stage between retrieval and the surfaces. ``sources`` reads a source back the way
it was ingested, ``anchoring`` finds indexed text again in an edited source,
``verdict.judge`` decides verified / moved / drifted / unresolvable, and ``quotes``,
``markers``, ``answers`` and ``providers`` build on it; ``verifier.Verifier`` is what a
collection checks through. Retrieval never imports this package. Each name here is
imported from its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from groundkit.utils.lazy import lazy_names as _lazy_names

if TYPE_CHECKING:
    from groundkit.utils.sentences import sentence_spans
    from groundkit.verification.answers import verify_answer
    from groundkit.verification.claims import ClaimJudge, ClaimJudgement, ClaimPair, RuleClaimJudge
    from groundkit.verification.judges import ChatClaimJudge, EntailmentModelJudge
    from groundkit.verification.providers import (
        chunk_uri,
        from_anthropic_citations,
        from_openai_annotations,
        to_anthropic_documents,
        to_anthropic_search_results,
    )
    from groundkit.verification.quotes import check_quote
    from groundkit.verification.receipts import (
        Receipt,
        check_receipts,
        read_receipts,
        write_receipts,
    )
    from groundkit.verification.sources import resolve_citation
    from groundkit.verification.verdict import check_citation
    from groundkit.verification.verifier import VerifyReport

# The public names each module defines; imported on first use.
__getattr__, __dir__ = _lazy_names(
    __name__,
    globals(),
    {
        "groundkit.utils.sentences": ("sentence_spans",),
        "groundkit.verification.answers": ("verify_answer",),
        "groundkit.verification.claims": (
            "ClaimJudge",
            "ClaimJudgement",
            "ClaimPair",
            "RuleClaimJudge",
        ),
        "groundkit.verification.judges": ("ChatClaimJudge", "EntailmentModelJudge"),
        "groundkit.verification.providers": (
            "chunk_uri",
            "from_anthropic_citations",
            "from_openai_annotations",
            "to_anthropic_documents",
            "to_anthropic_search_results",
        ),
        "groundkit.verification.quotes": ("check_quote",),
        "groundkit.verification.receipts": (
            "Receipt",
            "check_receipts",
            "read_receipts",
            "write_receipts",
        ),
        "groundkit.verification.sources": ("resolve_citation",),
        "groundkit.verification.verdict": ("check_citation",),
        "groundkit.verification.verifier": ("VerifyReport",),
    },
)

__all__ = [
    "ChatClaimJudge",
    "ClaimJudge",
    "ClaimJudgement",
    "ClaimPair",
    "EntailmentModelJudge",
    "Receipt",
    "RuleClaimJudge",
    "VerifyReport",
    "check_citation",
    "check_quote",
    "check_receipts",
    "chunk_uri",
    "from_anthropic_citations",
    "from_openai_annotations",
    "read_receipts",
    "resolve_citation",
    "sentence_spans",
    "to_anthropic_documents",
    "to_anthropic_search_results",
    "verify_answer",
    "write_receipts",
]
