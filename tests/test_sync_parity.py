"""One collection class, two call styles: every public async method of ``Collection``
(and of the ``Retriever`` it gives) has a blocking twin of the same name and signature
in ``groundkit.sync``, and a method added to the async class cannot be missed."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import groundkit.sync as gks
from groundkit import Collection
from groundkit.collection import COLLECTION_ATTRIBUTES
from groundkit.retrieval.search import Retriever
from groundkit.sync import SyncCollection, SyncRetriever

# Attributes of an open Collection the blocking one does not repeat: async objects
# (the stores, the event loop), reached through ``col.aio`` when needed.
NOT_MIRRORED = {"store", "vector_store", "loop"}
# The async Retriever's attributes its blocking twin leaves to ``aio``: the live
# lexical index and the rewriter are objects of the async side.
RETRIEVER_NOT_MIRRORED = {"lexical", "rewriter"}
# Where a twin returns the blocking form of what the async method returns.
RETURNS = {("retriever", "Retriever"): "SyncRetriever"}


def public_members(cls: type) -> dict[str, Any]:
    return {name: member for name, member in vars(cls).items() if not name.startswith("_")}


def parameters(function: Callable[..., Any]) -> list[tuple[str, Any, Any, Any]]:
    return [
        (p.name, p.kind, p.default, p.annotation)
        for p in inspect.signature(function).parameters.values()
    ]


def assert_twin(name: str, original: Callable[..., Any], twin: Callable[..., Any]) -> None:
    assert parameters(twin) == parameters(original), name
    want = inspect.signature(original).return_annotation
    got = inspect.signature(twin).return_annotation
    assert got == RETURNS.get((name, want), want), name
    assert inspect.getdoc(twin) == inspect.getdoc(original) or name in {"close", "retriever"}


def test_every_public_coroutine_method_of_collection_has_a_blocking_twin() -> None:
    methods = gks.coroutine_methods(Collection)
    # What the issue asked of the sync side, by name, so the list cannot shrink unseen.
    assert {"delete", "optimize", "purge_versions", "rebase", "retriever"} <= set(methods)
    for name, method in methods.items():
        twin = getattr(SyncCollection, name, None)
        assert twin is not None, f"SyncCollection has no {name}()"
        assert not inspect.iscoroutinefunction(twin), name
        assert_twin(name, method, twin)


def test_every_other_public_member_of_collection_is_there_too() -> None:
    for name, member in public_members(Collection).items():
        assert hasattr(SyncCollection, name), f"SyncCollection has no {name}"
        if isinstance(member, classmethod):
            assert_twin(name, getattr(Collection, name), getattr(SyncCollection, name))
        elif isinstance(member, property):
            assert isinstance(vars(SyncCollection)[name], property | gks._Read), name


def test_every_twin_is_written_in_the_class_body_for_type_checkers() -> None:
    # groundkit.sync fills in a twin the body forgot (so blocking code never misses
    # one); the body should still name it, or type checkers cannot see it.
    assert gks.GENERATED == (), (
        f"add `{gks.GENERATED[0]} = _blocking(...)` to the twin class in groundkit/sync.py"
    )


def test_every_public_coroutine_method_of_retriever_has_a_blocking_twin() -> None:
    methods = gks.coroutine_methods(Retriever)
    assert {"search", "refresh", "preload", "close"} <= set(methods)
    for name, method in methods.items():
        assert_twin(name, method, getattr(SyncRetriever, name))
    for name, member in public_members(Retriever).items():
        if isinstance(member, property) and name not in RETRIEVER_NOT_MIRRORED:
            assert isinstance(vars(SyncRetriever)[name], property | gks._Read), name


def test_a_method_added_to_the_async_class_gets_a_working_twin(tmp_path: Path) -> None:
    class Louder(Collection):
        async def shout(self, word: str, *, times: int = 2) -> str:
            """The collection's name, then ``word`` ``times`` times."""
            return " ".join([self.name, *[word.upper()] * times])

    class LouderTwin(SyncCollection):
        pass

    assert gks._mirror(LouderTwin, Louder) == ("shout",)
    assert_twin("shout", Louder.shout, LouderTwin.shout)  # type: ignore[attr-defined]
    home = gks.background_loop()
    opened = gks.run(Louder.open(tmp_path / "idx", "echo"), home=home)
    assert isinstance(opened, Louder)
    with LouderTwin(opened, home=home) as twin:
        assert twin.shout("hi", times=3) == "echo HI HI HI"  # type: ignore[attr-defined]


