"""What "not found" and "bad value" raise, caught the way Python code catches them.

An unknown chunk, record or collection is a ``LookupError`` as well as its groundkit
family; a bad query, setting or record is a ``ValueError`` as well. These are the
real raise sites, on real SQLite collections: code written against the builtins and
code written against groundkit's tree both catch them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest

import groundkit
import groundkit.sync as gks
from groundkit import (
    ChunkNotFoundError,
    Collection,
    CollectionNotFoundError,
    ConfigurationError,
    IngestionError,
    InvalidInputError,
    InvalidQueryError,
    InvalidSettingError,
    RecordNotFoundError,
    RetrievalConfig,
    RetrievalError,
    StorageError,
)


@pytest.fixture
async def col(tmp_path: Path) -> AsyncIterator[Collection]:
    (tmp_path / "tea.md").write_text("Green tea is brewed at about 80 degrees.\n", "utf-8")
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path) as opened:
        await opened.ingest(tmp_path / "tea.md")
        await opened.add_documents([{"id": "faq-1", "text": "Refunds take 14 days."}])
        yield opened


# -- not found: LookupError ----------------------------------------------------------


async def test_an_unknown_chunk_is_a_lookup_error(col: Collection) -> None:
    with pytest.raises(LookupError, match="no chunk 'nope'") as caught:
        await col.fetch_chunk("nope")
    assert isinstance(caught.value, ChunkNotFoundError)
    assert isinstance(caught.value, RetrievalError)
    assert caught.value.verdict == "unresolvable"


async def test_verifying_a_citation_of_an_unknown_chunk_is_a_lookup_error(
    col: Collection,
) -> None:
    top = (await col.search("green tea"))[0]
    ghost = top.citation.model_copy(update={"chunk_id": "ghost"})
    with pytest.raises(LookupError, match="no chunk 'ghost'"):
        await col.verify(ghost)
    with pytest.raises(ChunkNotFoundError):
        await col.verify_answer("Refunds take 14 days [1].", ["ghost"])


async def test_a_chunk_the_clearance_hides_reads_as_not_found(tmp_path: Path) -> None:
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path) as writer:
        await writer.add_documents(
            [
                {
                    "id": "memo",
                    "text": "The merger closes Friday.",
                    "fields": {"sensitivity": "restricted"},
                }
            ]
        )
        chunk_id = (await writer.search("merger"))[0].chunk_id
    async with Collection.open(tmp_path / "idx", clearance="public") as reader:
        with pytest.raises(LookupError, match="no chunk"):
            await reader.fetch_chunk(chunk_id)


async def test_an_unknown_record_is_a_lookup_error(col: Collection) -> None:
    # The deprecated record delete refuses unknown ids (``delete`` lists them in ``missing``).
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(LookupError, match="no record 'faq-9'") as caught,
    ):
        await col.delete_documents(["faq-9"])
    assert isinstance(caught.value, RecordNotFoundError)
    assert isinstance(caught.value, IngestionError)


async def test_an_absent_collection_is_a_lookup_error(tmp_path: Path) -> None:
    with pytest.raises(LookupError, match="no collection 'missing'") as caught:
        await Collection.open(tmp_path / "idx", "missing", create=False)
    assert isinstance(caught.value, CollectionNotFoundError)
    assert isinstance(caught.value, StorageError)
    assert not (tmp_path / "idx").exists()


# -- bad values: ValueError ----------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "options", "match"),
    [
        ("   ", {}, "non-empty"),
        ("tea", {"top_k": 0}, "top_k"),
        ("tea", {"mode": "fuzzy"}, "unknown mode"),
        ("tea", {"as_of": datetime(2026, 1, 1)}, "time zone"),
        ("tea", {"filters": {"team": {"near": 1}}}, "unknown operator"),
        ("tea", {"filters": {"nosuchfield": "x"}}, "unknown field"),
    ],
)
async def test_a_bad_search_argument_is_a_value_error(
    col: Collection, query: str, options: dict[str, object], match: str
) -> None:
    with pytest.raises(ValueError, match=match) as caught:
        await col.search(query, **options)  # type: ignore[arg-type]
    assert isinstance(caught.value, InvalidQueryError)
    assert isinstance(caught.value, RetrievalError)


@pytest.mark.parametrize(
    "filters",
    [
        {"team": {"near": 1}},
        [("team", "x")],
        {"field": "meta.team", "operator": "==", "value": "x"},
    ],
)
def test_a_refused_filter_is_a_value_error_where_it_is_parsed(filters: object) -> None:
    from groundkit.retrieval.filters import parse_filters

    with pytest.raises(InvalidQueryError) as caught:
        parse_filters(filters)
    assert isinstance(caught.value, ValueError)


async def test_a_bad_version_is_a_value_error(col: Collection) -> None:
    chunk_id = (await col.search("green tea"))[0].chunk_id
    with pytest.raises(ValueError, match="version"):
        await col.fetch_chunk(chunk_id, version=0)


async def test_search_collections_without_collections_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        await groundkit.search_collections([], "tea")


def test_a_bad_setting_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="RetrievalConfig") as caught:
        RetrievalConfig(top_k=0)
    assert isinstance(caught.value, InvalidSettingError)
    assert isinstance(caught.value, ConfigurationError)
    with pytest.raises(ValueError, match="unknown clearance"):
        Collection.open(tmp_path / "idx", clearance="top")


async def test_bad_arguments_to_maintenance_are_value_errors(
    col: Collection, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="keep"):
        await col.purge_versions(-1)
    with pytest.raises(ValueError, match="not a directory"):
        await col.rebase(tmp_path / "tea.md")


async def test_a_bad_record_is_a_value_error_and_nothing_is_stored(col: Collection) -> None:
    before = await col.generation()
    with pytest.raises(ValueError, match="invalid record") as caught:
        await col.add_documents([{"id": " padded ", "text": "x"}, {"id": "ok", "text": "y"}])
    assert isinstance(caught.value, InvalidInputError)
    assert isinstance(caught.value, IngestionError)
    with pytest.raises(ValueError, match="field name"):
        await col.add_documents([{"id": "ok", "text": "y"}], metadata={"9lives": 1})
    assert await col.generation() == before


def test_the_blocking_api_raises_the_same_classes(tmp_path: Path) -> None:
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path) as blocking:
        blocking.add_documents([{"id": "a", "text": "Oolong is rolled."}])
        with pytest.raises(LookupError):
            blocking.fetch_chunk("nope")
        with pytest.raises(ValueError):
            blocking.search("")
