"""A clearance defines the corpus: a cleared caller sees of a collection exactly what it
would see of a collection holding only the documents it is cleared for.

Collection A holds documents at every sensitivity level; collection B, for each
clearance, holds only the documents at or below it: the same ids, texts and
fields, written in the same batches, in the same order. A caller with that
clearance must get the same ids, order, scores (bit for bit), evidence, passages
and counts from A as from B, on every search path and on the live index (several
segments, writes after open, a merge, replaced and deleted documents).
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import groundkit.sync as gks
from groundkit import (
    SENSITIVITY_LEVELS,
    ChunkingConfig,
    Collection,
    CrossEncoderReranker,
    SearchResponse,
    search_collections,
)
from groundkit.cli import main as cli_main
from groundkit.retrieval.evidence import load_evidence
from tests.retrieval.conftest import TinyCrossEncoders
from tests.support import ToyEmbedder

CHUNKING = ChunkingConfig(max_chars=120, overlap_chars=0)
# Hidden documents lean on the first few words and run longer, so counting them
# moves every statistic a score is made of (N, average length, document frequency).
VOCABULARY = (
    "solar",
    "panel",
    "wind",
    "turbine",
    "grid",
    "storage",
    "battery",
    "inverter",
    "meter",
    "tariff",
    "roof",
    "shed",
    "kettle",
    "tea",
    "bread",
    "oven",
    "yeast",
    "dough",
    "river",
    "bridge",
    "tunnel",
    "road",
    "rail",
    "station",
    "harbour",
    "ledger",
    "budget",
    "audit",
    "invoice",
    "contract",
)
QUERY_WORDS = (*VOCABULARY, "unheard")
CLEARANCES = ("public", "internal")
FILTERS: tuple[dict[str, Any] | None, ...] = (
    None,
    {"topic": "a"},
    {"topic": {"in": ["b", "c"]}},
)
MODES = ("bm25", "dense", "hybrid")


def _text(rng: random.Random, level: str) -> str:
    rank = SENSITIVITY_LEVELS.index(level)
    words = rng.randint(4, 30 + 25 * rank)
    skewed = VOCABULARY[: 8 - rank]
    out = [
        rng.choice(skewed) if rank and rng.random() < 0.3 + 0.15 * rank else rng.choice(VOCABULARY)
        for _ in range(words)
    ]
    return " ".join(out)


@dataclass
class Record:
    id: str
    level: str
    text: str
    topic: str

    def payload(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"topic": self.topic}
        if self.level != "public" or self.id.endswith(("0", "3", "6")):
            fields["sensitivity"] = self.level  # some public documents carry no label
        return {"id": self.id, "text": self.text, "fields": fields}


@dataclass
class Write:
    """One write, applied to every collection that may hold its documents."""

    add: list[Record] = field(default_factory=list)
    delete: list[Record] = field(default_factory=list)


def _scenario(seed: int) -> tuple[list[Write], list[Write], list[Write]]:
    """Writes before the readers open, writes after (a merge runs between the two
    of them), and the small second collection's writes."""
    rng = random.Random(seed)
    made: list[Record] = []

    def new(n: int) -> list[Record]:
        out = []
        for _ in range(n):
            level = rng.choices(SENSITIVITY_LEVELS, weights=(45, 20, 15, 20))[0]
            record = Record(
                f"{level[0]}{len(made):03d}", level, _text(rng, level), rng.choice("abc")
            )
            made.append(record)
            out.append(record)
        return out

    def changed(records: Sequence[Record]) -> list[Record]:
        return [Record(r.id, r.level, _text(rng, r.level), r.topic) for r in records]

    before = [Write(add=new(24)), Write(add=new(20))]
    first = list(made)
    rng.shuffle(first)
    after = [
        Write(add=new(14) + changed(first[:8])),
        Write(add=new(10)),
        Write(delete=first[8:14]),
        Write(add=changed(first[14:18])),
        # Writes no cleared caller may read: they must move nothing it sees.
        Write(add=[r for r in new(6) if r.level == "restricted"]),
        Write(delete=[r for r in first[18:] if r.level == "restricted"][:2]),
    ]
    side = [Write(add=new(12))]
    return before, after, side


BEFORE, AFTER, SIDE = _scenario(20260301)


def _allowed(record: Record, clearance: str | None) -> bool:
    if clearance is None:
        return True
    return SENSITIVITY_LEVELS.index(record.level) <= SENSITIVITY_LEVELS.index(clearance)


