"""Searching a collection and proving where each result came from.

The retriever, fusion and ordering helpers, rerankers, query rewriters and the
search over several collections. Each name here is imported from its module on
first use. Retrieval never imports ``groundkit.verification``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from groundkit.utils.lazy import lazy_names as _lazy_names

if TYPE_CHECKING:
    from groundkit.retrieval.diversity import lost_in_the_middle, mmr_order
    from groundkit.retrieval.evidence import load_evidence
    from groundkit.retrieval.filters import FILTER_OPERATORS
    from groundkit.retrieval.fusion import FusedHit, convex_combination, reciprocal_rank_fusion
    from groundkit.retrieval.multi import search_collections
    from groundkit.retrieval.relevance import BUILT_IN_CALIBRATIONS, fit_relevance
    from groundkit.retrieval.request import SearchRequest
    from groundkit.retrieval.rerank import CrossEncoderReranker, RerankerProtocol
    from groundkit.retrieval.rewriting import GlossaryRewriter, QueryRewriterProtocol
    from groundkit.retrieval.search import Retriever

# The public names each module defines; imported on first use.
__getattr__, __dir__ = _lazy_names(
    __name__,
    globals(),
    {
        "groundkit.retrieval.diversity": ("lost_in_the_middle", "mmr_order"),
        "groundkit.retrieval.evidence": ("load_evidence",),
        "groundkit.retrieval.filters": ("FILTER_OPERATORS",),
        "groundkit.retrieval.fusion": ("FusedHit", "convex_combination", "reciprocal_rank_fusion"),
        "groundkit.retrieval.multi": ("search_collections",),
        "groundkit.retrieval.relevance": ("BUILT_IN_CALIBRATIONS", "fit_relevance"),
        "groundkit.retrieval.request": ("SearchRequest",),
        "groundkit.retrieval.rerank": ("CrossEncoderReranker", "RerankerProtocol"),
        "groundkit.retrieval.rewriting": ("GlossaryRewriter", "QueryRewriterProtocol"),
        "groundkit.retrieval.search": ("Retriever",),
    },
)

__all__ = [
    "BUILT_IN_CALIBRATIONS",
    "FILTER_OPERATORS",
    "CrossEncoderReranker",
    "FusedHit",
    "GlossaryRewriter",
    "QueryRewriterProtocol",
    "RerankerProtocol",
    "Retriever",
    "SearchRequest",
    "convex_combination",
    "fit_relevance",
    "load_evidence",
    "lost_in_the_middle",
    "mmr_order",
    "reciprocal_rank_fusion",
    "search_collections",
]
