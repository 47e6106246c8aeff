"""Field values keep their JSON type, and a write is visible at the moment it reports.

Python's ``==`` takes ``1``, ``True`` and ``1.0`` for one value: a field changed from one
to another was reported unchanged and the old value kept. A ``(str, Enum)`` member is
stored as its value, not its name. A search ``as_of`` a document's own ``ingested_at``
finds the version written then. A field holding only empty lists takes a filter value
of any kind. Both metadata stores, SQLite and PostgreSQL.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from groundkit import Collection, InvalidQueryError
from groundkit.ingestion.fields import check_fields
from groundkit.retrieval.filters import field_kinds, parse_filters
from groundkit.storage import SQLiteMetadataStore
from groundkit.storage.postgres import PostgresMetadataStore
from groundkit.storage.protocols import MetadataStoreProtocol
from groundkit.testing.conformance.helpers import document_by_source, make_document


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> tuple[str, str] | None:
    """None for SQLite; else the PostgreSQL server's DSN and a fresh collection name."""
    if request.param == "sqlite":
        return None
    return request.getfixturevalue("postgres_dsn"), request.getfixturevalue("fresh")


@pytest.fixture
async def col(backend: tuple[str, str] | None, tmp_path: Path) -> AsyncIterator[Collection]:
    base = tmp_path / "docs"
    base.mkdir()
    if backend is None:
        opened = Collection.open(tmp_path / "idx", base_dir=base)
    else:
        dsn, name = backend
        opened = Collection.open(
            name=name, metadata_url=dsn, storage_uri=str(tmp_path / "storage"), base_dir=base
        )
    async with opened as collection:
        yield collection


@pytest.fixture
async def store(
    backend: tuple[str, str] | None, tmp_path: Path
) -> AsyncIterator[MetadataStoreProtocol]:
    opened: MetadataStoreProtocol
    if backend is None:
        opened = await SQLiteMetadataStore.open(tmp_path / "meta.sqlite3")
    else:
        opened = await PostgresMetadataStore.open(*backend, max_connections=2)
    try:
        yield opened
    finally:
        await opened.close()


# -- a change of type is a change ---------------------------------------------------

CHANGES = [(1, True), (True, 1), (0, False), (2, 2.0), (2.0, 2), ([1], [True]), ([1], [1.0])]


@pytest.mark.parametrize(("before", "after"), CHANGES, ids=[repr(c) for c in CHANGES])
async def test_a_record_field_changed_in_type_only_is_updated(
    col: Collection, before: Any, after: Any
) -> None:
    await col.add_documents([{"id": "r", "text": "alpha record", "fields": {"v": before}}])
    report = await col.add_documents([{"id": "r", "text": "alpha record", "fields": {"v": after}}])
    assert (report.updated, report.unchanged) == (["record://r"], [])
    stored: Any = (await col.search("record")).results[0].fields["v"]
    assert stored == after and type(stored) is type(after)
    if isinstance(after, list):
        assert [type(x) for x in stored] == [type(x) for x in after]
    # The filter of the new type is taken (the field no longer holds the old kind).
    hits = await col.search("record", filters={"v": after[0] if isinstance(after, list) else after})
    assert [r.source for r in hits.results] == ["record://r"]
    # The same value again is unchanged.
    again = await col.add_documents([{"id": "r", "text": "alpha record", "fields": {"v": after}}])
    assert (again.updated, again.unchanged) == ([], ["record://r"])


async def test_an_ingest_metadata_changed_in_type_only_is_updated(col: Collection) -> None:
    path = col.base_dir / "a.md"
    path.write_text("alpha file\n", encoding="utf-8")
    await col.ingest(path, metadata={"flag": 1, "n": 2})
    report = await col.ingest(path, metadata={"flag": True, "n": 2.0})
    assert (report.updated, report.unchanged) == (["a.md"], [])
    fields = (await col.search("file")).results[0].fields
    assert fields == {"flag": True, "n": 2.0}
    assert (type(fields["flag"]), type(fields["n"])) == (bool, float)
    hits = await col.search("file", filters={"flag": True})
    assert [r.source for r in hits.results] == ["a.md"]


async def test_metadata_overriding_front_matter_in_type_only_is_stored(col: Collection) -> None:
    # The argument's value replaces the front matter's even when ``==`` holds them equal.
    path = col.base_dir / "b.md"
    path.write_text("---\nflag: 1\n---\nbee text\n", encoding="utf-8")
    await col.ingest(path, metadata={"flag": True})
    fields = (await col.search("bee")).results[0].fields
    assert fields == {"flag": True} and type(fields["flag"]) is bool


