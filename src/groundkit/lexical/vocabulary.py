"""The vocabulary a query's terms are looked up in: a persisted pack and a tail.

A query term needs its store id before any segment can be searched. Asking the store
costs a B-tree lookup per term (about 50 µs a query at a million chunks), and reading
a large vocabulary into a dictionary at every open costs more than the open itself
(0.15 s for 158k terms). So the writer persists the vocabulary beside the segments as
one more pack, the terms' UTF-8 bytes in byte order with their ids, memory-mapped and
searched by the compiled kernel (adr/0047-compiled-lexical-kernel.md). Terms written
after it (ids only grow) are read from the store into the *tail*, at open and at every
catch-up. Together they know every term up to an id: a term they do not hold is in no
segment whose terms all lie below that id, and the store need not be asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["VocabularyPack", "vocabulary_arrays"]


def vocabulary_arrays(vocabulary: Mapping[str, int]) -> dict[str, npt.NDArray[Any]]:
    """A vocabulary as a pack stores it: ``text`` (every term's UTF-8 bytes, in byte
    order), ``starts`` (term i is ``text[starts[i]:starts[i + 1]]``) and ``ids``."""
    items = sorted((term.encode("utf-8"), term_id) for term, term_id in vocabulary.items())
    lengths = np.fromiter((len(t) for t, _ in items), dtype=np.int64, count=len(items))
    starts = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    return {
        "text": np.frombuffer(b"".join(t for t, _ in items), dtype=np.uint8),
        "starts": starts,
        "ids": np.fromiter((i for _, i in items), dtype=np.int64, count=len(items)),
    }


@dataclass(frozen=True, slots=True)
class VocabularyPack:
    """A loaded vocabulary pack: every term whose id is at most ``max_id``."""

    text: npt.NDArray[np.uint8]
    starts: npt.NDArray[np.int64]
    ids: npt.NDArray[np.int64]
    max_id: int
    entry: Mapping[str, Any]  # the pack's manifest entry

    @classmethod
    def of(
        cls, arrays: Mapping[str, npt.NDArray[Any]], max_id: Any, entry: Mapping[str, Any]
    ) -> VocabularyPack:
        """A pack from loaded arrays, checked to fit together (``ValueError`` otherwise)."""
        text, starts, ids = arrays["text"], arrays["starts"], arrays["ids"]
        if (
            not isinstance(max_id, int)
            or text.dtype != np.uint8
            or starts.dtype != np.int64
            or ids.dtype != np.int64
            or text.ndim != 1
            or starts.shape != (ids.shape[0] + 1,)
            or int(starts[0]) != 0
            or int(starts[-1]) != text.shape[0]
            or not bool((starts[1:] >= starts[:-1]).all())
            or (ids.size and (int(ids.min()) < 1 or int(ids.max()) > max_id))
        ):
            raise ValueError("a vocabulary pack does not fit together")
        return cls(text, starts, ids, max_id, dict(entry))

    def find(self, kernel: Any, terms: Sequence[str]) -> dict[str, int]:
        """The ids of those of ``terms`` the pack holds (``kernel``: the compiled one)."""
        found: list[int] = kernel.find_terms(self.text, self.starts, self.ids, list(terms))
        return {term: term_id for term, term_id in zip(terms, found, strict=True) if term_id}