async def _apply(col: Collection, write: Write, clearance: str | None) -> None:
    adds = [r.payload() for r in write.add if _allowed(r, clearance)]
    deletes = [r.id for r in write.delete if _allowed(r, clearance)]
    if adds:
        report = await col.add_documents(adds)
        assert not report.failed
    if deletes:
        assert len((await col.delete(records=deletes)).deleted) == len(deletes)


@dataclass
class World:
    """Collection A (``a``) and, per clearance, the collection B of what it may read."""

    root: Path
    embedder: ToyEmbedder
    # (store, clearance) -> an open reader; store "a" or "b-<level>", clearance None or a level.
    readers: dict[tuple[str, str | None], Collection] = field(default_factory=dict, repr=False)
    sides: dict[tuple[str, str | None], Collection] = field(default_factory=dict, repr=False)
    past: datetime | None = None
    merged: bool = False

    def index(self, store: str) -> Path:
        return self.root / store

    def pair(self, clearance: str) -> tuple[Collection, Collection]:
        """A as the cleared caller sees it, and B as the same caller sees it."""
        return self.readers["a", clearance], self.readers[f"b-{clearance}", clearance]


STORES: dict[str, str | None] = {"a": None, **{f"b-{c}": c for c in CLEARANCES}}


async def _build(root: Path) -> World:
    world = World(root, ToyEmbedder())

    def opened(store: str, name: str, clearance: str | None = None) -> Any:
        return Collection.open(
            world.index(store),
            name,
            base_dir=root,
            chunking=CHUNKING,
            embedder=world.embedder,
            clearance=clearance,
        )

    writers = {store: await opened(store, "main") for store in STORES}
    try:
        for write in BEFORE:
            for store, holds in STORES.items():
                await _apply(writers[store], write, holds)
        for store, holds in STORES.items():
            side = await opened(store, "side")
            for write in SIDE:
                await _apply(side, write, holds)
            await side.close()
        # Readers open now and search once: what follows reaches them as writes made
        # after open (new segments, overlays, a merge adopted from the files).
        for store in STORES:
            for clearance in (None, *CLEARANCES):
                reader = await opened(store, "main", clearance)
                world.readers[store, clearance] = reader
                world.sides[store, clearance] = await opened(store, "side", clearance)
                await reader.search("solar", 3)
        await asyncio.sleep(0.05)
        world.past = datetime.now(UTC)
        await asyncio.sleep(0.05)
        for number, write in enumerate(AFTER):
            for store, holds in STORES.items():
                await _apply(writers[store], write, holds)
                if number == 0:
                    world.merged = (await writers[store].optimize()).merged
    finally:
        for writer in writers.values():
            await writer.close()
    return world


async def _close(world: World) -> None:
    for col in (*world.readers.values(), *world.sides.values()):
        await col.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    built = gks.run(_build(tmp_path_factory.mktemp("clearance-statistics")))
    try:
        yield built
    finally:
        gks.run(_close(built))


def _seen(response: SearchResponse) -> tuple[list[dict[str, Any]], int, dict[str, Any]]:
    """Everything a caller reads in a response but the clock: results whole (scores,
    evidence, highlights, passages), the count, the metadata."""
    meta = {k: v for k, v in response.metadata.items() if k not in ("latency_ms", "timings_ms")}
    return [r.model_dump() for r in response.results], response.total_results, meta


async def _search(col: Collection, query: str, k: int, **options: Any) -> Any:
    response = await col.search(query, k, **options)
    await load_evidence(response.results)
    return _seen(response)


async def _same(world: World, clearance: str, query: str, k: int, **options: Any) -> None:
    a, b = world.pair(clearance)
    seen_a = await _search(a, query, k, **options)
    seen_b = await _search(b, query, k, **options)
    assert seen_a == seen_b, (clearance, query, k, options)
    # And the same as B read with no clearance at all (nothing in B is above it).
    results, total, _ = await _search(world.readers[f"b-{clearance}", None], query, k, **options)
    assert (results, total) == seen_a[:2]


def _options(mode: str, filters: Mapping[str, Any] | None, past: datetime | None) -> dict[str, Any]:
    options: dict[str, Any] = {"mode": mode}
    if filters is not None:
        options["filters"] = filters
    if past is not None and mode == "bm25":
        options["as_of"] = past
    return options


