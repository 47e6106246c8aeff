"""The BM25 row path: hits' rows, results and citations built without validation
are equal to the validated models they stand for, whether rows are preloaded or
read by key."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groundkit import Citation, Highlights, RetrievalConfig, RetrievalResult
from groundkit.contracts import (
    GAPS_KEY,
    GEOMETRY_KEY,
    PAGE_STARTS_KEY,
    Scores,
    citation_for,
    end_page_at,
    page_at,
    rects_at,
)
from groundkit.errors import InvalidQueryError, StorageError
from groundkit.ingestion import Indexer
from groundkit.retrieval import Retriever
from groundkit.retrieval.search import result_from_row
from groundkit.storage import SQLiteMetadataStore, _rows
from groundkit.storage._rows import stored_chunk, stored_hit
from groundkit.storage.protocols import StoredChunk
from groundkit.utils.geometry import PageFrame, encode_geometry
from tests.support import QUERIES, SMALL_CHUNKS

_CLASSES = st.sampled_from(["text", "extracted", "snapshot", "record"])
_EXTRACTORS = st.one_of(st.none(), st.just(""), st.text(min_size=1, max_size=8))
_OFFSETS = st.integers(min_value=-2, max_value=60)
_PAGES = st.one_of(
    st.none(),
    st.lists(st.integers(min_value=0, max_value=60), max_size=5),
    st.lists(st.integers(min_value=0, max_value=60), max_size=5).map(sorted),
    st.lists(st.integers(min_value=1, max_value=60), max_size=5).map(lambda s: [0, *sorted(s)]),
)


def _boxes(text: str) -> list[tuple[float, float, float, float] | None]:
    return [None if c in " \n" else (10.0 * i, 5.0, 10.0 * i + 9, 17.5) for i, c in enumerate(text)]


_PAGE_TEXTS = ("one two\nthree four\nfive six", "seven\neight nine")
_TWO_PAGES = encode_geometry(
    [PageFrame(0, 0, 300, 400, 0), PageFrame(0, 0, 300, 400, 90)],
    [(0, _PAGE_TEXTS[0], _boxes(_PAGE_TEXTS[0])), (33, _PAGE_TEXTS[1], _boxes(_PAGE_TEXTS[1]))],
)


def _validated_or_error(values: dict[str, Any], metadata: dict[str, Any]) -> Citation | str:
    """What ``citation`` built before: the validated model, or its error."""
    try:
        return Citation(
            document_id=values["document_id"],
            chunk_id=values["chunk_id"],
            source=values["source"],
            source_class=values["source_class"],
            extractor=values["extractor"],
            start_offset=values["start_offset"],
            end_offset=values["end_offset"],
            page=page_at(metadata, values["start_offset"]),
            version=values["version"],
            end_page=end_page_at(metadata, values["start_offset"], values["end_offset"]),
            rects=rects_at(metadata, values["start_offset"], values["end_offset"]),
        )
    except InvalidQueryError as exc:
        return str(exc)


@given(
    source_class=_CLASSES,
    extractor=_EXTRACTORS,
    start=_OFFSETS,
    length=st.integers(min_value=-3, max_value=30),
    version=st.one_of(st.none(), st.integers(min_value=-1, max_value=4)),
    starts=_PAGES,
    placed=st.booleans(),
)
def test_citation_for_equals_the_validated_citation(
    source_class: str,
    extractor: str | None,
    start: int,
    length: int,
    version: int | None,
    starts: list[int] | None,
    placed: bool,
) -> None:
    metadata: dict[str, Any] = {} if starts is None else {PAGE_STARTS_KEY: starts}
    if placed and starts is None:  # a PDF's: two pages whose characters have boxes
        metadata = {PAGE_STARTS_KEY: [0, 33], GEOMETRY_KEY: _TWO_PAGES}
    values: dict[str, Any] = {
        "document_id": "d",
        "chunk_id": "c",
        "source": "a.pdf",
        "source_class": source_class,
        "extractor": extractor,
        "start_offset": start,
        "end_offset": start + length,
        "version": version,
    }
    expected = _validated_or_error(values, metadata)
    if isinstance(expected, str):
        with pytest.raises(InvalidQueryError) as caught:
            citation_for(metadata=metadata, **values)
        assert str(caught.value) == expected
        return
    fast = citation_for(metadata=metadata, **values)
    assert fast == expected
    assert fast.model_dump() == expected.model_dump()
    assert fast.model_dump_json() == expected.model_dump_json()
    assert fast.model_fields_set == expected.model_fields_set
    assert repr(fast) == repr(expected) and hash(fast) == hash(expected)
    moved = fast.model_copy(update={"page": 9})
    assert moved.page == 9 and fast.page == expected.page


def test_a_result_changed_by_model_copy_still_gets_a_checked_citation() -> None:
    row = stored_chunk(
        (1, "c", 0, "text", 0, 4, "d", "a.txt", "h", "2026-01-01", "text", None, "{}", 1, 0, None)
    )
    result = RetrievalResult.model_validate(result_from_row(row, 1.0).model_dump())
    # model_copy does not validate: the citation's own checks still run.
    broken = result.model_copy(update={"extractor": "pypdf/9"})
    with pytest.raises(InvalidQueryError):
        _ = broken.citation


_ROW = st.tuples(
    st.integers(min_value=1, max_value=10**12),
    st.text(min_size=1, max_size=12),
    st.integers(min_value=0, max_value=50),
    st.text(min_size=1, max_size=40),
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(["text", "extracted", "snapshot", "record"]),
    st.sampled_from(["{}", '{"fields": {"team": "a"}}', '{"page_starts": [0, 3]}']),
    st.integers(min_value=1, max_value=5),
    st.one_of(st.integers(min_value=0, max_value=10**9), st.floats(0, 1e9)),
    st.one_of(st.none(), st.integers(min_value=0, max_value=10**9), st.floats(0, 1e9)),
)


@given(_ROW)
def test_a_stored_row_equals_the_constructed_stored_chunk(row: tuple[Any, ...]) -> None:
    key, cid, index, content, start, cls, meta, version, valid_from, valid_to = row
    extractor = "pypdf/9" if cls == "extracted" else None
    raw = (
        key, cid, index, content, start, start + len(content), "d", "a.pdf", "h",
        "2026-01-01T00:00:00+00:00", cls, extractor, meta, version, valid_from, valid_to,
    )  # fmt: skip
    fast = stored_chunk(raw)
    names = [f.name for f in dataclasses.fields(StoredChunk)]
    values = dict(zip(names, raw, strict=True))
    values.update(
        metadata=fast.metadata,
        valid_from=float(valid_from),
        valid_to=None if valid_to is None else float(valid_to),
    )
    checked = StoredChunk(**values)
    assert fast == checked
    assert dataclasses.asdict(fast) == dataclasses.asdict(checked)
    assert hash(fast.key) == hash(checked.key) and fast.citation == checked.citation
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.content = "x"  # type: ignore[misc]


# Any code point, lone surrogates among them (the default alphabet leaves them out).
_ANY_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec=None, exclude_categories=()),
        st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"]),
    )
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_ANY_TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(_JSON)
def test_metadata_text_reads_as_json_loads_reads_it(value: Any) -> None:
    # Lone surrogates, NaN and big integers included: both parsers must agree.
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        assert repr(_rows._loads(text)) == repr(json.loads(text))


def test_json_that_only_json_loads_reads_still_reads() -> None:
    assert _rows._loads('{"t": "\\ud800"}') == {"t": "\ud800"}
    assert _rows._loads('{"t": "\ud800"}') == {"t": "\ud800"}  # raw, not escaped
    with pytest.raises(ValueError):
        _rows._loads('{"t": 1} trailing')


def _row(key: int, meta: str) -> tuple[Any, ...]:
    return (
        key, f"c{key}", key, "text", 0, 4, "d", "a.md", "h", "2026-01-01T00:00:00+00:00",
        "text", None, meta, 1, 0.0, None,
    )  # fmt: skip


@pytest.mark.parametrize("pad", [0, _rows._MEMO_MIN_CHARS])
def test_a_hit_row_leaves_the_gaps_out_and_shares_nothing(pad: int) -> None:
    """Small metadata and large (memoised) alike: a hit has no gaps, a row read by id
    keeps them, and no two rows share a metadata dict."""
    meta = json.dumps({"fields": {"team": "a"}, "pad": "x" * pad, GAPS_KEY: {"0": "\n"}})
    hits = [stored_hit(_row(k, meta)) for k in (1, 2)]
    whole = stored_chunk(_row(3, meta))
    assert all(GAPS_KEY not in h.metadata for h in hits)
    assert whole.metadata[GAPS_KEY] == {"0": "\n"}
    assert hits[0].metadata == {"fields": {"team": "a"}, "pad": "x" * pad}
    assert hits[0].metadata is not hits[1].metadata
    hits[0].metadata["x"] = 1
    assert "x" not in stored_hit(_row(4, meta)).metadata
    # A hit does not use the gaps, so damaged ones do not stop it; the full read refuses them.
    damaged = meta.replace('"\\n"', '"x"')
    assert GAPS_KEY not in stored_hit(_row(5, damaged)).metadata
    with pytest.raises(StorageError):
        stored_chunk(_row(6, damaged))


def _outputs(results: list[RetrievalResult]) -> list[tuple[Any, ...]]:
    return [
        (
            r.chunk_id,
            r.score,
            r.content,
            r.citation.model_dump(),
            r.metadata,
            r.version,
            list(r.highlights or ()),
            r.model_fields_set,
        )
        for r in results
    ]


async def test_searches_read_the_same_results_preloaded_or_by_key(
    store: SQLiteMetadataStore, corpus_dir: Path
) -> None:
    report = await Indexer(store, corpus_dir, chunking=SMALL_CHUNKS).ingest(corpus_dir)
    assert report.added and not report.failed
    preloaded = await Retriever.open(store)
    by_key = await Retriever.open(store, RetrievalConfig(preload_max_chunks=0))
    assert await preloaded.preload() and not await by_key.preload()
    assert preloaded._rows is not None and by_key._rows is None
    seen = 0
    for query in (*QUERIES, "solar", "the tea"):
        for k in (1, 3, 10):
            a = (await preloaded.search(query, k)).results
            b = (await by_key.search(query, k)).results
            assert _outputs(a) == _outputs(b)
            assert a == b
            for result in a:
                seen += 1
                row = await store.get_chunk(result.chunk_id)
                assert row is not None
                validated = RetrievalResult(
                    content=row.content,
                    score=result.score,
                    document_id=row.document_id,
                    chunk_id=row.chunk_id,
                    chunk_index=row.chunk_index,
                    source=row.source,
                    source_class=row.source_class,
                    extractor=row.extractor,
                    start_offset=row.start_offset,
                    end_offset=row.end_offset,
                    metadata=row.without_gaps().metadata,
                    highlights=Highlights(result.highlights or ()),
                    version=row.version,
                    scores=Scores(bm25=result.score),
                )
                assert result.model_dump(exclude={"evidence", "collection"}) == (
                    validated.model_dump(exclude={"evidence", "collection"})
                )
                assert result.citation == validated.citation == row.citation
    assert seen > 10


async def test_a_results_metadata_is_its_own(store: SQLiteMetadataStore, tmp_path: Path) -> None:
    # Rows in memory, and the document parts a store holds, serve every later search:
    # a caller editing one result's metadata, its top level or a field, changes
    # nothing another search returns.
    folder = tmp_path / "fields"
    folder.mkdir()
    (folder / "a.md").write_text(
        "---\ntitle: Tea\ntags: [green, black]\n---\nsolar tea brewing in the sun\n",
        encoding="utf-8",
    )
    report = await Indexer(store, folder, chunking=SMALL_CHUNKS).ingest(folder)
    assert report.added and not report.failed
    preloaded = await Retriever.open(store)
    by_key = await Retriever.open(store, RetrievalConfig(preload_max_chunks=0))
    assert await preloaded.preload() and preloaded._rows is not None
    for retriever in (preloaded, by_key):
        for _ in range(2):  # the second search reads what the first left in memory
            (result,) = (await retriever.search("solar tea", 1)).results
            assert result.metadata["fields"] == {"title": "Tea", "tags": ["green", "black"]}
            assert "edited" not in result.metadata
            result.metadata["edited"] = True
            result.metadata["fields"]["title"] = "Coffee"
            result.metadata["fields"]["tags"].append("milk")
