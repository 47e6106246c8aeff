"""Re-extraction for citation checks is remembered by identity and bytes, never by path."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from groundkit import Collection
from groundkit.extraction.memo import ExtractedTexts, extracted_texts
from tests.sources import make_pdf

pytest.importorskip("pypdfium2")

PAGES = [
    "Centrifuge runs are logged in the lab notebook every morning.",
    "Samples are kept at four degrees before the assay begins.",
]


@pytest.fixture
def memo() -> Iterator[ExtractedTexts]:
    extracted_texts.clear()
    yield extracted_texts
    extracted_texts.clear()


async def test_a_pdf_is_extracted_once_for_repeated_checks(
    tmp_path: Path, memo: ExtractedTexts
) -> None:
    (tmp_path / "report.pdf").write_bytes(make_pdf(PAGES))
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        await col.ingest(tmp_path / "report.pdf")
        result = (await col.search("centrifuge notebook", 1)).results[0]
        misses = memo.misses
        for _ in range(3):
            assert (await col.verify(result)).verification == "verified"
        assert memo.misses == misses + 1  # extracted for the first check only
        assert memo.hits >= 2


async def test_an_edited_pdf_is_extracted_again(tmp_path: Path, memo: ExtractedTexts) -> None:
    pdf = tmp_path / "report.pdf"
    pdf.write_bytes(make_pdf(PAGES))
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        await col.ingest(pdf)
        result = (await col.search("samples four degrees", 1)).results[0]
        assert (await col.verify(result)).verification == "verified"
        # Same path, same size class, other bytes: never answered from memory.
        pdf.write_bytes(make_pdf([PAGES[0], "Samples are kept at nine degrees before it."]))
        assert (await col.verify(result)).verification == "drifted"
        pdf.write_bytes(make_pdf(["A new first page.", *PAGES]))
        assert (await col.verify(result)).verification == "moved"


async def test_the_memory_is_bounded_least_recently_used_first() -> None:
    texts = ExtractedTexts(max_chars=10, max_entries=3)

    async def key(data: bytes) -> tuple[str, bytes]:
        return await texts.key("x", data)

    a, b, c, d = [await key(bytes([n])) for n in range(4)]
    texts.put(a, "aaaa")
    texts.put(b, "bbbb")
    assert texts.get(a) == "aaaa"  # a is now the most recent
    texts.put(c, "cc")
    assert len(texts) == 3
    texts.put(d, "dd")  # 12 characters: b, the least recent, goes
    assert texts.get(b) is None
    assert [texts.get(k) for k in (a, c, d)] == ["aaaa", "cc", "dd"]
    texts.put(await key(b"big"), "x" * 11)  # larger than the whole budget: not kept
    assert len(texts) == 3
    assert await texts.key("x", b"\x01") != await texts.key("y", b"\x01")
    big = b"\0" * (2 << 20)  # hashed on a worker thread: the same key
    assert await texts.key("x", big) == ("x", hashlib.sha256(big).digest())


async def test_a_failed_extraction_is_not_remembered() -> None:
    texts = ExtractedTexts()
    runs: list[int] = []

    async def failing() -> str:
        runs.append(1)
        raise RuntimeError("extractor broke")

    async def working() -> str:
        runs.append(2)
        return "text"

    with pytest.raises(RuntimeError):
        await texts.text("x", b"bytes", failing)
    assert await texts.text("x", b"bytes", working) == "text"
    assert await texts.text("x", b"bytes", working) == "text"
    assert runs == [1, 2]
