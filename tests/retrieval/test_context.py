"""``search(expand=...)`` end to end: passages rebuilt from stored chunks, exactly.

Every passage is the slice of the file on disk it says it is, holds its result's
own span, never crosses a heading, and is the whole section (``parent``) or the
chunks either side (``window``) as far as ``context_max_chars`` allows; hits inside
a returned passage are folded into it and named by ``context.collapsed``; an
``as_of`` search expands from the version it found (adr/0046-structure-chunking.md).
"""

from __future__ import annotations

import asyncio
import tempfile
from datetime import UTC, datetime, timedelta
from itertools import pairwise, permutations
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groundkit import (
    ChunkingConfig,
    Collection,
    RetrievalConfig,
    RetrievalError,
    RetrievalResult,
    SearchResponse,
)
from groundkit.contracts import ContextKind
from groundkit.ingestion import markdown_outline
from groundkit.ingestion.chunking import heading_starts
from groundkit.retrieval.context import section_bounds
from groundkit.storage.protocols import StoredChunk
from tests.support import write_tree

SENTENCES = ChunkingConfig(strategy="sentence", max_chars=200)

CORPUS: dict[str, str] = {
    "guide.md": (
        "# Lighthouse guide\n\n"
        "The harbour light guides every ship home. Keepers trim the wick at dusk. "
        "The lamp burns whale oil.\n\n"
        "## Keeping the light\n\n"
        "A keeper climbs the tower each evening. The keeper winds the clockwork twice. "
        "The keeper logs every ship that passes.\n"
        "Fog means the keeper rings the bell.\n\n"
        "## Fog signals\n\n"
        "Fog horns sound every minute in fog. The bell rings when fog hides the light. "
        "Ships answer the fog horn with their own horns.\n\n"
        "### Old signals\n\n"
        "Cannons once warned ships in fog. Keepers fired the fog cannon by hand.\n"
    ),
    "ships.md": (
        "Intro before any heading: every ship keeps a log. The log names the keeper.\n\n"
        "# Ships\n\n"
        "A ship at sea watches for the light. Sailors trust the keeper of the light.\n\n"
        "  ## Night watch\n\n"
        "The night watch counts the flashes of the light. The ship steers by the light "
        "and the fog horn. A keeper answers the radio when fog is thick.\n"
    ),
    "crlf.md": (
        "Tea notes\r\n=========\r\n\r\nGreen tea steeps briefly. Black tea steeps longer.\r\n"
        "Oolong sits between them.\r\n\r\nBoiling\r\n-------\r\n\r\n"
        "Water for green tea stays below boiling. Black tea wants water at a full boil.\r\n"
    ),
    "long.md": (
        "# Long section\n\n"
        + " ".join(
            f"Fact {i} says the keeper polished lens {i} before the ship came." for i in range(40)
        )
        + "\n\n# After\n\nThe keeper rested after the long section ended.\n"
    ),
}
QUERIES = ["keeper", "fog ship", "light", "tea water boiling", "keeper lens polished", "bell"]


def source_text(base: Path, source: str) -> str:
    """The file as ingested: raw bytes decoded, no newline translation."""
    return (base / source).read_bytes().decode("utf-8")


def skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


async def chunks_of(col: Collection, document_id: str) -> list[StoredChunk]:
    return (await col.store.get_chunks_for_documents([document_id]))[document_id]


def inside(result: RetrievalResult, holder: RetrievalResult) -> bool:
    ctx = holder.context
    assert ctx is not None
    return (
        result.document_id == holder.document_id
        and ctx.start_offset <= result.start_offset
        and result.end_offset <= ctx.end_offset
    )


