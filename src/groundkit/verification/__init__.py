"""Verification: citations, quotes and answers checked against their sources.

The stage between retrieval and the surfaces. ``sources`` reads a source back the way
it was ingested, ``anchoring`` finds indexed text again in an edited source,
``verdict.judge`` decides verified / moved / drifted / unresolvable, and ``quotes``,
``markers``, ``answers`` and ``providers`` build on it; ``verifier.Verifier`` is what a
collection checks through. Retrieval never imports this package.
"""

from __future__ import annotations

__all__: list[str] = []
