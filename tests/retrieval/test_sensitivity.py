"""Clearances: nothing labelled above one leaves any exit of a Collection or Retriever."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from groundkit import (
    SENSITIVITY_LEVELS,
    ChunkNotFoundError,
    Collection,
    ConfigurationError,
    CrossEncoderReranker,
    IngestionError,
    RetrievalError,
    RetrievalResult,
    SentenceTransformerEmbedder,
    search_collections,
)
from groundkit.retrieval import Retriever
from tests.retrieval.conftest import TinyCrossEncoders
from tests.retrieval.fielded import CHUNKS, QUERY, write_fielded
from tests.support import write_tree

CODEWORDS = {level: f"codeword {level}" for level in SENSITIVITY_LEVELS}


def above(clearance: str) -> set[str]:
    rank = SENSITIVITY_LEVELS.index(clearance)
    return set(SENSITIVITY_LEVELS[rank + 1 :])


def leaked(texts: Sequence[str], clearance: str) -> set[str]:
    """The labels above ``clearance`` whose codeword appears in ``texts``."""
    return {level for level in above(clearance) if any(CODEWORDS[level] in t for t in texts)}


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return SentenceTransformerEmbedder("all-MiniLM-L6-v2")


@pytest.fixture
async def corpus(tmp_path: Path, minilm: SentenceTransformerEmbedder) -> Path:
    """An index of the fielded corpus with vectors; returns the index directory."""
    base = write_fielded(tmp_path / "corpus")
    index = tmp_path / "index"
    async with Collection.open(index, base_dir=base, chunking=CHUNKS, embedder=minilm) as col:
        report = await col.ingest(base)
        assert not report.failed
    return index


@pytest.fixture
async def cleared(corpus: Path, minilm: SentenceTransformerEmbedder) -> AsyncIterator[Collection]:
    async with Collection.open(corpus, embedder=minilm, clearance="internal") as col:
        yield col


async def test_without_clearance_every_label_is_searchable(
    corpus: Path, minilm: SentenceTransformerEmbedder
) -> None:
    async with Collection.open(corpus, embedder=minilm) as col:
        found = await col.search("memo budget codeword", 50)
    assert {r.fields.get("sensitivity") for r in found.results} >= set(SENSITIVITY_LEVELS)


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
async def test_search_never_returns_a_chunk_above_the_clearance(
    cleared: Collection, mode: str
) -> None:
    returned = 0
    for query in ("memo budget codeword", "codeword restricted", "confidential", QUERY):
        found = await cleared.search(query, 100, mode=mode)  # type: ignore[arg-type]
        returned += len(found.results)
        assert not leaked([r.content for r in found.results], "internal"), (mode, query)
        labels = {r.fields.get("sensitivity", "public") for r in found.results}
        assert labels <= {"public", "internal"}
    assert returned > 0


async def test_unlabelled_documents_are_public(corpus: Path, cleared: Collection) -> None:
    found = await cleared.search("plain text with no fields", 5)
    assert "plain.txt" in {r.source for r in found.results}
    async with Collection.open(corpus, clearance="public") as public:
        names = {r.source for r in (await public.search("memo codeword", 50)).results}
    assert "labels/public.md" in names and "labels/internal.md" not in names


async def test_filters_cannot_reach_above_the_clearance(cleared: Collection) -> None:
    found = await cleared.search(QUERY, 10, filters={"team": "labels"})
    assert {r.source for r in found.results} == {"labels/public.md", "labels/internal.md"}
    hidden = await cleared.search(QUERY, 10, filters={"sensitivity": "restricted"})
    assert hidden.results == []


async def test_fetch_chunk_above_the_clearance_reads_as_absent(
    corpus: Path, cleared: Collection
) -> None:
    async with Collection.open(corpus) as everything:
        secret = (
            await everything.search("codeword restricted", 1, filters={"sensitivity": "restricted"})
        ).results[0]
        assert (await everything.fetch_chunk(secret.chunk_id)).verification == "verified"
    with pytest.raises(RetrievalError) as hidden:
        await cleared.fetch_chunk(secret.chunk_id)
    with pytest.raises(RetrievalError) as missing:
        await cleared.fetch_chunk("no-such-chunk")
    assert str(hidden.value).replace(secret.chunk_id, "X") == str(missing.value).replace(
        "no-such-chunk", "X"
    )
    visible = (await cleared.search("codeword internal", 1)).results[0]
    assert (await cleared.fetch_chunk(visible.chunk_id)).verification == "verified"


async def test_an_answer_cannot_check_text_above_the_clearance(
    corpus: Path, cleared: Collection
) -> None:
    """A result object carried in from an unrestricted handle is refused, as its chunk
    id is: otherwise verdicts on guessed sentences would read the hidden text."""
    async with Collection.open(corpus) as everything:
        secret = (
            await everything.search("codeword restricted", 1, filters={"sensitivity": "restricted"})
        ).results[0]
    for guess in (secret.content, "A sentence nobody wrote."):
        with pytest.raises(ChunkNotFoundError, match="no chunk"):
            await cleared.verify_answer(
                f"{guess} [1]", [secret.model_copy(update={"content": guess})]
            )
    with pytest.raises(ChunkNotFoundError):
        await cleared.verify_answer(f"{secret.content} [1]", [secret.chunk_id])
    visible = (await cleared.search("codeword internal", 1)).results[0]
    report = await cleared.verify_answer(f"{visible.content} [1]", [visible])
    assert [s.verdict for s in report.sentences] == ["supported"]


async def test_a_citation_made_by_hand_cannot_read_another_file(tmp_path: Path) -> None:
    """An admitted document's ids with another file's source (a restricted document's,
    or one never ingested) must not make the collection read that file: the verdicts on
    guesses would otherwise spell out its text."""
    base = tmp_path / "corpus"
    secret = "The launch code is 4711-AX and the vault opens at noon."
    write_tree(
        base,
        {
            "public.md": "Public note about tea brewing temperatures.\n",
            "secret.md": f"---\nsensitivity: restricted\n---\n{secret}\n",
            "stray.md": f"{secret}\n",
        },
    )
    async with Collection.open(tmp_path / "idx", base_dir=base) as col:
        await col.ingest(base / "public.md")
        await col.ingest(base / "secret.md")
    async with Collection.open(tmp_path / "idx", base_dir=base, clearance="public") as col:
        public = (await col.search("tea brewing")).results[0]
        for source in ("secret.md", "stray.md"):
            text = (base / source).read_text("utf-8")
            start = text.index(secret)
            forged = public.citation.model_copy(
                update={"source": source, "start_offset": start, "end_offset": start + len(secret)}
            )
            checked = await col.verify(forged, content=secret)
            assert checked.verification == "unresolvable" and checked.similarity is None
            assert "clearance" in (checked.detail or "")
            carried = public.model_copy(
                update={
                    "source": source,
                    "start_offset": start,
                    "end_offset": start + len(secret),
                    "content": secret,
                }
            )
            assert carried.citation == forged
            report = await col.verify_answer(f"{secret} [1]", [carried])
            assert [s.verdict for s in report.sentences] != ["supported"]
            assert all(c.verification == "unresolvable" for c in report.citations)
        assert (await col.verify(public)).verification == "verified"


async def test_verify_covers_only_visible_chunks(corpus: Path, cleared: Collection) -> None:
    async with Collection.open(corpus) as everything:
        total = (await everything.verify_all()).verified
    (cleared.base_dir / "labels" / "restricted.md").write_text("rewritten", "utf-8")
    report = await cleared.verify_all()
    assert report.ok and report.verified == total - 2  # confidential and restricted hidden
    assert not leaked([p.content for p in report.problems], "internal")


class RecordingReranker(CrossEncoderReranker):
    """The real cross-encoder, keeping what it was asked to score."""

    seen: list[str]

    async def rerank(
        self, query: str, results: Sequence[RetrievalResult], top_k: int | None = None
    ) -> list[RetrievalResult]:
        self.seen = getattr(self, "seen", []) + [c.content for c in results]
        return await super().rerank(query, results, top_k=top_k)


async def test_reranker_input_is_cleared(
    corpus: Path, minilm: SentenceTransformerEmbedder, tiny_cross_encoders: TinyCrossEncoders
) -> None:
    reranker = RecordingReranker(str(tiny_cross_encoders.single))
    async with Collection.open(
        corpus, embedder=minilm, reranker=reranker, clearance="internal"
    ) as col:
        for mode in ("bm25", "hybrid"):
            await col.search("memo budget codeword", 5, mode=mode, rerank=True)
    assert reranker.seen and any(CODEWORDS["internal"] in t for t in reranker.seen)
    assert not leaked(reranker.seen, "internal")


async def test_multi_collection_search_keeps_each_clearance(corpus: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    write_tree(
        other,
        {"secret.md": "---\nsensitivity: restricted\n---\nsolar panels codeword restricted\n"},
    )
    async with (
        Collection.open(corpus, clearance="internal") as a,
        Collection.open(tmp_path / "index2", "other", base_dir=other, clearance="internal") as b,
    ):
        await b.ingest(other)
        found = await search_collections([a, b], "solar panels codeword", 50)
    assert found.results and not found.failures
    assert not leaked([r.content for r in found.results], "internal")
    assert "other" not in {r.collection for r in found.results}


async def test_a_document_relabelled_after_open_is_not_returned(
    corpus: Path, minilm: SentenceTransformerEmbedder
) -> None:
    async with Collection.open(corpus, embedder=minilm) as col:
        retriever = await Retriever.open(
            col.store,
            embedder=minilm,
            vector_store=col.vector_store,
            clearance="internal",
            collection="default",
        )
        before = await retriever.search("codeword internal", 3, mode="dense")
        assert "labels/internal.md" in {r.source for r in before.results}
        target = col.base_dir / "labels" / "internal.md"
        target.write_text(
            target.read_text("utf-8").replace("internal\nteam", "restricted\nteam"), "utf-8"
        )
        report = await col.ingest(col.base_dir)
        assert report.updated == ["labels/internal.md"]
        for mode in ("bm25", "dense", "hybrid"):
            after = await retriever.search("codeword internal", 3, mode=mode)
            assert "labels/internal.md" not in {r.source for r in after.results}, mode


async def test_bad_labels_and_clearances_are_refused(tmp_path: Path) -> None:
    base = tmp_path / "c"
    write_tree(base, {"x.md": "---\nsensitivity: top-secret\n---\nbody\n", "y.txt": "fine"})
    async with Collection.open(tmp_path / "i", base_dir=base) as col:
        report = await col.ingest(base)
        assert [f.source for f in report.failed] == ["x.md"]
        assert "top-secret" in report.failed[0].reason and "restricted" in report.failed[0].reason
        with pytest.raises(IngestionError, match="sensitivity"):
            await col.ingest(base, metadata={"sensitivity": "secret"})
        labelled = await col.ingest(base / "y.txt", metadata={"sensitivity": "confidential"})
        assert labelled.updated == ["y.txt"]
    with pytest.raises(ConfigurationError, match="unknown clearance 'secret'"):
        Collection.open(tmp_path / "i", clearance="secret")
    async with Collection.open(tmp_path / "i") as col:
        with pytest.raises(ConfigurationError, match="unknown clearance"):
            await Retriever.open(col.store, clearance="TOP")