async def check_context(
    col: Collection,
    base: Path,
    result: RetrievalResult,
    kind: ContextKind,
    retrieval: RetrievalConfig,
    *,
    structured: bool = True,
) -> None:
    """The passage of ``result`` is exact and is the one its kind asks for."""
    ctx = result.context
    assert ctx is not None and ctx.kind == kind
    text = source_text(base, result.source)
    assert text[ctx.start_offset : ctx.end_offset] == ctx.content
    assert text[result.start_offset : result.end_offset] == result.content
    assert ctx.start_offset <= result.start_offset and result.end_offset <= ctx.end_offset
    outline = markdown_outline(text)
    if structured and [h for h in heading_starts(outline) if ctx.start_offset < h < ctx.end_offset]:
        # Only a chunk joining small sections crosses a heading (adr/0096), and no other
        # chunk starts in its first section: its passage is the chunk alone.
        assert ctx.chunk_ids == (result.chunk_id,), ctx
        return
    chunks = await chunks_of(col, result.document_id)
    ids = [c.chunk_id for c in chunks]
    first = ids.index(ctx.chunk_ids[0])
    assert list(ctx.chunk_ids) == ids[first : first + len(ctx.chunk_ids)]
    assert chunks[first].start_offset == ctx.start_offset
    assert chunks[first + len(ctx.chunk_ids) - 1].end_offset == ctx.end_offset
    assert result.chunk_id in ctx.chunk_ids
    assert len(ctx.content) <= max(retrieval.context_max_chars, len(result.content))
    if not structured:
        return
    own = ids.index(result.chunk_id)
    sec_start, sec_end = section_bounds({"headings": outline}, result.start_offset)
    section = [
        i
        for i, c in enumerate(chunks)
        if c.start_offset >= sec_start and (sec_end is None or c.start_offset < sec_end)
    ]
    if kind == "window":
        section = [i for i in section if abs(i - own) <= retrieval.context_window]
    taken = list(range(first, first + len(ctx.chunk_ids)))
    assert set(taken) <= set(section)
    fits = chunks[section[-1]].end_offset - chunks[section[0]].start_offset
    if fits <= retrieval.context_max_chars:
        assert taken == section
        if kind == "parent":  # the whole section under the innermost heading
            end = len(text) if sec_end is None else sec_end
            assert ctx.content == text[sec_start:end].strip()
            assert ctx.start_offset == skip_space(text, sec_start)


def check_collapsing(
    plain: SearchResponse, expanded: SearchResponse, top_k: int, *, symmetric: bool = True
) -> None:
    """The returned results are the first ``top_k`` hits of the plain ranking not inside
    an earlier one's passage; every hit inside one is named by its ``collapsed``."""
    order = [r.chunk_id for r in plain.results]
    by_id = {r.chunk_id: r for r in plain.results}
    results = expanded.results
    assert len(results) <= top_k
    returned = [r.chunk_id for r in results]
    assert len(set(returned)) == len(returned)
    kept: list[RetrievalResult] = []
    folded: dict[str, list[str]] = {}
    for hit in plain.results:
        home = next((k for k in kept if inside(hit, k)), None)
        if home is not None:
            folded.setdefault(home.chunk_id, []).append(hit.chunk_id)
        elif len(kept) < top_k:
            kept.append(next(r for r in results if r.chunk_id == hit.chunk_id))
    assert [k.chunk_id for k in kept] == returned
    for result in results:
        assert result.context is not None
        collapsed = list(result.context.collapsed)
        assert collapsed == folded.get(result.chunk_id, [])
        for chunk_id in collapsed:
            assert chunk_id not in returned
            assert order.index(chunk_id) > order.index(result.chunk_id)
            assert inside(by_id[chunk_id], result)
    if symmetric:
        for a, b in permutations(results, 2):
            assert not inside(a, b), (a.chunk_id, b.chunk_id)


