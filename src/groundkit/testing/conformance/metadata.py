"""A conformance suite any ``MetadataStoreProtocol`` implementation must pass.

Use it by subclassing with a ``Test*`` class that provides an async ``store``
fixture yielding a fresh, empty store::

    class TestMyStore(MetadataStoreConformance):
        @pytest.fixture
        async def store(self, tmp_path): ...

Failures inside a write must surface as ``StorageError`` and leave the store
exactly as it was before the write.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from groundkit.contracts import GAPS_KEY, Document, EmbeddingIdentity
from groundkit.errors import ConfigurationError, IngestionError, StorageError
from groundkit.storage.protocols import (
    ConfirmedVectors,
    DocumentState,
    ErasedRows,
    MetadataStoreProtocol,
)
from groundkit.testing.conformance.helpers import (
    document_by_source,
    document_chunks,
    document_hashes,
    document_sources,
    make_document,
    put,
    put_document,
)
from groundkit.utils.hashing import sha256_text
from groundkit.utils.ties import order_key

__all__ = ["MetadataStoreConformance", "check_reopen", "decoded_postings", "snapshot"]

Store = Any  # a MetadataStoreProtocol implementation


async def snapshot(store: Store) -> dict[str, Any]:
    """Everything observable about a store's content, for before/after comparisons."""
    chunks = [s async for batch in store.iter_chunks() for s in batch]
    return {
        "generation": await store.generation(),
        "hashes": await document_hashes(store),
        "documents": [d async for d in store.iter_documents()],
        "chunks": [(s.key, s.chunk) for s in chunks],
        "postings": await decoded_postings(store),
        "chunk_count": await store.chunk_count(),
    }


async def decoded_postings(store: Store) -> list[tuple[int, dict[str, int]]]:
    """Postings as ``(key, {term: tf})`` in the order the store yields them."""
    by_id = {i: t for t, i in (await store.vocabulary()).items()}
    out: list[tuple[int, dict[str, int]]] = []
    async for batch in store.iter_postings():
        for array in (batch.keys, batch.offsets, batch.term_ids, batch.tfs):
            assert isinstance(array, np.ndarray)
        assert batch.offsets.shape == (batch.keys.shape[0] + 1,)
        assert batch.offsets[0] == 0
        assert batch.offsets[-1] == batch.term_ids.shape[0] == batch.tfs.shape[0]
        for i, key in enumerate(batch.keys.tolist()):
            lo, hi = int(batch.offsets[i]), int(batch.offsets[i + 1])
            ids = batch.term_ids[lo:hi].tolist()
            assert len(set(ids)) == len(ids), "term ids within a chunk must be unique"
            out.append(
                (
                    key,
                    {by_id[t]: int(n) for t, n in zip(ids, batch.tfs[lo:hi].tolist(), strict=True)},
                )
            )
    return out


async def put_extracted(store: Store, metadata: dict[str, Any]) -> Document:
    """One extracted document ``r.pdf`` with ``metadata``, stored."""
    doc = Document(
        document_id="pdf1",
        source="r.pdf",
        content="extracted words",
        source_class="extracted",
        extractor="pdf-text@1",
        metadata=metadata,
    )
    _, chunks, terms = make_document("r.pdf", ["extracted words"], document_id="pdf1")
    await put_document(store, doc, chunks, terms)
    return doc


async def check_reopen(store: Store, reopen: Callable[[], Awaitable[Store]]) -> None:
    """Write, close ``store``, ``reopen`` it: everything is still there, and a fresh
    store's empty vocabulary cache does not hand out ids already taken."""
    await put(store, "a.txt", ["alpha beta", "gamma"])
    await store.bind_analyzer("an")
    await store.bind_chunker("chunker/1:structure:1600:200")
    await store.set_base_dir("..")
    before = await snapshot(store)
    await store.close()
    reopened = await reopen()
    try:
        assert await snapshot(reopened) == before
        assert await reopened.get_analyzer() == "an"
        assert await reopened.get_chunker() == "chunker/1:structure:1600:200"
        assert await reopened.get_base_dir() == ".."
        await put(reopened, "b.txt", ["gamma delta"])
        vocab = await reopened.vocabulary()
        assert len(set(vocab.values())) == len(vocab) == 4
    finally:
        await reopened.close()