@pytest.mark.parametrize(("before", "after"), CHANGES, ids=[repr(c) for c in CHANGES])
async def test_the_store_writes_a_document_changed_in_type_only(
    store: MetadataStoreProtocol, before: Any, after: Any
) -> None:
    # The store's own "stored already" check, which a writer that read the folder before
    # another committed relies on, must not take the new value for the old.
    for value in (before, after):
        document, chunks, terms = make_document("a.txt", ["one two"], chunk_ids=["a0"])
        document = document.model_copy(update={"metadata": {"fields": {"v": value}}})
        await store.replace_documents([(document, chunks, terms)])
    record = await document_by_source(store, "a.txt")
    assert record is not None and (record.version, record.past_versions) == (2, 1)
    chunk = await store.get_chunk("a0")
    assert chunk is not None
    stored = chunk.metadata["fields"]["v"]
    assert stored == after and type(stored) is type(after)


# -- a write is visible as of the moment it reports --------------------------------


async def test_each_version_is_found_as_of_its_own_ingested_at(col: Collection) -> None:
    # ``valid_from`` had sub-microsecond digits that ``ingested_at`` rounded away, half
    # the time upwards: as of the reported moment, the previous version was current.
    for i in range(40):
        await col.add_documents([{"id": "a", "text": f"alpha v{i}"}])
        (record,) = [d async for d in col.store.iter_documents() if d.source == "record://a"]
        assert record.version == i + 1
        moment = datetime.fromisoformat(record.ingested_at)
        found = (await col.search("alpha", as_of=moment)).results
        assert [r.version for r in found] == [i + 1], (i, record.ingested_at)


# -- enum members are stored as their values ---------------------------------------


class Team(str, enum.Enum):  # noqa: UP042  (not StrEnum: str() of this one is its name)
    INFRA = "infra"


class Level(enum.IntEnum):
    HIGH = 3


class Ratio(float):
    def __repr__(self) -> str:
        return "Ratio!"


def test_enum_and_subclass_values_are_stored_as_plain_values() -> None:
    fields = check_fields(
        {"team": Team.INFRA, "level": Level.HIGH, "ratio": Ratio(0.5), "levels": [Level.HIGH, 1]},
        "test",
    )
    assert fields == {"team": "infra", "level": 3, "ratio": 0.5, "levels": [3, 1]}
    assert type(fields["team"]) is str and type(fields["level"]) is int
    assert type(fields["ratio"]) is float
    levels = fields["levels"]
    assert isinstance(levels, list) and [type(x) for x in levels] == [int, int]


async def test_an_enum_field_is_found_by_its_value(col: Collection) -> None:
    await col.add_documents(
        [{"id": "a", "text": "alpha", "fields": {"team": Team.INFRA, "level": Level.HIGH}}]
    )
    assert (await col.search("alpha")).results[0].fields == {"team": "infra", "level": 3}
    for flt in ({"team": "infra"}, {"team": Team.INFRA}, {"level": 3}, {"level": Level.HIGH}):
        assert len((await col.search("alpha", filters=flt)).results) == 1, flt


# -- a field holding only empty lists -----------------------------------------------


async def test_a_field_of_empty_lists_takes_any_filter_value(col: Collection) -> None:
    await col.add_documents(
        [
            {"id": "e", "text": "alpha e", "fields": {"tags": []}},
            {"id": "f", "text": "alpha f"},
        ]
    )
    cases: list[tuple[dict[str, Any], list[str]]] = [
        ({"tags": {"exists": True}}, ["record://e"]),
        ({"tags": {"ne": "z"}}, ["record://e"]),
        ({"tags": {"nin": ["z"]}}, ["record://e"]),
        ({"tags": {"ne": 1}}, ["record://e"]),
        ({"tags": {"nin": [True]}}, ["record://e"]),
        ({"tags": "z"}, []),
        ({"tags": {"in": [1, 2]}}, []),
        ({"tags": {"gt": 0}}, []),
        ({"tags": {"prefix": "a"}}, []),
    ]
    for flt, expected in cases:
        found = await col.search("alpha", top_k=10, filters=flt)
        assert sorted(r.source for r in found.results) == expected, flt


def test_a_kind_mismatch_names_the_kinds_held() -> None:
    kinds = field_kinds([{"tags": []}, {"n": [1, 2]}, {"s": "x"}])
    assert kinds["tags"] == frozenset()
    for op in ("eq", "ne", "in", "nin", "gt", "prefix"):
        value: Any = ["z"] if op in ("in", "nin") else "z"
        flt = parse_filters({"tags": {op: value}})
        assert flt is not None
        flt.check_schema(kinds)  # no kind known: any value is compared
    flt = parse_filters({"n": {"ne": "z"}})
    assert flt is not None
    with pytest.raises(InvalidQueryError) as caught:
        flt.check_schema(kinds)
    assert str(caught.value) == "filter 'n' ne: a str value for a field holding number"
