"""Undoing an HTTP body's content codings in bounded steps.

A response may say ``Content-Encoding: gzip, gzip``: a few kilobytes on the wire
that inflate, layer after layer, to gigabytes. Decoding each wire chunk through
every layer in full before anything is counted lets that reach memory. Here each
layer is a zlib stream asked for at most ``STEP`` bytes at a time
(``decompressobj.decompress(data, max_length)``), the layers are chained lazily,
and the caller counts the final bytes as they come, so it can stop one step past
its cap whatever the ratio. Every layer's output is bounded too, so a body whose
inner layers expand to nothing in the end still cannot spin forever.

Only codings that can be undone this way are accepted: ``gzip`` (and its alias
``x-gzip``), ``deflate`` and ``identity``, at most ``MAX_LAYERS`` of the first
two. Anything else (``br``, ``zstd``, ``compress``, a name never registered) is
refused by name rather than passed on undecoded.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

from groundkit.errors import IngestionError

__all__ = ["ACCEPT_ENCODING", "MAX_LAYERS", "STEP", "BodyDecoder", "encoded_limit", "parse_codings"]

# What a request offers: exactly the codings decoded here.
ACCEPT_ENCODING = "gzip, deflate"
# Stacked codings accepted (identity does not count). A real server uses one.
MAX_LAYERS = 2
# The most one layer hands on per call.
STEP = 64 * 1024

_ALIASES = {"x-gzip": "gzip"}
_DECODABLE = frozenset({"gzip", "deflate"})


def parse_codings(header: str | None) -> tuple[str, ...]:
    """The codings in ``header`` in the order they were applied, ``identity`` left out.

    ``IngestionError`` for a coding that is not decoded here, or for more than
    ``MAX_LAYERS`` of them; the message names them.
    """
    if not header:
        return ()
    codings: list[str] = []
    for token in header.split(","):
        name = token.strip().lower()
        if not name or name == "identity":
            continue
        name = _ALIASES.get(name, name)
        if name not in _DECODABLE:
            raise IngestionError(
                f"content coding {token.strip()!r} is not supported (gzip and deflate are); "
                "not ingested"
            )
        codings.append(name)
    if len(codings) > MAX_LAYERS:
        raise IngestionError(
            f"{len(codings)} stacked content codings ({', '.join(codings)}) are more than "
            f"the {MAX_LAYERS} accepted; not ingested"
        )
    return tuple(codings)


class _Layer:
    """One zlib stream, decoded at most ``STEP`` bytes per call, output capped at ``limit``."""

    def __init__(self, coding: str, limit: int) -> None:
        self.coding = coding
        self._limit = limit
        self._produced = 0
        self._stream = self._new_stream()
        # deflate is meant to be zlib-wrapped, and some servers send it raw. As
        # httpx does, the wrapper is tried first; the input is kept until the
        # first output so a raw stream can be decoded again from its start.
        self._probe: bytearray | None = bytearray() if coding == "deflate" else None

    def _new_stream(self) -> Any:
        wbits = zlib.MAX_WBITS | 16 if self.coding == "gzip" else zlib.MAX_WBITS
        return zlib.decompressobj(wbits)

    @property
    def finished(self) -> bool:
        return bool(self._stream.eof)

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes ``data`` yields, at most ``STEP`` per piece."""
        pending = data
        more = False  # the last call filled its output: zlib may hold more
        while pending or more:
            if self._stream.eof:
                if self.coding != "gzip":
                    raise IngestionError(f"the {self.coding} content coding has data after its end")
                # Concatenated gzip members make one body (RFC 1952).
                self._stream = self._new_stream()
            out = self._decompress(pending)
            ended = bool(self._stream.eof)
            more = len(out) == STEP and not ended
            # Input left over because the output was full; at the stream's end,
            # whatever came after it.
            pending = self._stream.unused_data if ended else self._stream.unconsumed_tail
            if out:
                self._produced += len(out)
                if self._produced > self._limit:
                    raise _LayerOverflow(self.coding)
                yield out

    def _decompress(self, data: bytes) -> bytes:
        if self._probe is not None:
            self._probe += data
        try:
            out: bytes = self._stream.decompress(data, STEP)
        except zlib.error as exc:
            if self._probe is None:
                raise IngestionError(
                    f"the {self.coding} content coding is corrupt ({exc})"
                ) from None
            probe, self._probe = bytes(self._probe), None
            self._stream = zlib.decompressobj(-zlib.MAX_WBITS)
            return self._decompress(probe)
        if self._probe is not None and (out or len(self._probe) > _PROBE_BYTES):
            self._probe = None
        return out


# Input kept for deflate's raw fallback: far more than a zlib header needs.
_PROBE_BYTES = 4096


class _LayerOverflow(Exception):
    """An intermediate layer produced more than any body under the cap could need."""

    def __init__(self, coding: str) -> None:
        super().__init__(coding)
        self.coding = coding


def encoded_limit(max_bytes: int) -> int:
    """The most encoded bytes a body (or an inner layer) under ``max_bytes`` decoded may
    take: a compressed form can be a little longer than what it holds (stored blocks,
    headers); generous, and still proportional to the cap."""
    return max_bytes + max_bytes // 64 + 64 * 1024


class BodyDecoder:
    """Undo ``codings`` (as ``parse_codings`` returns them) over raw body chunks.

    ``feed`` yields the body's final bytes in pieces of at most ``STEP``;
    ``close`` checks that every layer reached its end. ``max_bytes`` is the
    caller's cap on the final bytes: the caller counts those itself (and stops
    one piece past the cap); here every inner layer and the raw stream are held
    to what a body under that cap could need, so none of them runs unbounded.
    """

    def __init__(self, codings: tuple[str, ...], max_bytes: int) -> None:
        self._inner_limit = encoded_limit(max_bytes)
        # Applied first is undone last.
        self._layers = [_Layer(c, self._inner_limit) for c in reversed(codings)]
        self._raw = 0
        self.codings = codings
        self.max_bytes = max_bytes

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        self._raw += len(chunk)
        if self._layers and self._raw > self._inner_limit:
            raise IngestionError(
                f"body exceeds the cap of {self.max_bytes} bytes (the encoded body alone "
                "is larger than any body under the cap needs)"
            )
        try:
            yield from self._through(0, chunk)
        except _LayerOverflow as exc:
            raise IngestionError(
                f"body exceeds the cap of {self.max_bytes} bytes (an inner {exc.coding} "
                "layer inflates past it)"
            ) from None

    def _through(self, index: int, data: bytes) -> Iterator[bytes]:
        if index == len(self._layers):
            if data:
                yield data
            return
        for piece in self._layers[index].feed(data):
            yield from self._through(index + 1, piece)

    def close(self) -> None:
        """``IngestionError`` when a layer's stream ended early (a truncated body)."""
        for layer in self._layers:
            if not layer.finished:
                raise IngestionError(
                    f"the {layer.coding} content coding ends early (the body is truncated)"
                )