class MetadataStoreConformance:
    """Behaviour shared by every metadata store."""

    async def test_satisfies_protocol(self, store: Store) -> None:
        assert isinstance(store, MetadataStoreProtocol)

    async def test_fresh_store_is_empty(self, store: Store) -> None:
        assert await store.generation() == 0
        assert await store.generations() == (0, 0)
        assert await document_hashes(store) == {}
        assert await document_sources(store) == []
        assert await store.chunk_count() == 0
        assert await store.vocabulary() == {}
        assert await store.get_analyzer() is None
        assert await store.get_chunker() is None
        assert await store.read_manifest() is None
        assert await store.get_base_dir() is None
        assert [b async for b in store.iter_chunks()] == []
        assert await decoded_postings(store) == []

    async def test_replace_and_read_back(self, store: Store) -> None:
        doc = await put(store, "a.txt", ["alpha beta", "beta gamma gamma"])
        record = await document_by_source(store, "a.txt")
        assert record is not None
        assert (record.document_id, record.source, record.chunk_count) == (
            doc.document_id,
            "a.txt",
            2,
        )
        assert record.content_hash == doc.content_hash == sha256_text(doc.content)
        assert await document_hashes(store) == {"a.txt": doc.content_hash}
        assert await store.chunk_count() == 2
        stored = await store.get_chunk(f"{doc.document_id}#1")
        assert stored is not None
        assert stored.chunk.content == "beta gamma gamma"
        assert (
            doc.content[stored.chunk.start_offset : stored.chunk.end_offset] == "beta gamma gamma"
        )
        assert stored.document.source == "a.txt"
        assert sorted(t for _, p in await decoded_postings(store) for t in p) == sorted(
            ["alpha", "beta", "beta", "gamma"]
        )

    async def test_source_class_and_metadata_round_trip(self, store: Store) -> None:
        await put_extracted(store, {"pages": 3, "title": "Report"})
        record = await document_by_source(store, "r.pdf")
        assert record is not None
        assert (record.source_class, record.extractor) == ("extracted", "pdf-text@1")
        assert record.metadata == {"pages": 3, "title": "Report"}
        stored = await store.get_chunk("pdf1#0")
        assert stored is not None
        assert stored.document.extractor == "pdf-text@1"

    async def test_document_states(self, store: Store) -> None:
        assert await store.document_states() == {}
        text = await put(store, "a.txt", ["alpha beta"])
        fields = {"year": 2024, "tags": ["x", "y"], "ok": True}
        doc = await put_extracted(store, {"pages": 1, "fields": fields})
        states = await store.document_states()
        assert states == {
            "a.txt": DocumentState(text.content_hash, "text", None, {}),
            "r.pdf": DocumentState(doc.content_hash, "extracted", "pdf-text@1", doc.metadata),
        }

    async def test_document_states_of_some_sources_or_a_folder(self, store: Store) -> None:
        for source in ["a", "a.txt", "a/b.txt", "a/c/d.txt", "a0.txt", "ab/x.txt", "b/a/y.txt"]:
            await put(store, source, [f"words of {source}"])
        everything = await store.document_states()
        assert len(everything) == 7
        assert sorted(await store.document_states(under="a")) == ["a", "a/b.txt", "a/c/d.txt"]
        assert sorted(await store.document_states(under="a/c")) == ["a/c/d.txt"]
        assert await store.document_states(under="missing") == {}
        some = await store.document_states(sources=["a.txt", "nope", "a.txt", "b/a/y.txt"])
        assert some == {s: everything[s] for s in ["a.txt", "b/a/y.txt"]}
        assert await store.document_states(sources=[]) == {}
        both = await store.document_states(sources=["ab/x.txt"], under="a/c")
        assert sorted(both) == ["a/c/d.txt", "ab/x.txt"]

    async def test_replace_keeps_the_previous_version(self, store: Store) -> None:
        await put(store, "a.txt", ["one two", "three"], chunk_ids=["old0", "old1"])
        await put(store, "a.txt", ["four five six"], chunk_ids=["new0"])
        past = await store.get_chunk("old0")
        assert past is not None and past.version == 1 and not past.current
        assert past.content == "one two" and past.valid_to is not None
        current = await store.get_chunk("new0")
        assert current is not None and current.version == 2 and current.current
        assert current.valid_from == past.valid_to  # one version ends where the next starts
        assert await store.chunk_count() == 1
        assert [s.chunk_id async for b in store.iter_chunks() for s in b] == ["new0"]
        assert await store.get_chunks_by_ids(["old0", "new0"]) == {"new0": current}
        postings = await decoded_postings(store)
        current_keys = {current.key}
        assert [p for k, p in postings if k in current_keys] == [{"four": 1, "five": 1, "six": 1}]
        assert len(postings) == 3  # the past version's postings are retained
        record = await document_by_source(store, "a.txt")
        assert record is not None and record.chunk_count == 1
        assert (record.version, record.past_versions) == (2, 1)

    async def test_a_document_stored_already_is_not_a_version_of_itself(self, store: Store) -> None:
        """A writer that read a folder before another committed the same file takes it
        for new; its write leaves the stored row as it is, not a past version of the
        same text."""
        same = make_document("a.txt", ["one two"], chunk_ids=["a0"])
        assert await store.replace_documents([same]) == frozenset()
        generation = await store.generation()
        # What it left is what it returns, so the caller's report counts it unchanged;
        # a write that leaves every document writes nothing, not even a generation.
        assert await store.replace_documents([same]) == frozenset({"a.txt"})
        record = await document_by_source(store, "a.txt")
        assert record is not None and (record.version, record.past_versions) == (1, 0)
        assert await store.generation() == generation
        # In a batch, only the document that differs is written.
        other = make_document("b.txt", ["three"], chunk_ids=["b0"])
        assert await store.replace_documents([same, other]) == frozenset({"a.txt"})
        record = await document_by_source(store, "a.txt")
        assert record is not None and (record.version, record.past_versions) == (1, 0)
        assert await store.chunk_count() == 2
        # Other metadata is a change: a new version.
        document, chunks, terms = make_document("a.txt", ["one two"], chunk_ids=["a1"])
        changed = document.model_copy(update={"metadata": {"note": "relabelled"}})
        assert await store.replace_documents([(changed, chunks, terms)]) == frozenset()
        record = await document_by_source(store, "a.txt")
        assert record is not None and (record.version, record.past_versions) == (2, 1)

    async def test_replace_without_keeping_versions(self, store: Store) -> None:
        await put(store, "a.txt", ["one two", "three"], chunk_ids=["old0", "old1"])
        document, chunks, terms = make_document("a.txt", ["four five six"], chunk_ids=["new0"])
        await store.replace_documents([(document, chunks, terms)], keep_versions=0)
        assert await store.get_chunk("old0") is None
        assert await store.get_chunk("old1") is None
        assert [p for _, p in await decoded_postings(store)] == [{"four": 1, "five": 1, "six": 1}]
        record = await document_by_source(store, "a.txt")
        assert record is not None and (record.version, record.past_versions) == (2, 0)

    async def test_versions_read_back_as_they_were(self, store: Store) -> None:
        texts = ["first words", "second words here", "third words"]
        fields = [{"fields": {"rev": n}} for n in (1, 2, 3)]
        for text, meta in zip(texts, fields, strict=True):
            document, chunks, terms = make_document("a.txt", [text])
            document = document.model_copy(update={"metadata": meta})
            await store.replace_documents([(document, chunks, terms)])
        chunk_id = "doc:a.txt#0"  # the same id in every version (the helper's ids)
        newest = await store.get_chunk(chunk_id)
        assert newest is not None and (newest.version, newest.content) == (3, "third words")
        for version, text in enumerate(texts, start=1):
            stored = await store.get_chunk(chunk_id, version)
            assert stored is not None and stored.content == text
            assert stored.version == version and stored.metadata == fields[version - 1]
            assert stored.citation.version == version
            assert stored.document_hash == sha256_text(text)
            again = await store.get_chunks_by_keys([stored.key])
            assert again[stored.key] == stored
        assert await store.get_chunk(chunk_id, 4) is None
        one, two, three = [await store.get_chunk(chunk_id, v) for v in (1, 2, 3)]
        assert one is not None and two is not None and three is not None
        assert one.valid_to == two.valid_from and two.valid_to == three.valid_from
        assert three.valid_to is None
        record = await document_by_source(store, "a.txt")
        assert record is not None and (record.version, record.past_versions) == (3, 2)

    async def test_keeping_no_versions_removes_the_earlier_ones_too(self, store: Store) -> None:
        await put(store, "a.txt", ["one"])
        await put(store, "a.txt", ["two"])
        document, chunks, terms = make_document("a.txt", ["three"])
        await store.replace_documents([(document, chunks, terms)], keep_versions=0)
        assert [await store.get_chunk("doc:a.txt#0", v) is not None for v in (1, 2, 3)] == [
            False,
            False,
            True,
        ]
        record = await document_by_source(store, "a.txt")
        assert record is not None and (record.version, record.past_versions) == (3, 0)

    async def test_lexical_delta_is_one_snapshot(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha beta"])
        generation = await store.generation()
        first = max(k for k, _ in await decoded_postings(store))
        await put(store, "a.txt", ["alpha gamma"])
        await put(store, "b.txt", ["delta"])
        delta = await store.lexical_delta(first, generation)
        assert delta.generation == await store.generation()
        assert delta.changes.complete
        assert delta.changes.keys.tolist() == [first]
        keys = [k for batch in delta.postings for k in batch.keys.tolist()]
        assert len(keys) == 2 and all(k > first for k in keys)
        assert all(b.valid_to is not None and b.order is not None for b in delta.postings)
        empty = await store.lexical_delta(max(keys), delta.generation)
        assert empty.generation == delta.generation
        assert empty.postings == [] or all(b.keys.size == 0 for b in empty.postings)
        assert empty.changes.keys.shape == (0,)

    async def test_the_live_count_follows_every_write(self, store: Store) -> None:
        """The count of current chunks a delta reports (the lexical index is checked
        against it) is right after every kind of write; a store may keep none."""

        async def counted() -> int | None:
            live: int | None = (await store.lexical_delta(0, 0)).live_chunks
            return live

        if await counted() is None:
            return
        steps: list[Callable[[], Awaitable[object]]] = [
            lambda: put(store, "a.txt", ["alpha one", "alpha two"]),
            lambda: put(store, "b.txt", ["beta"]),
            lambda: put(store, "a.txt", ["alpha three"]),  # two retired, one added
            lambda: store.purge_versions(0),
            lambda: put(store, "c.txt", []),
            lambda: store.delete_documents(["b.txt", "c.txt"]),
        ]
        for step in steps:
            await step()
            current = sum([len(batch) async for batch in store.iter_chunks()])
            assert await counted() == current == await store.chunk_count()
        assert await counted() == 1

    async def test_keep_versions_bounds_the_past(self, store: Store) -> None:
        for n in range(4):
            document, chunks, terms = make_document("a.txt", [f"text {n}"])
            await store.replace_documents([(document, chunks, terms)], keep_versions=2)
        kept = [await store.get_chunk("doc:a.txt#0", v) for v in (1, 2, 3, 4)]
        assert [k is not None for k in kept] == [False, True, True, True]
        record = await document_by_source(store, "a.txt")
        assert record is not None and (record.version, record.past_versions) == (4, 2)

    async def test_purge_versions(self, store: Store) -> None:
        for n in range(3):
            await put(store, "a.txt", [f"alpha {n}"])
        await put(store, "b.txt", ["beta"])
        generation = await store.generation()
        assert await store.purge_versions(5) == 0
        assert await store.generation() == generation  # nothing went: nothing changed
        assert await store.purge_versions(1) == 1
        assert await store.generation() == generation + 1
        assert await store.get_chunk("doc:a.txt#0", 1) is None
        assert await store.get_chunk("doc:a.txt#0", 2) is not None
        assert await store.purge_versions(0) == 1
        assert len(await decoded_postings(store)) == 2
        with pytest.raises(ConfigurationError):
            await store.purge_versions(-1)

    async def test_delete_removes_every_version(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha one"])
        await put(store, "a.txt", ["alpha two"])
        assert await store.delete_documents(["a.txt"]) == frozenset({"a.txt"})
        assert await store.get_chunk("doc:a.txt#0", 1) is None
        assert await store.get_chunk("doc:a.txt#0") is None
        assert await decoded_postings(store) == []
        assert (await store.chunk_owners()).keys.shape == (0,)

    async def test_valid_as_of(self, store: Store) -> None:
        moment = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
        document, chunks, terms = make_document("a.txt", ["alpha"])
        await store.replace_documents([(document, chunks, terms)], valid_as_of=moment)
        stored = await store.get_chunk("doc:a.txt#0")
        assert stored is not None and stored.valid_from == moment.timestamp()
        before = await snapshot(store)
        earlier = make_document("a.txt", ["alpha earlier"])
        with pytest.raises(IngestionError, match="before its current version"):
            await store.replace_documents([earlier], valid_as_of=moment - timedelta(days=1))
        with pytest.raises(IngestionError, match="time zone"):
            await store.replace_documents([earlier], valid_as_of=datetime(2026, 3, 2))
        with pytest.raises(IngestionError, match="future"):
            await store.replace_documents(
                [earlier], valid_as_of=datetime.now(UTC) + timedelta(days=1)
            )
        assert await snapshot(store) == before
        later = moment + timedelta(days=10)
        await store.replace_documents([earlier], valid_as_of=later)
        past = await store.get_chunk("doc:a.txt#0", 1)
        assert past is not None and past.valid_to == later.timestamp()

    async def test_postings_carry_tie_keys_and_validity(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha beta"])
        await put(store, "a.txt", ["alpha gamma"])
        batches = [b async for b in store.iter_postings()]
        keys = [k for b in batches for k in b.keys.tolist()]
        rows = await store.get_chunks_by_keys(keys)
        for batch in batches:
            assert batch.order is not None and batch.order.shape == (batch.keys.shape[0], 3)
            assert batch.valid_from is not None and batch.valid_to is not None
            for i, key in enumerate(batch.keys.tolist()):
                row = rows[key]
                expected = order_key(row.chunk.content_hash, row.chunk_index, row.document_id)
                assert tuple(int(v) for v in batch.order[i]) == expected
                assert batch.valid_from[i] == row.valid_from
                assert batch.valid_to[i] == (math.inf if row.valid_to is None else row.valid_to)

    async def test_postings_since_a_key(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha", "beta"])
        first = max(k for k, _ in await decoded_postings(store))
        await put(store, "b.txt", ["gamma"])
        await put(store, "a.txt", ["alpha again"])
        later = [b async for b in store.postings_since(first)]
        keys = [k for b in later for k in b.keys.tolist()]
        assert keys == sorted(keys) and all(k > first for k in keys) and len(keys) == 2
        assert [b async for b in store.postings_since(max(keys))] == []
        everything = [k for b in [b async for b in store.postings_since(0)] for k in b.keys]
        assert len(everything) == 4

    async def test_change_log(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha beta", "beta"])
        await put(store, "b.txt", ["gamma"])
        start = await store.generation()
        old = await document_chunks(store, "doc:a.txt")
        log = await store.changes_since(start)
        assert log.complete and log.keys.shape == (0,)
        await put(store, "a.txt", ["alpha delta"])
        await store.delete_documents(["b.txt"])
        log = await store.changes_since(start)
        assert log.complete
        gone = await store.get_chunk("doc:b.txt#0")
        assert gone is None
        first_version = await store.get_chunk("doc:a.txt#0", 1)
        assert first_version is not None
        replaced_at = first_version.valid_to
        entries = {
            int(k): (float(t), int(n))
            for k, t, n in zip(log.keys, log.valid_to, log.lengths, strict=True)
        }
        assert {k: entries[k] for k in (c.key for c in old)} == {
            old[0].key: (replaced_at, 2),
            old[1].key: (replaced_at, 1),
        }
        assert len(entries) == 3 and min(t for t, _ in entries.values()) == -math.inf
        vocab = await store.vocabulary()
        i = int(np.flatnonzero(log.keys == old[0].key)[0])
        terms = log.term_ids[log.offsets[i] : log.offsets[i + 1]].tolist()
        assert sorted(terms) == sorted([vocab["alpha"], vocab["beta"]])
        assert (await store.changes_since(await store.generation())).keys.shape == (0,)
        await store.prune_changes(start + 1)
        assert not (await store.changes_since(start)).complete
        assert (await store.changes_since(start + 1)).complete
        assert (await store.changes_since(start + 1)).keys.shape == (1,)

    async def test_term_ids_and_uid(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha beta"])
        vocab = await store.vocabulary()
        assert await store.term_ids(["beta", "nope", "alpha", "beta"]) == {
            "alpha": vocab["alpha"],
            "beta": vocab["beta"],
        }
        assert await store.term_ids([]) == {}
        uid = await store.collection_uid()
        assert isinstance(uid, str) and len(uid) >= 16
        assert await store.collection_uid() == uid

    async def test_chunk_owners_of_past_versions(self, store: Store) -> None:
        for rev in (1, 2):
            document, chunks, terms = make_document("a.txt", [f"alpha {rev}"])
            document = document.model_copy(update={"metadata": {"fields": {"rev": rev}}})
            await store.replace_documents([(document, chunks, terms)])
        owners = await store.chunk_owners()
        fields_by_key = {
            int(k): owners.fields[int(o)] for k, o in zip(owners.keys, owners.owners, strict=True)
        }
        one = await store.get_chunk("doc:a.txt#0", 1)
        two = await store.get_chunk("doc:a.txt#0", 2)
        assert one is not None and two is not None
        assert fields_by_key == {one.key: {"rev": 1}, two.key: {"rev": 2}}
        assert set(owners.document_ids) == {"doc:a.txt"}

    async def test_generation_bumps_on_writes_not_reads(self, store: Store) -> None:
        assert await store.generation() == 0
        await put(store, "a.txt", ["alpha"])
        assert await store.generation() == 1
        await put(store, "a.txt", ["alpha again"])
        assert await store.generation() == 2
        await put(store, "b.txt", ["beta"])
        assert await store.generation() == 3
        await snapshot(store)
        await document_by_source(store, "a.txt")
        await store.get_chunks_by_keys([1, 2, 3])
        await store.get_analyzer()
        assert await store.generation() == 3
        await store.bind_analyzer("an-analyzer")
        await store.bind_analyzer("an-analyzer")
        assert await store.generation() == 3
        assert await store.delete_documents(["nope.txt"]) == frozenset()
        assert await store.generation() == 3
        assert await store.delete_documents(["a.txt"]) == frozenset({"a.txt"})
        assert await store.generation() == 4

    async def test_delete_documents(self, store: Store) -> None:
        for name in ("a", "b", "c"):
            await put(store, f"{name}.txt", [f"{name} one", f"{name} two"])
        assert await store.delete_documents([]) == frozenset()
        removed = await store.delete_documents(["a.txt", "c.txt", "missing.txt"])
        assert removed == frozenset({"a.txt", "c.txt"})
        # Already gone: a second delete of the same names removes (and reports) nothing.
        assert await store.delete_documents(["a.txt", "c.txt"]) == frozenset()
        assert await document_sources(store) == ["b.txt"]
        assert await store.chunk_count() == 2
        assert await store.get_chunk("doc:a.txt#0") is None
        assert {k for k, _ in await decoded_postings(store)} == {
            s.key async for batch in store.iter_chunks() for s in batch
        }

    async def test_delete_many(self, store: Store) -> None:
        sources = [f"d{i:04d}.txt" for i in range(620)]
        for source in sources:
            document = Document(document_id=source, source=source, content="x")
            await put_document(store, document, [], [])
        assert await store.delete_documents(sources[:610]) == frozenset(sources[:610])
        assert await document_sources(store) == sources[610:]

    # -- looking documents up, erasing them ------------------------------------------

    async def test_find_documents_by_id_and_source(self, store: Store) -> None:
        for name in ("c", "a", "b"):
            await put(store, f"{name}.txt", [f"{name} one", f"{name} two"])
        await put(store, "b.txt", ["b again"])  # a second version
        found = await store.find_documents(
            document_ids=["doc:c.txt", "nope"], sources=["b.txt", "missing.txt", "b.txt"]
        )
        # Each once, in source order, as iter_documents describes them.
        every = {r.source: r async for r in store.iter_documents()}
        assert found == [every["b.txt"], every["c.txt"]]
        assert (found[0].version, found[0].past_versions, found[0].chunk_count) == (2, 1, 1)
        # Named both ways: still once.
        both = await store.find_documents(document_ids=["doc:a.txt"], sources=["a.txt"])
        assert both == [every["a.txt"]]
        assert await store.find_documents() == []
        assert await store.find_documents(document_ids=["a.txt"], sources=["doc:a.txt"]) == []

    async def test_find_documents_many(self, store: Store) -> None:
        sources = [f"d{i:04d}.txt" for i in range(620)]
        for source in sources:
            document = Document(document_id=f"id-{source}", source=source, content="x")
            await put_document(store, document, [], [])
        found = await store.find_documents(
            document_ids=[f"id-{s}" for s in sources[:560]], sources=sources[550:]
        )
        assert [r.source for r in found] == sources

    async def test_erase_removes_the_terms_only_it_used(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha shared", "alpha only"])
        await put(store, "a.txt", ["alpha second", "zeta"])  # version 2; version 1 is kept
        await put(store, "b.txt", ["beta shared"])
        before = await store.vocabulary()
        keys = {k for k, _ in await decoded_postings(store)}
        start = await store.generation()
        erased = await store.erase_documents(["a.txt", "missing.txt"])
        assert erased == ErasedRows(documents=1, versions=1, chunks=4, terms=4)
        assert await store.generation() > start
        assert await store.find_documents(sources=["a.txt"]) == []
        # The terms left keep their ids.
        assert await store.vocabulary() == {t: before[t] for t in ("beta", "shared")}
        assert await store.term_ids(["alpha", "zeta", "beta"]) == {"beta": before["beta"]}
        assert [p for _, p in await decoded_postings(store)] == [{"beta": 1, "shared": 1}]
        # Every erased chunk is in the change log as removed: a live index catches up.
        log = await store.changes_since(start)
        assert log.complete and set(log.keys.tolist()) == keys - {
            k for k, _ in await decoded_postings(store)
        }
        assert set(log.valid_to.tolist()) == {-math.inf}
        # A removed term written again gets a new id, above every id handed out before.
        await put(store, "c.txt", ["alpha gamma shared"])
        again = await store.vocabulary()
        assert again["alpha"] > max(before.values())
        assert again["shared"] == before["shared"]
        written = [p for _, p in await decoded_postings(store)]
        assert {"alpha": 1, "gamma": 1, "shared": 1} in written
        # Nothing is left to erase: running it again changes nothing.
        assert await store.erase_documents(["a.txt"]) == ErasedRows()
        assert await store.vocabulary() == again

    async def test_erase_sweeps_terms_a_delete_left(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha words"])
        await put(store, "b.txt", ["beta words"])
        ids = await store.vocabulary()
        assert await store.delete_documents(["a.txt"]) == frozenset({"a.txt"})
        assert "alpha" in await store.vocabulary()  # a plain delete keeps terms
        generation = await store.generation()
        # An erase naming nothing still sweeps them (an interrupted erase, run again).
        assert await store.erase_documents([]) == ErasedRows(terms=1)
        assert await store.vocabulary() == {"beta": ids["beta"], "words": ids["words"]}
        assert await store.generation() == generation  # no document changed

    async def test_compact_keeps_what_is_stored(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha words", "more alpha"])
        await put(store, "b.txt", ["beta words"])
        await store.erase_documents(["a.txt"])
        before = await snapshot(store)
        vocabulary = await store.vocabulary()
        compacted = await store.compact()
        assert compacted.unfinished is None
        assert compacted.bytes_reclaimed >= 0
        assert await snapshot(store) == before
        assert await store.vocabulary() == vocabulary
        await put(store, "c.txt", ["gamma words"])  # still writable
        assert await document_sources(store) == ["b.txt", "c.txt"]

    async def test_failed_write_duplicate_chunk_id_is_rolled_back(self, store: Store) -> None:
        await put(store, "a.txt", ["old words here", "more old words"])
        await put(store, "b.txt", ["other document"])
        before = await snapshot(store)
        vocab_before = await store.vocabulary()
        document, chunks, terms = make_document(
            "a.txt", ["fresh novel", "unseen tokens"], chunk_ids=["dup", "dup"]
        )
        with pytest.raises(StorageError):
            await put_document(store, document, chunks, terms)
        assert await snapshot(store) == before
        assert await store.vocabulary() == vocab_before

    async def test_failed_write_chunk_id_owned_by_other_document(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha words"])
        await put(store, "b.txt", ["beta words"])
        before = await snapshot(store)
        document, chunks, terms = make_document("a.txt", ["changed"], chunk_ids=["doc:b.txt#0"])
        with pytest.raises(StorageError):
            await put_document(store, document, chunks, terms)
        assert await snapshot(store) == before

    async def test_failed_write_document_id_owned_by_other_source(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha"])
        await put(store, "b.txt", ["beta"])
        before = await snapshot(store)
        document, chunks, terms = make_document("b.txt", ["gamma"], document_id="doc:a.txt")
        with pytest.raises(StorageError):
            await put_document(store, document, chunks, terms)
        assert await snapshot(store) == before

    async def test_failed_write_term_list_mismatch(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha"])
        before = await snapshot(store)
        document, chunks, terms = make_document("a.txt", ["new one", "new two"])
        with pytest.raises(ValueError, match="term"):
            await put_document(store, document, chunks, terms[:1])
        assert await snapshot(store) == before

    async def test_store_consistent_after_failed_write(self, store: Store) -> None:
        document, chunks, terms = make_document(
            "a.txt", ["zeta eta", "theta"], chunk_ids=["x", "x"]
        )
        with pytest.raises(StorageError):
            await put_document(store, document, chunks, terms)
        # Terms minted by the failed write must not leak ids into later writes.
        await put(store, "a.txt", ["zeta eta", "theta iota"])
        postings = dict(await decoded_postings(store))
        async for batch in store.iter_chunks():
            for s in batch:
                assert postings[s.key] == dict(Counter(s.chunk.content.split()))

    async def test_get_chunk_unknown(self, store: Store) -> None:
        assert await store.get_chunk("nope") is None

    async def test_get_chunks_by_keys(self, store: Store) -> None:
        pieces = [f"piece{i}" for i in range(1200)]
        await put(store, "big.txt", pieces)
        await put(store, "small.txt", ["tiny"])
        every = {s.key: s async for batch in store.iter_chunks() for s in batch}
        assert len(every) == 1201
        keys = sorted(every)
        found = await store.get_chunks_by_keys([*keys, max(keys) + 1000])
        assert set(found) == set(keys)
        for key in keys:
            assert found[key].chunk == every[key].chunk
        assert await store.get_chunks_by_keys([]) == {}
        some = await store.get_chunks_by_keys(keys[5:8])
        assert set(some) == set(keys[5:8])

    async def test_current_chunk_ids(self, store: Store) -> None:
        # Ids of current chunks only: a replaced version's keys, a deleted document's
        # and unknown keys are absent; more keys than one statement binds are read whole.
        await put(store, "big.txt", [f"piece{i}" for i in range(1200)])
        await put(store, "a.txt", ["one two", "three"], chunk_ids=["old0", "old1"])
        old = {s.key: s.chunk_id async for b in store.iter_chunks() for s in b}
        assert len(old) == 1202
        unknown = max(old) + 1000
        assert await store.current_chunk_ids([*old, unknown]) == old
        assert await store.current_chunk_ids([]) == {}
        await put(store, "a.txt", ["four five"], chunk_ids=["new0"])
        new = await store.get_chunk("new0")
        assert new is not None
        past = [k for k, c in old.items() if c in ("old0", "old1")]
        found = await store.current_chunk_ids([*past, new.key])
        assert found == {new.key: "new0"}
        await store.delete_documents(["big.txt"])
        assert await store.current_chunk_ids(list(old)) == {}
        assert await store.current_chunk_ids([new.key, new.key]) == {new.key: "new0"}

    async def test_rows_read_by_key_leave_out_the_chunk_gaps(self, store: Store) -> None:
        # A search reads its hits by key: the gaps (one per chunk of the document) stay
        # in the store, every other field comes back as written. Passages read by id.
        document, chunks, terms = make_document("g.txt", ["one", "two", "three"])
        fields = {"title": "Gaps", "ratio": 0.30000000000000004, "tags": ["a", "é\\"]}
        metadata = {"fields": fields, GAPS_KEY: {"0": "\n\n", "1": "\n\n"}}
        await put_document(store, document.model_copy(update={"metadata": metadata}), chunks, terms)
        rows = [s async for batch in store.iter_chunks() for s in batch]
        by_key = await store.get_chunks_by_keys([r.key for r in rows])
        by_id = await store.get_chunks_by_ids([r.chunk_id for r in rows])
        for row in rows:
            assert by_key[row.key].metadata == {"fields": fields}
            assert by_id[row.chunk_id].metadata == metadata
            assert by_key[row.key].chunk == row.chunk

    async def test_rows_read_by_key_each_hold_their_documents_metadata(self, store: Store) -> None:
        # A store may read a document's metadata once for all of its hits; every row
        # must still come back with its own document's, in any order and any count.
        sizes = {"a.txt": 3, "b.txt": 4, "c.txt": 700}
        for name, size in sizes.items():
            document, chunks, terms = make_document(name, [f"{name} {i}" for i in range(size)])
            metadata = {"fields": {"title": name, "n": size}}
            await put_document(
                store, document.model_copy(update={"metadata": metadata}), chunks, terms
            )
        rows = [s async for batch in store.iter_chunks() for s in batch]
        for keys in (
            [r.key for r in rows if r.source != "c.txt"][::-1],
            [r.key for r in rows][::3],
            [r.key for r in rows],
        ):
            by_key = await store.get_chunks_by_keys(keys)
            assert set(by_key) == set(keys)
            for row in by_key.values():
                assert row.metadata == {"fields": {"title": row.source, "n": sizes[row.source]}}

    async def test_rows_read_by_key_hold_long_metadata(self, store: Store) -> None:
        # A PDF's geometry makes metadata hundreds of kilobytes long: a store may read it
        # once per document and share it; each row still holds its own document's, gaps
        # left out, whether a few keys are read or many, first or again.
        pads = {"long-a.txt": "a" * 70_000, "long-b.txt": "b" * 90_000, "short.txt": "s"}
        for name, pad in pads.items():
            document, chunks, terms = make_document(name, [f"{name} {i}" for i in range(40)])
            gaps = {str(i): " " for i in range(39)}
            metadata = {"fields": {"title": name}, "pad": pad, GAPS_KEY: gaps}
            await put_document(
                store, document.model_copy(update={"metadata": metadata}), chunks, terms
            )
        rows = [s async for batch in store.iter_chunks() for s in batch]
        keys = [r.key for r in rows]
        for wanted in (keys[35:45], keys[35:45], keys[::7], keys, keys[::-1][:9]):
            by_key = await store.get_chunks_by_keys(wanted)
            assert set(by_key) == set(wanted)
            for row in by_key.values():
                expected = {"fields": {"title": row.source}, "pad": pads[row.source]}
                assert row.metadata == expected
        first, second = (await store.get_chunks_by_keys(keys[:2])).values()
        first.metadata["pad"] = "changed"
        again = await store.get_chunks_by_keys(keys[:2])
        assert again[first.key].metadata["pad"] == again[second.key].metadata["pad"] == "a" * 70_000

    async def test_rows_read_by_key_follow_every_write(self, store: Store) -> None:
        # Whatever a store keeps between reads (parsed metadata, rows), a read after a
        # write sees the write: a document deleted and written again (the same id and
        # version, other metadata), a new version beside the past one; and a caller's
        # edit of a row it was given changes nothing a later read returns.
        async def write(rev: int) -> list[int]:
            document, chunks, terms = make_document("a.txt", [f"rev{rev} one", f"rev{rev} two"])
            document = document.model_copy(update={"metadata": {"fields": {"rev": rev}}})
            await store.replace_documents([(document, chunks, terms)])
            return [s.key async for b in store.iter_chunks() for s in b if s.source == "a.txt"]

        def revs(rows: Any) -> set[Any]:
            return {row.metadata["fields"]["rev"] for row in rows.values()}

        await put(store, "b.txt", ["other words"])
        first = await write(1)
        for _ in range(2):  # read, and read again
            assert revs(await store.get_chunks_by_keys(first)) == {1}
        await store.delete_documents(["a.txt"])
        assert await store.get_chunks_by_keys(first) == {}
        again = await write(2)
        rows = await store.get_chunks_by_keys(again)
        assert revs(rows) == {2} and {r.version for r in rows.values()} == {1}
        rows[again[0]].metadata["fields"] = {"rev": "edited"}
        rows[again[0]].metadata["extra"] = True
        newer = await write(3)
        both = await store.get_chunks_by_keys([*again, *newer])
        assert {k: (r.version, r.metadata) for k, r in both.items()} == {
            **{k: (1, {"fields": {"rev": 2}}) for k in again},
            **{k: (2, {"fields": {"rev": 3}}) for k in newer},
        }

    async def test_iter_chunks_batches_in_source_order(self, store: Store) -> None:
        await put(store, "b.txt", ["b0", "b1", "b2"])
        await put(store, "a.txt", ["a0", "a1"])
        batches = [b async for b in store.iter_chunks(batch_size=2)]
        assert [len(b) for b in batches] == [2, 2, 1]
        flat = [s for b in batches for s in b]
        assert [(s.document.source, s.chunk.chunk_index) for s in flat] == [
            ("a.txt", 0),
            ("a.txt", 1),
            ("b.txt", 0),
            ("b.txt", 1),
            ("b.txt", 2),
        ]
        assert [s.chunk.content for s in flat] == ["a0", "a1", "b0", "b1", "b2"]

    async def test_iter_chunks_each_hold_their_documents_metadata(self, store: Store) -> None:
        # A store may read a document's metadata once for all of its chunks; every chunk
        # still comes back with its own document's current metadata (gaps included),
        # whatever the batch size and wherever a batch cuts a document.
        sizes = {"a.txt": 1, "b.txt": 5, "c.txt": 2}
        for name, size in sizes.items():
            document, chunks, terms = make_document(name, [f"{name} {i}" for i in range(size)])
            gaps = {str(i): " " for i in range(size - 1)}
            metadata = {"fields": {"title": name}, "pad": name * 100, GAPS_KEY: gaps}
            await put_document(
                store, document.model_copy(update={"metadata": metadata}), chunks, terms
            )
        # A new version of b.txt: its chunks carry the new metadata, never the past one's.
        document, chunks, terms = make_document("b.txt", [f"b.txt new {i}" for i in range(3)])
        metadata = {"fields": {"title": "b2"}, GAPS_KEY: {"0": " ", "1": " "}}
        await put_document(store, document.model_copy(update={"metadata": metadata}), chunks, terms)
        expected = {
            "a.txt": {"fields": {"title": "a.txt"}, "pad": "a.txt" * 100, GAPS_KEY: {}},
            "b.txt": metadata,
            "c.txt": {"fields": {"title": "c.txt"}, "pad": "c.txt" * 100, GAPS_KEY: {"0": " "}},
        }
        for batch_size in (1, 2, 3, 1000):
            rows = [s async for b in store.iter_chunks(batch_size=batch_size) for s in b]
            assert [(r.source, r.chunk_index) for r in rows] == [
                ("a.txt", 0), ("b.txt", 0), ("b.txt", 1), ("b.txt", 2), ("c.txt", 0), ("c.txt", 1)
            ]  # fmt: skip
            for row in rows:
                assert row.metadata == expected[row.source], (batch_size, row.source)

    async def test_iter_postings_canonical_order(self, store: Store) -> None:
        # Identical chunk contents across documents, inserted out of canonical order.
        await put(store, "z.txt", ["same text", "unique zed"], document_id="id-b")
        await put(store, "y.txt", ["same text", "same text"], document_id="id-c")
        await put(store, "x.txt", ["same text"], document_id="id-a")
        chunks = [s async for batch in store.iter_chunks() for s in batch]
        expected = sorted(
            chunks,
            key=lambda s: (s.chunk.content_hash, s.chunk.chunk_index, s.chunk.document_id),
        )
        batches = [b async for b in store.iter_postings(batch_size=2)]
        assert [int(b.keys.shape[0]) for b in batches] == [2, 2, 1]
        keys = [k for b in batches for k in b.keys.tolist()]
        assert keys == [s.key for s in expected]
        assert [k for k, _ in await decoded_postings(store)] == keys

    async def test_postings_hold_term_frequencies(self, store: Store) -> None:
        await put(store, "a.txt", ["red red blue", "green"])
        by_content = {}
        async for batch in store.iter_chunks():
            for s in batch:
                by_content[s.key] = s.chunk.content
        for key, tfs in await decoded_postings(store):
            assert tfs == dict(Counter(by_content[key].split()))

    async def test_empty_term_list_chunk(self, store: Store) -> None:
        document, chunks, _ = make_document("a.txt", ["the of", "word"])
        await put_document(store, document, chunks, [[], ["word"]])
        postings = await decoded_postings(store)
        assert sorted(p.get("word", 0) for _, p in postings) == [0, 1]
        assert await store.chunk_count() == 2

    async def test_vocabulary(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha beta"])
        await put(store, "b.txt", ["beta gamma"])
        vocab = await store.vocabulary()
        assert set(vocab) == {"alpha", "beta", "gamma"}
        assert len(set(vocab.values())) == 3
        assert all(isinstance(v, int) and v >= 0 for v in vocab.values())
        await store.delete_documents(["a.txt"])
        # Ids are never reused or dropped: the vocabulary only grows.
        after = await store.vocabulary()
        assert {t: after[t] for t in vocab} == vocab
        await put(store, "c.txt", ["delta alpha"])
        final = await store.vocabulary()
        assert final["alpha"] == vocab["alpha"]
        assert final["delta"] not in vocab.values()

    async def test_bind_chunker_is_compare_and_set(self, store: Store) -> None:
        assert await store.bind_chunker("chunker-A") == "chunker-A"
        assert await store.bind_chunker("chunker-A") == "chunker-A"
        assert await store.bind_chunker("chunker-B") == "chunker-A"
        assert await store.get_chunker() == "chunker-A"
        assert await store.get_analyzer() is None  # bindings are independent
        assert await store.generation() == 0
        await put(store, "a.txt", ["alpha"])
        assert await store.generation() == 1

    async def test_bind_analyzer_is_compare_and_set(self, store: Store) -> None:
        assert await store.bind_analyzer("analyzer-A") == "analyzer-A"
        assert await store.bind_analyzer("analyzer-A") == "analyzer-A"
        assert await store.get_analyzer() == "analyzer-A"
        # Another identity never overwrites the binding: the store reports the bound one.
        assert await store.bind_analyzer("analyzer-B") == "analyzer-A"
        assert await store.get_analyzer() == "analyzer-A"
        assert await store.generation() == 0  # binding the analyzer changes no text
        # The call left no transaction open: writes still work.
        await put(store, "a.txt", ["alpha"])
        assert await store.generation() == 1

    async def test_bind_embedding_is_compare_and_set(self, store: Store) -> None:
        identity = EmbeddingIdentity(provider="local", model_name="mini", dimensions=384)
        first = await store.bind_embedding(identity)
        assert first.identity == identity
        assert await store.generation() == 1  # binding is a write open readers must see
        assert await store.read_manifest() == first
        assert await store.bind_embedding(identity) == first
        for other in (
            identity.model_copy(update={"dimensions": 768}),
            identity.model_copy(update={"model_name": "large"}),
            identity.model_copy(update={"provider": "remote"}),
        ):
            # Never rebound: the store hands back the manifest it holds.
            assert await store.bind_embedding(other) == first
        assert await store.read_manifest() == first
        assert await store.generation() == 1  # re-binding the same identity writes nothing
        await put(store, "a.txt", ["alpha"])
        assert await store.generation() == 2

    async def test_base_dir(self, store: Store) -> None:
        await store.set_base_dir("../corpus")
        assert await store.get_base_dir() == "../corpus"

    async def test_documents_listed_by_source(self, store: Store) -> None:
        await put(store, "b/x.txt", ["one", "two"])
        await put(store, "a.txt", ["three"])
        assert await document_sources(store) == ["a.txt", "b/x.txt"]
        records = [r async for r in store.iter_documents()]
        assert [(r.source, r.chunk_count) for r in records] == [("a.txt", 1), ("b/x.txt", 2)]
        assert await document_by_source(store, "missing") is None

    async def test_vector_bookkeeping(self, store: Store) -> None:
        doc, chunks, terms = make_document("v.txt", ["alpha beta", "gamma"])
        await put_document(store, doc, chunks, terms)
        other, o_chunks, o_terms = make_document("w.txt", ["delta"])
        await put_document(store, other, o_chunks, o_terms)
        assert await store.document_ids() == {doc.document_id, other.document_id}
        assert await store.documents_missing_vectors() == [doc.document_id, other.document_id]
        generation = await store.generation()
        await store.mark_vectors_stored_many([(doc.document_id, doc.content_hash)])
        await store.mark_vectors_stored_many([(other.document_id, "not-the-current-hash")])
        assert await store.documents_missing_vectors() == [other.document_id]
        assert await store.generation() == generation  # no text changed
        assert (await store.generations()).text == generation
        replaced, r_chunks, r_terms = make_document("v.txt", ["alpha beta", "epsilon"])
        await put_document(store, replaced, r_chunks, r_terms)
        assert doc.document_id in await store.documents_missing_vectors()

    async def test_vector_confirmations_and_their_generation(self, store: Store) -> None:
        docs = [make_document(f"{name}.txt", [f"{name} one", f"{name} two"]) for name in "abc"]
        await store.replace_documents(docs)
        (a, _, a_chunks), (b, _, _), (c, _, _) = [(d, t, ch) for d, ch, t in docs]
        text, vectors = await store.generations()
        assert text == await store.generation()
        nothing = ConfirmedVectors(frozenset(), frozenset())
        assert await store.confirmed_vectors() == nothing
        assert await store.confirmed_vector_count() == 0
        await store.mark_vectors_stored_many(
            [(a.document_id, a.content_hash), (b.document_id, b.content_hash)]
        )
        assert await store.generations() == (text, vectors + 1)  # no text changed
        assert await store.confirmed_vectors() == ConfirmedVectors(
            frozenset({a.document_id, b.document_id}),
            frozenset(
                [chunk.chunk_id for chunk in a_chunks] + [f"{b.document_id}#{i}" for i in range(2)]
            ),
        )
        assert await store.confirmed_vector_count() == 4
        await store.forget_vectors([b.document_id, "unknown", b.document_id])
        assert await store.generations() == (text, vectors + 2)
        assert (await store.confirmed_vectors()).documents == {a.document_id}
        assert await store.confirmed_vector_count() == 2
        assert await store.documents_missing_vectors() == [b.document_id, c.document_id]
        await store.bump_vectors_generation()
        assert await store.generations() == (text, vectors + 3)
        await store.forget_vectors()
        assert await store.confirmed_vectors() == nothing
        assert await store.confirmed_vector_count() == 0
        assert await store.generations() == (text, vectors + 4)
        # A replaced document is no longer confirmed, whatever it was before.
        await store.mark_vectors_stored_many([(a.document_id, a.content_hash)])
        replaced, r_chunks, r_terms = make_document("a.txt", ["a changed"])
        await put_document(store, replaced, r_chunks, r_terms)
        assert await store.confirmed_vectors() == nothing

    async def test_chunks_by_document_and_by_id(self, store: Store) -> None:
        doc, chunks, terms = make_document("v.txt", ["one", "two", "three"])
        await put_document(store, doc, chunks, terms)
        listed = await document_chunks(store, doc.document_id)
        assert [s.chunk_index for s in listed] == [0, 1, 2]
        assert [s.content for s in listed] == ["one", "two", "three"]
        assert all(s.document_hash == doc.content_hash for s in listed)
        by_id = await store.get_chunks_by_ids([chunks[2].chunk_id, "missing", chunks[0].chunk_id])
        assert set(by_id) == {chunks[0].chunk_id, chunks[2].chunk_id}
        assert by_id[chunks[2].chunk_id].content == "three"
        assert await document_chunks(store, "no-such-document") == []
        assert await store.get_chunks_by_ids([]) == {}

    async def test_replace_documents_is_one_transaction(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha"])
        generation = await store.generation()
        a2 = make_document("a.txt", ["alpha two", "beta"])
        b = make_document("b.txt", ["gamma delta"])
        await store.replace_documents([a2, b])
        assert await store.generation() == generation + 1
        assert await document_hashes(store) == {
            "a.txt": a2[0].content_hash,
            "b.txt": b[0].content_hash,
        }
        listed = await document_chunks(store, a2[0].document_id)
        assert [s.content for s in listed] == ["alpha two", "beta"]
        postings = dict(await decoded_postings(store))
        async for batch in store.iter_chunks():
            for s in batch:
                assert postings[s.key] == dict(Counter(s.chunk.content.split()))

    async def test_replace_documents_all_or_nothing(self, store: Store) -> None:
        await put(store, "a.txt", ["alpha"])
        before = await snapshot(store)
        vocab_before = await store.vocabulary()
        good = make_document("c.txt", ["novel words"])
        bad = make_document("d.txt", ["more", "unseen"], chunk_ids=["dup", "dup"])
        with pytest.raises(StorageError):
            await store.replace_documents([good, bad])
        assert await snapshot(store) == before
        assert await store.vocabulary() == vocab_before
        with pytest.raises(ValueError, match="twice"):
            await store.replace_documents([good, good])
        assert await snapshot(store) == before
        await store.replace_documents([])
        assert await snapshot(store) == before

    async def test_batched_vector_bookkeeping(self, store: Store) -> None:
        docs = [make_document(f"{name}.txt", [f"{name} one", f"{name} two"]) for name in "xyz"]
        await store.replace_documents(docs)
        ids = [d.document_id for d, _, _ in docs]
        generation = await store.generation()
        await store.mark_vectors_stored_many(
            [(ids[0], docs[0][0].content_hash), (ids[1], "stale-hash")]
        )
        assert await store.documents_missing_vectors() == ids[1:]
        assert await store.generation() == generation
        await store.mark_vectors_stored_many([])
        grouped = await store.get_chunks_for_documents([ids[2], "missing", ids[0], ids[2]])
        assert list(grouped) != [] and set(grouped) == {ids[0], ids[2]}
        assert [s.content for s in grouped[ids[2]]] == ["z one", "z two"]
        assert [s.chunk_index for s in grouped[ids[0]]] == [0, 1]
        assert await store.get_chunks_for_documents([]) == {}

    async def test_chunk_owners(self, store: Store) -> None:
        empty = await store.chunk_owners()
        assert empty.keys.shape == empty.owners.shape == (0,)
        assert empty.document_ids == [] and empty.fields == []
        fielded = {"fields": {"team": "red", "year": 2020, "tags": ["a", "b"]}, "pages": 3}
        doc, chunks, terms = make_document("a.md", ["alpha one", "alpha two"])
        await put_document(store, doc.model_copy(update={"metadata": fielded}), chunks, terms)
        await put(store, "b.txt", ["beta"])
        await put(store, "c.txt", ["gamma", "delta", "epsilon"])
        await store.delete_documents(["c.txt"])
        owners = await store.chunk_owners()
        assert owners.keys.dtype == np.int64 and owners.owners.dtype == np.int64
        assert sorted(owners.document_ids) == ["doc:a.md", "doc:b.txt"]
        by_id = dict(zip(owners.document_ids, owners.fields, strict=True))
        # Only the fields, as stored: other metadata keys are not fields.
        assert by_id == {"doc:a.md": fielded["fields"], "doc:b.txt": {}}
        stored = {s.key: s.document_id async for batch in store.iter_chunks() for s in batch}
        got = {
            int(k): owners.document_ids[int(o)]
            for k, o in zip(owners.keys, owners.owners, strict=True)
        }
        assert got == stored and len(got) == 3