async def test_the_attributes_list_is_what_an_open_collection_has(tmp_path: Path) -> None:
    async with Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        public = {name for name in vars(col) if not name.startswith("_")}
    # What open fixes is read through properties; the rest are plain attributes.
    fixed = {"clearance", "embedder", "reranker", "rewriter"}
    assert public | fixed == COLLECTION_ATTRIBUTES
    assert all(isinstance(vars(Collection)[name], property) for name in fixed)


def test_the_blocking_collection_shows_the_same_values(tmp_path: Path) -> None:
    with gks.Collection.open(tmp_path / "idx", "notes", base_dir=tmp_path) as col:
        for name in sorted(COLLECTION_ATTRIBUTES - NOT_MIRRORED):
            assert isinstance(vars(SyncCollection).get(name), gks._Read), name
            assert getattr(col, name) == getattr(col.aio, name), name
        assert not col.closed and not col.aio.closed
    assert col.closed and col.aio.closed


def test_the_maintenance_methods_run_from_blocking_code(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "tea.md").write_text("Green tea is brewed at 80 degrees.\n", "utf-8")
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path / "src") as col:
        col.ingest(tmp_path / "src" / "tea.md")
        (tmp_path / "src" / "tea.md").write_text("Green tea wants 75 degrees.\n", "utf-8")
        col.ingest(tmp_path / "src" / "tea.md")
        assert col.purge_versions(0) == 1
        assert col.optimize().segments_after == 1
        moved = tmp_path / "moved"
        (tmp_path / "src").rename(moved)
        assert col.rebase(moved) == (1, 1)
        assert col.base_dir == moved.resolve()
        top = col.search("green tea")[0]
        assert col.verify(top).ok
        report = col.delete(sources=["tea.md"])
        assert not col.search("green tea")
        assert report.missing == []


def test_a_retriever_is_usable_from_blocking_code(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("Oolong is rolled, then roasted.\n", "utf-8")
    (tmp_path / "b.md").write_text("Rooibos is not a tea at all.\n", "utf-8")
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        col.ingest(tmp_path / "a.md")
        retriever = col.retriever()
        assert isinstance(retriever, SyncRetriever)
        assert isinstance(retriever.aio, Retriever)
        assert retriever.size == 1
        assert [r.chunk_id for r in retriever.search("oolong")] == [
            r.chunk_id for r in col.search("oolong")
        ]
        col.ingest(tmp_path / "b.md")
        assert retriever.refresh() is True
        assert retriever.search("rooibos")[0].source == "b.md"
        assert retriever.generation == col.generation()
        retriever.close()


@pytest.mark.parametrize("name", sorted(gks.coroutine_methods(Collection)))
def test_no_twin_is_a_coroutine_function(name: str) -> None:
    assert not inspect.iscoroutinefunction(getattr(SyncCollection, name))


def top_level_coroutine_functions() -> list[str]:
    import groundkit

    return sorted(
        name for name in groundkit.__all__ if inspect.iscoroutinefunction(getattr(groundkit, name))
    )


@pytest.mark.parametrize("name", top_level_coroutine_functions())
def test_every_top_level_coroutine_function_has_a_blocking_twin(name: str) -> None:
    import groundkit

    assert name in gks.__all__, f"groundkit.sync has no blocking {name}"
    twin = getattr(gks, name)
    assert not inspect.iscoroutinefunction(twin)
    original = getattr(groundkit, name)
    if name == "search_collections":  # takes blocking collections, written by hand
        assert [p.name for p in inspect.signature(twin).parameters.values()] == [
            p.name for p in inspect.signature(original).parameters.values()
        ]
    else:
        assert_twin(name, original, twin)


def test_the_receipt_functions_run_from_blocking_code(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("Oolong is partly oxidised.\n", encoding="utf-8")
    with gks.Collection.open(tmp_path / "idx", base_dir=tmp_path) as col:
        col.ingest(tmp_path / "a.md")
        hit = col.search("oolong")[0]
    written = tmp_path / "receipts.jsonl"
    gks.write_receipts(written, [hit.to_annotation()])
    receipts = gks.read_receipts(written)
    assert [r.citation for r in receipts] == [hit.citation]
    (verdict,) = gks.check_receipts(receipts, tmp_path)
    assert (verdict.verification, verdict.content) == ("verified", hit.content)