@settings(max_examples=60)
@given(
    words=st.lists(st.sampled_from(QUERY_WORDS), min_size=1, max_size=5),
    k=st.integers(1, 30),
    clearance=st.sampled_from(CLEARANCES),
    mode=st.sampled_from(MODES),
    filters=st.sampled_from(FILTERS),
    in_the_past=st.booleans(),
)
def test_a_cleared_caller_sees_the_collection_of_what_it_may_read(
    world: World,
    words: list[str],
    k: int,
    clearance: str,
    mode: str,
    filters: dict[str, Any] | None,
    in_the_past: bool,
) -> None:
    options = _options(mode, filters, world.past if in_the_past else None)
    gks.run(_same(world, clearance, " ".join(words), k, **options))


FIXED = (
    "solar",
    "solar panel",
    "ledger budget audit",
    "kettle tea bread",
    " ".join(VOCABULARY),
    "unheard solar unheard",
)


@pytest.mark.parametrize("clearance", CLEARANCES)
@pytest.mark.parametrize("mode", MODES)
def test_fixed_queries(world: World, clearance: str, mode: str) -> None:
    async def run() -> None:
        for query in FIXED:
            for k in (1, 5, 100):
                for filters in FILTERS:
                    await _same(world, clearance, query, k, **_options(mode, filters, None))
                    if mode == "bm25":
                        await _same(
                            world, clearance, query, k, **_options(mode, filters, world.past)
                        )

    gks.run(run())


@pytest.mark.parametrize("clearance", CLEARANCES)
def test_steps_after_ranking(world: World, clearance: str) -> None:
    """expand, mmr and reorder work on what the ranking gave: the same in A and B."""

    async def run() -> None:
        for mode in MODES:
            for query in FIXED[:4]:
                await _same(world, clearance, query, 8, mode=mode, expand="window")
                await _same(world, clearance, query, 8, mode=mode, expand="parent")
                await _same(world, clearance, query, 8, mode=mode, mmr=0.5)
                await _same(world, clearance, query, 8, mode=mode, reorder="lost-in-the-middle")

    gks.run(run())


def test_the_live_index_was_exercised(world: World) -> None:
    """The readers searched across segments: written after they opened, merged, with
    replaced and deleted documents marked in overlays."""

    async def run() -> None:
        assert world.merged
        for key in (("a", "public"), ("a", "internal")):
            retriever = await world.readers[key].retriever()
            index = retriever.lexical.index
            assert len(index.views) >= 2, key
            assert any(v.dead_docs for v in index.views), key

    gks.run(run())


def test_hidden_documents_move_unrestricted_scores(world: World) -> None:
    """The scenario is not trivial: counted, the hidden documents change the scores."""

    async def run() -> None:
        everything = await _search(world.readers["a", None], "ledger budget", 5)
        cleared = await _search(world.readers["b-public", None], "ledger budget", 5)
        assert [r["score"] for r in everything[0]] != [r["score"] for r in cleared[0]]

    gks.run(run())


@pytest.mark.parametrize("clearance", CLEARANCES)
def test_search_collections(world: World, clearance: str) -> None:
    async def run() -> None:
        a = [world.readers["a", clearance], world.sides["a", clearance]]
        b = [world.readers[f"b-{clearance}", clearance], world.sides[f"b-{clearance}", clearance]]
        for mode in MODES:
            for query in FIXED:
                found_a = await search_collections(a, query, 12, mode=mode)  # type: ignore[arg-type]
                found_b = await search_collections(b, query, 12, mode=mode)  # type: ignore[arg-type]
                for found in (found_a, found_b):
                    found.metadata.pop("latency_ms")
                assert found_a.model_dump() == found_b.model_dump(), (mode, query)

    gks.run(run())


def test_rerank(world: World, tiny_cross_encoders: TinyCrossEncoders) -> None:
    async def run() -> None:
        reranker = CrossEncoderReranker(str(tiny_cross_encoders.single))
        for clearance in CLEARANCES:
            opened = [
                await Collection.open(
                    world.index(store),
                    "main",
                    embedder=world.embedder,
                    reranker=reranker,
                    clearance=clearance,
                )
                for store in ("a", f"b-{clearance}")
            ]
            try:
                for mode in MODES:
                    for query in FIXED[:4]:
                        a, b = [await _search(c, query, 6, mode=mode, rerank=True) for c in opened]
                        assert a == b, (clearance, mode, query)
            finally:
                for col in opened:
                    await col.close()

    gks.run(run())


