"""The canonical tie key of a chunk, cut to integers a segment can store.

Equal scores rank by ``(content_hash, chunk_index, document_id)``, the same
order on every run and in every process. Segments keep the first 64 bits of
that key's parts as three unsigned integers; rows that agree on all of them
are ordered by their full strings, read from the store.
"""

from __future__ import annotations

__all__ = ["ORDER_COLUMNS", "order_key"]

ORDER_COLUMNS = 3


def order_key(content_hash: str, chunk_index: int, document_id: str) -> tuple[int, int, int]:
    """The ``order`` row of a chunk: its canonical sort key, cut to three integers.

    Each part compares as its source does: a hex prefix as the hex string, a
    UTF-8 prefix (zero-padded) as the string, so ordering rows by these integers
    orders them as ``(content_hash, chunk_index, document_id)`` unless two agree
    on every prefix (then the caller compares the full strings). ``ValueError``
    when ``content_hash`` is not hexadecimal.
    """
    doc = document_id.encode("utf-8")[:8].ljust(8, b"\x00")
    return int(content_hash[:16], 16), chunk_index, int.from_bytes(doc, "big")