@pytest.fixture
def base(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    write_tree(root, CORPUS)
    return root


async def _opened(
    tmp_path: Path,
    base: Path,
    chunking: ChunkingConfig = SENTENCES,
    retrieval: RetrievalConfig | None = None,
) -> Collection:
    col = await Collection.open(
        tmp_path / "index", base_dir=base, chunking=chunking, retrieval=retrieval
    )
    report = await col.ingest(base)
    assert not report.failed and len(report.added) >= len(CORPUS)
    return col


@pytest.mark.parametrize("kind", ["parent", "window"])
@pytest.mark.parametrize("window", [1, 2])
async def test_passages_are_exact_slices_of_the_file(
    tmp_path: Path, base: Path, kind: ContextKind, window: int
) -> None:
    retrieval = RetrievalConfig(context_window=window, context_max_chars=4000)
    col = await _opened(tmp_path, base, retrieval=retrieval)
    try:
        checked = 0
        for query in QUERIES:
            for top_k in (1, 3, 10):
                response = await col.search(query, top_k, expand=kind)
                assert response.results, query
                assert response.metadata["steps"] == [f"expand:{kind}"]
                for result in response.results:
                    await check_context(col, base, result, kind, retrieval)
                    checked += 1
                plain = await col.search(query, retrieval.postprocess_candidates)
                check_collapsing(plain, response, top_k)
        assert checked > 20
    finally:
        await col.close()


async def test_parent_is_the_section_and_window_its_neighbours(tmp_path: Path, base: Path) -> None:
    col = await _opened(tmp_path, base)
    try:
        text = CORPUS["guide.md"]
        hit = next(
            r
            for r in (await col.search("clockwork", 5)).results
            if "clockwork" in r.content and r.source == "guide.md"
        )
        section = text[text.index("## Keeping") : text.index("## Fog")].strip()
        parent = (await col.search("clockwork", 1, expand="parent")).results[0]
        assert parent.chunk_id == hit.chunk_id and parent.context is not None
        assert parent.context.content == section
        window = (await col.search("clockwork", 1, expand="window")).results[0]
        assert window.context is not None
        # Two sentences either side, within the section: the heading joined to the first.
        assert window.context.content == section
        assert len(window.context.chunk_ids) == 4
        # An indented heading starts its section's passage at the hash.
        night = (await col.search("flashes", 1, expand="parent")).results[0]
        assert night.context is not None
        assert night.context.content.startswith("## Night watch\n\nThe night watch")
        # A passage never reaches back over a heading into the preamble.
        intro = (await col.search("intro heading", 1, expand="parent")).results[0]
        assert intro.context is not None
        assert intro.context.content == CORPUS["ships.md"].split("\n\n# Ships")[0]
    finally:
        await col.close()


async def test_collapsed_hits_are_named_and_top_k_is_kept(tmp_path: Path, base: Path) -> None:
    col = await _opened(tmp_path, base)
    try:
        plain = await col.search("fog", 50)
        fog_chunks = [r for r in plain.results if r.source == "guide.md"]
        assert len(fog_chunks) >= 4
        expanded = await col.search("fog", 2, expand="parent")
        assert len(expanded.results) == 2
        check_collapsing(plain, expanded, 2)
        collapsed = [
            c for r in expanded.results for c in (r.context.collapsed if r.context else ())
        ]
        assert collapsed, "hits of one section fold into one passage"
        # One result per section: never the same section twice.
        sections = {
            (r.source, r.context.start_offset) for r in expanded.results if r.context is not None
        }
        assert len(sections) == len(expanded.results)
    finally:
        await col.close()


async def test_a_long_section_is_cut_to_context_max_chars(tmp_path: Path, base: Path) -> None:
    retrieval = RetrievalConfig(context_max_chars=300, context_window=50)
    col = await _opened(tmp_path, base, retrieval=retrieval)
    try:
        for kind in ("parent", "window"):
            response = await col.search("keeper lens polished", 10, expand=kind)
            long_hits = [r for r in response.results if r.source == "long.md"]
            assert long_hits
            for result in response.results:
                await check_context(col, base, result, kind, retrieval)
                assert result.context is not None
                assert len(result.context.content) <= 300
            plain = await col.search("keeper lens polished", retrieval.postprocess_candidates)
            # Truncated passages may reach a hit that kept its own: only later hits fold.
            check_collapsing(plain, response, 10, symmetric=False)
    finally:
        await col.close()


async def test_adjacent_chunks_rebuild_into_one_passage(tmp_path: Path) -> None:
    """CJK sentences and hard-cut words leave nothing between chunks: still one passage."""
    base = tmp_path / "corpus"
    cjk = "# 东京\n\n东京很大。东京的地铁很快。东京的夜晚很亮。\n"
    long_word = "# Word\n\n" + "k" * 150 + "\n"
    write_tree(base, {"cjk.md": cjk, "word.md": long_word})
    chunking = ChunkingConfig(strategy="sentence", max_chars=60)
    async with Collection.open(tmp_path / "index", base_dir=base, chunking=chunking) as col:
        await col.ingest(base)
        for query, text in (("地铁", cjk), ("k" * 60, long_word)):
            for kind in ("parent", "window"):
                results = (await col.search(query, 1, expand=kind)).results
                assert results, query
                hit = results[0]
                chunks = await chunks_of(col, hit.document_id)
                assert any(a.end_offset == b.start_offset for a, b in pairwise(chunks))
                assert hit.context is not None
                assert hit.context.content == text.strip(), (query, kind)
                assert len(hit.context.chunk_ids) == len(chunks) > 1


@pytest.mark.parametrize("overlap", [0, 30])
async def test_fixed_chunks_expand_with_overlaps_merged(
    tmp_path: Path, base: Path, overlap: int
) -> None:
    chunking = ChunkingConfig(strategy="fixed", max_chars=90, overlap_chars=overlap)
    retrieval = RetrievalConfig()
    # Short sentences: neighbouring fixed chunks share one or two of them.
    short = " ".join(f"Fog bell {i} rang. The keeper woke." for i in range(12))
    (base / "short.md").write_text(f"# Fog bells\n\n{short}\n", encoding="utf-8")
    col = await _opened(tmp_path, base, chunking=chunking, retrieval=retrieval)
    try:
        overlapping = 0
        for query in QUERIES:
            for kind in ("parent", "window"):
                response = await col.search(query, 5, expand=kind)
                assert response.results
                for result in response.results:
                    await check_context(col, base, result, kind, retrieval, structured=False)
                    chunks = {c.chunk_id: c for c in await chunks_of(col, result.document_id)}
                    assert result.context is not None
                    run = [chunks[i] for i in result.context.chunk_ids]
                    overlapping += sum(a.end_offset > b.start_offset for a, b in pairwise(run))
                plain = await col.search(query, retrieval.postprocess_candidates)
                check_collapsing(plain, response, 5, symmetric=False)
        if overlap:
            assert overlapping > 0, "some passage merged overlapping chunks"
    finally:
        await col.close()


MOMENTS = [datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC)]
OLD = (
    "# Lamp\n\nThe old lamp burned whale oil. The keeper trimmed the lamp wick.\n\n"
    "## Oil\n\nWhale oil smoked. The keeper cleaned the glass of the lamp daily.\n"
)
NEW = (
    "Preface added later to move every offset along. The lamp is electric now.\n\n"
    "# Lamp\n\nThe new lamp runs on mains power. The keeper checks the lamp bulb.\n\n"
    "## Power\n\nA generator backs up the mains supply of the lamp.\n"
)