@pytest.mark.parametrize("clearance", CLEARANCES)
def test_counts(world: World, clearance: str) -> None:
    """verify(), list_collections over MCP, the registry's full description and
    ``grk collections`` count what the caller may read: B's numbers, not A's."""
    pytest.importorskip("mcp")
    from groundkit.service import CollectionRegistry
    from tests.service.test_server import call, connected

    async def listed(store: str, with_clearance: bool) -> dict[str, dict[str, Any]]:
        registry = CollectionRegistry(
            world.index(store), clearance=clearance if with_clearance else None
        )
        async with connected(registry) as client:
            found = await call(client, "list_collections")
        return {c["name"]: c for c in found["collections"]}

    async def described(store: str, with_clearance: bool = True) -> dict[str, Any]:
        registry = CollectionRegistry(
            world.index(store), clearance=clearance if with_clearance else None
        )
        try:
            return {
                n: (await registry.describe(n, full=True)).model_dump(exclude={"base_dir", "name"})
                for n in ("main", "side")
            }
        finally:
            await registry.close()

    async def run() -> None:
        a, b = world.pair(clearance)
        report_a, report_b = await a.verify_all(), await b.verify_all()
        assert (report_a.verified, report_a.moved, report_a.drifted, report_a.unresolvable) == (
            report_b.verified,
            report_b.moved,
            report_b.drifted,
            report_b.unresolvable,
        )
        assert (await a.retriever()).size == (await b.retriever()).size > 0
        cleared_a = await listed("a", True)
        assert cleared_a == await listed(f"b-{clearance}", True)
        plain_b = await listed(f"b-{clearance}", False)
        for name, entry in cleared_a.items():
            assert (entry["documents"], entry["chunks"]) == (
                plain_b[name]["documents"],
                plain_b[name]["chunks"],
            )
            assert entry["documents"] > 0 and entry["chunks"] > 0
            # Figures of the store as a whole (its writes, its bytes) are not shown.
            assert entry["generation"] is None and entry["size_bytes"] is None
        full = await described("a")
        assert full == await described(f"b-{clearance}")
        plain = await described(f"b-{clearance}", with_clearance=False)
        for name, info in full.items():
            counted = ("documents", "chunks", "past_versions")
            assert [info[c] for c in counted] == [plain[name][c] for c in counted]
        assert full["main"]["past_versions"] > 0

    gks.run(run())
    out = {}
    for store in ("a", f"b-{clearance}"):
        printed = StringIO()
        with redirect_stdout(printed):
            code = cli_main(
                [
                    "collections",
                    "--json",
                    "--clearance",
                    clearance,
                    "--index-dir",
                    str(world.index(store)),
                ]
            )
        assert code == 0
        out[store] = [
            {k: v for k, v in c.items() if k != "base_dir"}
            for c in json.loads(printed.getvalue())["collections"]
        ]
    assert out["a"] == out[f"b-{clearance}"]


def test_mcp_search(world: World) -> None:
    """The search tool's scores, counts and figures, through the server."""
    pytest.importorskip("mcp")
    from groundkit.service import CollectionRegistry
    from tests.service.test_server import call, connected

    async def searched(store: str, clearance: str) -> list[dict[str, Any]]:
        registry = CollectionRegistry(
            world.index(store), clearance=clearance, embedder_for=lambda _: world.embedder
        )
        out = []
        async with connected(registry) as client:
            for mode in MODES:
                for query in FIXED:
                    found = await call(client, "search", query=query, collection="main", mode=mode)
                    found.pop("latency_ms")
                    out.append(found)
        return out

    async def run() -> None:
        for clearance in CLEARANCES:
            assert await searched("a", clearance) == await searched(f"b-{clearance}", clearance)

    gks.run(run())


def test_a_degraded_notice_counts_nothing_hidden(tmp_path: Path) -> None:
    """A vector side gone missing is told without the store's row counts, which
    include documents above the clearance."""
    records = [r for w in BEFORE for r in w.add]

    async def notices(store: str, holds: str | None) -> list[str]:
        index = tmp_path / store
        embedder = ToyEmbedder()
        async with Collection.open(index, "main", base_dir=tmp_path, embedder=embedder) as col:
            await col.add_documents([r.payload() for r in records if _allowed(r, holds)])
        shutil.rmtree(index / "main.lance")
        async with Collection.open(index, "main", embedder=embedder, clearance="public") as col:
            found = [await col.search("solar", 5, mode=m) for m in ("dense", "hybrid")]
        return [f.metadata["degraded"] for f in found]

    async def run() -> None:
        assert await notices("a", None) == await notices("b", "public")

    gks.run(run())
