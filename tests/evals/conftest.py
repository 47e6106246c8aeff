"""The tiny cross-encoders of the retrieval tests, for the hybrid+rerank runs here."""

from __future__ import annotations

from tests.retrieval.conftest import tiny_cross_encoders

__all__ = ["tiny_cross_encoders"]