async def test_as_of_expands_from_the_version_it_found(tmp_path: Path) -> None:
    base = tmp_path / "corpus"
    base.mkdir()
    path = base / "lamp.md"
    col = await Collection.open(tmp_path / "index", base_dir=base, chunking=SENTENCES)
    try:
        path.write_text(OLD, encoding="utf-8")
        await col.ingest(base, valid_as_of=MOMENTS[0])
        path.write_text(NEW, encoding="utf-8")
        report = await col.ingest(base, valid_as_of=MOMENTS[1])
        assert report.updated == ["lamp.md"]
        between = MOMENTS[0] + timedelta(days=3)
        for kind in ("parent", "window"):
            past = await col.search("keeper lamp", 5, as_of=between, expand=kind)
            assert past.results
            for result in past.results:
                assert result.version == 1
                ctx = result.context
                assert ctx is not None
                assert OLD[ctx.start_offset : ctx.end_offset] == ctx.content
                assert OLD[result.start_offset : result.end_offset] == result.content
                assert ctx.start_offset <= result.start_offset <= result.end_offset
                assert result.end_offset <= ctx.end_offset
                for chunk_id in ctx.chunk_ids:
                    row = await col.store.get_chunk(chunk_id, 1)
                    assert row is not None and row.version == 1
                    assert OLD[row.start_offset : row.end_offset] == row.content
            keeper = next(r for r in past.results if "trimmed" in r.content)
            assert keeper.context is not None
            assert keeper.context.content == OLD[: OLD.index("## Oil")].strip()
            now = await col.search("keeper lamp", 5, expand=kind)
            for result in now.results:
                assert result.version == 2 and result.context is not None
                ctx = result.context
                assert NEW[ctx.start_offset : ctx.end_offset] == ctx.content
    finally:
        await col.close()


