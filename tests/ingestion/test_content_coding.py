"""The bounded content-coding decoder on its own: exact round trips, bounded steps."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundkit import IngestionError
from groundkit.ingestion.content_coding import MAX_LAYERS, STEP, BodyDecoder, parse_codings
from tests.sources import gzip_bomb, raw_deflate

ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "raw-deflate": raw_deflate,
}


def decode(codings: tuple[str, ...], body: bytes, cuts: list[int], cap: int) -> bytes:
    decoder = BodyDecoder(codings, cap)
    out = bytearray()
    start = 0
    for cut in [*sorted(c % (len(body) + 1) for c in cuts), len(body)]:
        for piece in decoder.feed(body[start:cut]):
            assert 0 < len(piece) <= STEP or not codings
            out += piece
        start = max(start, cut)
    decoder.close()
    return bytes(out)


@settings(max_examples=150)
@given(
    data=st.one_of(st.binary(max_size=3000), st.binary(max_size=40).map(lambda b: b * 5000)),
    chain=st.lists(st.sampled_from(sorted(ENCODERS)), max_size=MAX_LAYERS),
    cuts=st.lists(st.integers(min_value=0, max_value=10**6), max_size=8),
)
def test_any_chain_any_chunking_round_trips(data: bytes, chain: list[str], cuts: list[int]) -> None:
    body = data
    for name in chain:
        body = ENCODERS[name](body)
    codings = tuple("deflate" if c == "raw-deflate" else c for c in chain)
    assert decode(codings, body, cuts, cap=len(data) + 1) == data


def test_every_layer_is_bounded_even_when_the_final_bytes_are_not_counted() -> None:
    # A caller that never stops reading still sees the decoder stop near the cap.
    decoder = BodyDecoder(("gzip", "gzip"), 1024 * 1024)
    produced = 0
    with pytest.raises(IngestionError, match="exceeds the cap of 1048576 bytes"):
        for piece in decoder.feed(gzip_bomb(64 * 1024 * 1024)):
            produced += len(piece)
    assert produced <= 2 * 1024 * 1024


@pytest.mark.parametrize(
    ("header", "codings"),
    [
        (None, ()),
        ("", ()),
        ("identity", ()),
        ("gzip", ("gzip",)),
        (" X-GZIP ", ("gzip",)),
        ("gzip, , identity, deflate", ("gzip", "deflate")),
    ],
)
def test_parse_codings(header: str | None, codings: tuple[str, ...]) -> None:
    assert parse_codings(header) == codings


def test_parse_codings_refuses_by_name() -> None:
    with pytest.raises(IngestionError, match="'br' is not supported"):
        parse_codings("gzip, br")
    with pytest.raises(IngestionError, match="3 stacked content codings"):
        parse_codings("deflate, gzip, gzip")
