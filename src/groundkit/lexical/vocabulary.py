"""The vocabulary a query's terms are looked up in: a persisted pack and a tail.

A query term needs its store id before any segment can be searched. Asking the store
costs a B-tree lookup per term (about 50 µs a query at a million chunks), and reading
a large vocabulary into a dictionary at every open costs more than the open itself
(0.15 s for 158k terms). So the writer persists the vocabulary beside the segments as
one more pack: the terms' UTF-8 bytes in byte order with their ids, memory-mapped and
searched by bisection. Terms written after it (ids only grow) are read from the store
into the *tail*, at open and at every catch-up. Together they know every term up to an
id: a term they do not hold is in no segment whose terms all lie below that id, and the
store need not be asked.

The pack is the same file, written and read the same way, whether or not the compiled
kernel is installed (adr/0048-vocabulary-pack-and-hit-rows.md): the kernel searches it
when present (``find_terms`` in ``_kernel.c``), and ``find_terms`` here, the same
bisection in Python over the same arrays, otherwise. The two return the same ids for
any input, and fail alike on a pack that does not fit together.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from groundkit.errors import StorageError

__all__ = ["VocabularyPack", "find_terms", "vocabulary_arrays"]


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


def find_terms(
    text: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    ids: npt.NDArray[np.int64],
    terms: Sequence[str],
) -> list[int]:
    """The id of each of ``terms`` in a vocabulary pack's arrays, 0 where it holds none.

    What the compiled kernel's ``find_terms`` returns, step for step: a binary search
    per term over the terms' bytes (compared as bytes are: byte by byte, a prefix
    first), probing the same positions, and the same ``ValueError`` when the arrays do
    not fit together where it looks. Reads the arrays in place (a memory map stays one).
    """
    words, bounds, found_ids = text.data, starts.data, ids.data
    size, n = len(words), len(found_ids)
    if len(bounds) != n + 1 or (n and (bounds[0] != 0 or bounds[n] != size)):
        raise ValueError("a vocabulary pack does not fit together")
    out: list[int] = []
    for term in terms:
        if not isinstance(term, str):
            raise TypeError(f"a term must be a str, not {type(term).__name__}")
        want = term.encode("utf-8")
        lo, hi, found = 0, n, 0
        while lo < hi:
            mid = lo + (hi - lo) // 2
            a, b = bounds[mid], bounds[mid + 1]
            if a < 0 or b < a or b > size:
                raise ValueError("a vocabulary pack does not fit together")
            probe = words[a:b].tobytes()
            if probe < want:
                lo = mid + 1
            elif probe > want:
                hi = mid
            else:
                found = found_ids[mid]
                break
        out.append(found)
    return out


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

    def find(self, terms: Sequence[str], *, kernel: ModuleType | None = None) -> dict[str, int]:
        """The ids of those of ``terms`` the pack holds: searched by ``kernel`` (the
        compiled one) when given, else in Python, with the same answer either way, and
        the same ``StorageError`` where the pack does not fit together."""
        wanted = list(terms)
        found: list[int]
        try:
            if kernel is not None:
                found = kernel.find_terms(self.text, self.starts, self.ids, wanted)
            else:
                found = find_terms(self.text, self.starts, self.ids, wanted)
        except ValueError as exc:
            name = self.entry.get("name", "the vocabulary pack")
            raise StorageError(
                f"the lexical index's vocabulary pack {name!r} is damaged ({exc}); remove the "
                "collection's .segments directory and it is rebuilt from the store at the "
                "next open"
            ) from None
        return {term: term_id for term, term_id in zip(wanted, found, strict=True) if term_id}