@pytest.mark.parametrize("bad", ["section", "", "PARENT", 1, True])
async def test_a_bad_expand_is_a_retrieval_error(tmp_path: Path, base: Path, bad: Any) -> None:
    col = await _opened(tmp_path, base)
    try:
        with pytest.raises(RetrievalError, match="expand must be one of"):
            await col.search("keeper", 3, expand=bad)
    finally:
        await col.close()


# --- generated documents --------------------------------------------------------

_VOCAB = ["keeper", "light", "fog", "ship", "bell", "tower", "lamp", "oil", "东京", "x" * 60]
_SENTENCE = st.builds(
    lambda words, end: " ".join(words) + end,
    st.lists(st.sampled_from(_VOCAB), min_size=1, max_size=9),
    st.sampled_from([".", "!", "?", "。", ""]),
)
_BLOCK = st.one_of(
    st.builds(" ".join, st.lists(_SENTENCE, min_size=1, max_size=5)),
    st.builds(
        lambda indent, level, word: " " * indent + "#" * level + " " + word.title(),
        st.integers(0, 3),
        st.integers(1, 4),
        st.sampled_from(_VOCAB[:7]),
    ),
)
_DOCUMENT = st.builds(
    lambda blocks, sep: sep.join(blocks) + "\n",
    st.lists(_BLOCK, min_size=1, max_size=10),
    st.sampled_from(["\n\n", "\n", "\r\n\r\n"]),
).filter(lambda text: any(word in text for word in _VOCAB[:8]))


async def _generated(
    docs: list[str],
    chunking: ChunkingConfig,
    retrieval: RetrievalConfig,
    kind: ContextKind,
    queries: list[str],
) -> int:
    checked = 0
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch) / "corpus"
        write_tree(base, {f"d{i}.md": doc for i, doc in enumerate(docs)})
        async with Collection.open(
            Path(scratch) / "index", base_dir=base, chunking=chunking, retrieval=retrieval
        ) as col:
            await col.ingest(base)
            for query in queries:
                response = await col.search(query, 4, expand=kind)
                for result in response.results:
                    await check_context(
                        col, base, result, kind, retrieval, structured=chunking.strategy != "fixed"
                    )
                    checked += 1
                plain = await col.search(query, retrieval.postprocess_candidates)
                check_collapsing(plain, response, 4, symmetric=False)
    return checked


@settings(max_examples=50, deadline=None)
@given(
    docs=st.lists(_DOCUMENT, min_size=1, max_size=3),
    strategy=st.sampled_from(["sentence", "structure", "fixed"]),
    max_chars=st.integers(40, 200),
    window=st.integers(1, 3),
    context_max_chars=st.integers(32, 600),
    kind=st.sampled_from(["parent", "window"]),
    queries=st.lists(st.sampled_from(_VOCAB[:8]), min_size=1, max_size=3, unique=True),
)
def test_every_generated_passage_is_an_exact_slice(
    docs: list[str],
    strategy: str,
    max_chars: int,
    window: int,
    context_max_chars: int,
    kind: ContextKind,
    queries: list[str],
) -> None:
    if strategy == "sentence":
        chunking = ChunkingConfig(strategy="sentence", max_chars=max_chars)
    else:
        chunking = ChunkingConfig(
            strategy="fixed" if strategy == "fixed" else "structure",
            max_chars=max_chars,
            overlap_chars=max_chars // 4,
        )
    retrieval = RetrievalConfig(context_window=window, context_max_chars=context_max_chars)
    asyncio.run(_generated(docs, chunking, retrieval, kind, queries))
