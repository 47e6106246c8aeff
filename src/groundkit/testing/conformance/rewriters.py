"""A conformance suite any ``QueryRewriterProtocol`` implementation must pass.

Subclass it with a ``Test*`` class that provides a ``rewriter_factory`` fixture
returning a zero-argument callable that builds a fresh, identically configured
rewriter, and optionally ``sample_queries`` returning queries it actually
rewrites (the defaults are generic)::

    class TestMyRewriter(RewriterConformance):
        @pytest.fixture
        def rewriter_factory(self):
            return lambda: MyRewriter(...)

        def sample_queries(self):
            return ["heart attack symptoms", "MI treatment"]

A rewriter's output is searched next to the query and its ``identity`` is shown
in response metadata, so the suite pins what makes that safe: a list of
non-empty strings that never repeats the query, the same on every call and on
every fresh instance, and an identity that does not drift.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from groundkit.retrieval.rewriting import QueryRewriterProtocol

__all__ = ["DEFAULT_QUERIES", "NO_MATCH_QUERY", "UNICODE_QUERIES", "RewriterConformance"]

Factory = Callable[[], QueryRewriterProtocol]

DEFAULT_QUERIES = (
    "heart attack symptoms",
    "How do I reset my password?",
    "MI treatment guidelines",
    "what is the capital of France",
    "  leading and trailing spaces  ",
)
# Nothing a reasonable rewriter keys on; it must still answer with a list.
NO_MATCH_QUERY = "zqxj vvkp 0193"
UNICODE_QUERIES = (
    "Gezeiten – tidal 🌊",
    "Straße ÉCOLE naïve café",
    "東京 の 天気",
    "مرحبا بالعالم",
    "e\u0301 combining",
)


def _same(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


class RewriterConformance:
    """Behaviour shared by every query rewriter."""

    def sample_queries(self) -> Sequence[str]:
        """Queries to exercise; override with ones the rewriter really rewrites."""
        return DEFAULT_QUERIES

    @pytest.fixture
    def rewriter(self, rewriter_factory: Factory) -> QueryRewriterProtocol:
        """One instance from the implementer's factory."""
        return rewriter_factory()

    def _all_queries(self) -> list[str]:
        return [*self.sample_queries(), NO_MATCH_QUERY, *UNICODE_QUERIES]

    async def test_satisfies_the_protocol(self, rewriter: QueryRewriterProtocol) -> None:
        assert isinstance(rewriter, QueryRewriterProtocol)

    async def test_returns_a_list_of_strings(self, rewriter: QueryRewriterProtocol) -> None:
        for query in self._all_queries():
            got = await rewriter.rewrite(query)
            assert isinstance(got, list), (query, got)
            assert all(isinstance(v, str) for v in got), (query, got)

    async def test_never_returns_the_query_itself(self, rewriter: QueryRewriterProtocol) -> None:
        for query in self._all_queries():
            got = await rewriter.rewrite(query)
            assert not any(v.casefold() == query.casefold() for v in got), (query, got)
            assert not any(_same(v, query) for v in got), (query, got)

    async def test_no_empty_strings(self, rewriter: QueryRewriterProtocol) -> None:
        for query in self._all_queries():
            got = await rewriter.rewrite(query)
            assert all(v.strip() for v in got), (query, got)

    async def test_deterministic_across_calls_and_instances(
        self, rewriter: QueryRewriterProtocol, rewriter_factory: Factory
    ) -> None:
        fresh = rewriter_factory()
        for query in self._all_queries():
            first = await rewriter.rewrite(query)
            assert await rewriter.rewrite(query) == first, query
            assert await fresh.rewrite(query) == first, query

    async def test_identity_is_stable(
        self, rewriter: QueryRewriterProtocol, rewriter_factory: Factory
    ) -> None:
        identity = rewriter.identity
        assert isinstance(identity, str) and identity.strip()
        await rewriter.rewrite(next(iter(self.sample_queries()), NO_MATCH_QUERY))
        assert rewriter.identity == identity
        assert rewriter_factory().identity == identity

    async def test_a_query_with_no_match(self, rewriter: QueryRewriterProtocol) -> None:
        got = await rewriter.rewrite(NO_MATCH_QUERY)
        assert isinstance(got, list)
        assert all(isinstance(v, str) and v.strip() for v in got)

    @pytest.mark.parametrize("query", UNICODE_QUERIES)
    async def test_unicode_queries(self, rewriter: QueryRewriterProtocol, query: str) -> None:
        got = await rewriter.rewrite(query)
        assert isinstance(got, list)
        assert all(isinstance(v, str) and v.strip() and not _same(v, query) for v in got)
